"""The 8da4w linears (`-qmode 8da4w`): `torchao.choose_qparams_affine` +
`et_vk.linear_dq8ca_q4gsw(x, x_scales, x_zero_points, weights, weight_sums, scales,
group_size, bias?)`, the 4-bit weights of linear_q4gsw times activations quantized per row
to int8 on the fly. Quantizing x and dequantizing it again before an f32 GEMM gives exactly
what torchao's eager module computes; the integer-accumulation helper `weight_sums` is not
needed for that and is left unread.
"""

from __future__ import annotations

import numbers

from ...gpu import STORAGE_USAGE, linear_grid
from ...values import Tensor, ValueList, numel
from ..registry import OpHandler, register
from .params import ELEMENT_THREADS, QPARAMS_BYTES, QPARAMS_ROWS, pack_qparams
from .q4gsw import LinearQ4gsw

INT8_MIN, INT8_MAX = -128, 127
# torchao's default eps for float32 inputs: torch.finfo(torch.float32).smallest_normal.
F32_SMALLEST_NORMAL = 2.0**-126


def _zero_point_is_int8(op: OpHandler, zero_points) -> bool:
    if zero_points.dtype not in ("int8", "int32"):
        op.fail(f"zero points {zero_points.label} are {zero_points.dtype}; int8 or int32 expected")
    return zero_points.dtype == "int8"


@register("et_vk.linear_dq8ca_q4gsw.default")
class LinearDq8caQ4gsw(LinearQ4gsw):
    """x is quantized to int8 per row with the scales and zero points of
    choose_qparams_affine, dequantized into a scratch buffer, then multiplied."""

    RESIZED = ("quant_grid",)

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 9:
            self.fail(
                "expected 9 arguments (x, x_scales, x_zero_points, weights, weight_sums, scales, "
                f"group_size, bias, out), got {len(args)}"
            )
        self.parse_weights(weights=3, scales=5, group_size=6, bias=7)
        self.x_scales, self.x_zero_points = self.tensor(1), self.tensor(2)
        if self.x_scales.dtype != "float32":
            self.fail(f"activation scales {self.x_scales.label} are {self.x_scales.dtype}; float32 expected")
        self.zp_int8 = _zero_point_is_int8(self, self.x_zero_points)

    @property
    def gemm_input(self):
        return self.x_dequantized

    async def build(self):
        self.x_dequantized = self.graph.device.create_buffer(
            self.x.max_nbytes, STORAGE_USAGE, label=f"{self.name}#{self.index}.x_dequantized"
        )
        await super().build()
        self.quant_params = self.params_buffer(QPARAMS_BYTES)
        self.quant_pipeline = await self.make_pipeline(
            "linear/quantize_dequantize", {"ZP_INT8": self.zp_int8}, entry_point="quantize_dequantize"
        )
        self.quant_group = self.graph.device.bind_group(
            self.quant_pipeline,
            [self.x_dequantized, self.x_zero_points.buffer, self.x.buffer, self.quant_params, self.x_scales.buffer],
        )

    def resize(self):
        super().resize()
        if numel(self.x_scales.sizes) != self.m or numel(self.x_zero_points.sizes) != self.m:
            self.fail(
                f"{self.m} rows of x but {numel(self.x_scales.sizes)} scales and "
                f"{numel(self.x_zero_points.sizes)} zero points"
            )
        self.write_params(self.quant_params, pack_qparams(self.m, self.k, INT8_MIN, INT8_MAX, 0.0))
        self.quant_grid = linear_grid(self.m * self.k, ELEMENT_THREADS)

    def record(self, recorder):
        if self.m:
            recorder.dispatch(self.quant_pipeline, self.quant_group, *self.quant_grid)
        super().record(recorder)


@register("torchao.choose_qparams_affine.default")
class ChooseQparamsAffine(OpHandler):
    """Per-row asymmetric quantization parameters of x (the 8da4w activation half).

    args: (x, mapping_type, block_size, target_dtype, quant_min, quant_max, eps,
    scale_dtype, zero_point_dtype, keepdim, [scales, zero_points]); dtypes are serialized
    as Null, so the output tensors' dtypes say what to write.
    """

    RESIZED = ("grid", "rows")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 11:
            self.fail(f"expected 11 arguments, got {len(args)}")
        self.x = self.tensor(0)
        outputs = self.value(10)
        if not isinstance(outputs, ValueList) or len(outputs.items) != 2:
            self.fail("the last argument should list two outputs (scales, zero points)")
        self.scales, self.zero_points = (graph.values[i] for i in outputs.items)
        if not isinstance(self.scales, Tensor) or not isinstance(self.zero_points, Tensor):
            self.fail("the outputs (scales, zero points) should be tensors")
        if self.x.dtype != "float32" or self.scales.dtype != "float32":
            self.fail("x and the scales must be float32")
        self.zp_int8 = _zero_point_is_int8(self, self.zero_points)
        if self.value(1) != "ASYMMETRIC":
            self.fail(f"mapping type {self.value(1)!r} is not supported (only ASYMMETRIC)")
        self.row_len = self.x.max_sizes[-1] if self.x.max_sizes else 1
        block_size = self.ints_arg(2)
        if len(block_size) != len(self.x.max_sizes) or block_size[-1] != self.row_len or any(b != 1 for b in block_size[:-1]):
            self.fail(f"block size {block_size} is not per row of x {list(self.x.max_sizes)}")
        self.qmin = INT8_MIN if self.value(4) is None else self.int_arg(4)
        self.qmax = INT8_MAX if self.value(5) is None else self.int_arg(5)
        zp_min, zp_max = (INT8_MIN, INT8_MAX) if self.zp_int8 else (-(2**31), 2**31 - 1)
        if not zp_min <= self.qmin < self.qmax <= zp_max:
            self.fail(f"quant range [{self.qmin}, {self.qmax}] does not fit the {self.zero_points.dtype} zero points")
        eps = self.value(6)
        if eps is not None and not isinstance(eps, numbers.Real):
            self.fail(f"eps should be a number, got {type(eps).__name__}")
        self.eps = F32_SMALLEST_NORMAL if eps is None else float(eps)
        self.keepdim = bool(self.value(9))

    async def build(self):
        self.params = self.params_buffer(QPARAMS_BYTES)
        self.pipeline = await self.make_pipeline("linear/choose_qparams", {"ZP_INT8": self.zp_int8}, entry_point="choose_qparams")
        self.group = self.graph.device.bind_group(
            self.pipeline, [self.scales.buffer, self.zero_points.buffer, self.x.buffer, self.params]
        )

    def resize(self):
        if self.x.sizes[-1] != self.row_len:
            self.fail(f"x rows have {self.x.sizes[-1]} values, the block size {self.row_len}")
        self.rows = numel(self.x.sizes[:-1])
        # keepdim keeps x's rank with a trailing 1; otherwise the row dim is dropped.
        sizes = (*self.x.sizes[:-1], 1) if self.keepdim else self.x.sizes[:-1]
        self.set_sizes(self.scales, sizes)
        self.set_sizes(self.zero_points, sizes)
        self.write_params(self.params, pack_qparams(self.rows, self.row_len, self.qmin, self.qmax, self.eps))
        self.grid = linear_grid(-(-self.rows // QPARAMS_ROWS), 1)

    def record(self, recorder):
        if self.rows:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
