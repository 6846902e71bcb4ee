"""et_vk.linear_q4gsw(x, weights, scales, group_size, bias?) (`-qmode 4w`): f32 x times
symmetric 4-bit weights with one f32 scale per group of `group_size` input features, and
LinearQ4gsw, the base of every 4-bit linear handler.

Offsets (runtime/fusion/ folds them in: an exact GGUF linear's `linear(groupsum(x), C)`
beside the 4-bit one): out[m, n] += sum_g C[n, g] * (the sum of x[m] over group g), C an
f32 constant [N, K / group_size], transposed like the scales into the bias binding after
the bias.

Weights stay packed on the GPU (see pte-format notes): W uint8 [N, K/2], low nibble first;
scales f32 transposed to [K / group_size, N padded to a multiple of 4]. x is [..., K] with
any live leading dims: M = their product. Which kernel runs is plan.py's choice.
"""

from __future__ import annotations

from array import array

from ...gpu import STORAGE_USAGE
from ...values import numel
from ..registry import OpHandler, register
from . import plan
from .params import PARAMS_BYTES, WORD_VALUES, dispatch_grid, pack_params, reduce_grid
from .shaders import kernel_build


class LinearQ4gsw(OpHandler):
    """Base of the 4-bit linears: parses the weight arguments, runs GEMV or GEMM on
    `self.gemm_input` (x itself, or a dequantized copy made by a subclass)."""

    RESIZED = ("grid", "k_splits", "kernel", "m", "reduce_grid")

    # With X_SILU_MUL (runtime/fusion/) x rows hold a gate and an up projection, 2K
    # values, and the linear reads silu(gate) * up.
    x_silu_mul = False
    # With silu_mul_out (LinearQ4gswConcat of a gate and an up projection, for the kernels
    # for CPU adapters) the linear writes silu(gate) * up, N / 2 values a row.
    silu_mul_out = False
    residual = None  # a tensor added to the output (LinearQ4gswResidual)
    offsets = None  # the constant C [N, K / group_size] of the offsets (module docstring)

    def parse_weights(self, weights: int, scales: int, group_size: int, bias: int):
        self.x, self.out = self.tensor(0), self.tensor(len(self.args) - 1)
        self.outputs = [self.out]
        self.weights, self.scales = self.tensor(weights), self.tensor(scales)
        self.bias = self.optional_tensor(bias)
        self.group_size = self.int_arg(group_size)
        for tensor in (self.x, self.out, self.scales, self.bias):
            if tensor is not None and tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if self.weights.dtype != "uint8" or len(self.weights.max_sizes) != 2:
            self.fail(f"weights {self.weights.label} should be uint8 [N, K/2], got {self.weights.dtype}{list(self.weights.max_sizes)}")
        if len(self.scales.max_sizes) != 2:
            self.fail(f"scales {self.scales.label} should be 2-d [K/group_size, N], got {list(self.scales.max_sizes)}")
        if not self.x.max_sizes or not self.out.max_sizes:
            self.fail(f"x {list(self.x.max_sizes)} and out {list(self.out.max_sizes)} must not be 0-d")
        self.k = self.x.max_sizes[-1] // 2 if self.x_silu_mul else self.x.max_sizes[-1]
        self.n = self.out.max_sizes[-1]
        n_rows, row_bytes = self.weights.max_sizes
        groups, scale_stride = self.scales.max_sizes
        if self.group_size <= 0 or self.group_size % WORD_VALUES or self.k % self.group_size:
            self.fail(f"group size {self.group_size} must be a positive multiple of {WORD_VALUES} dividing K={self.k}")
        if n_rows < self.n or 2 * row_bytes < self.k or row_bytes % 4:
            self.fail(f"weights {list(self.weights.max_sizes)} do not hold N={self.n} rows of K={self.k} word-aligned 4-bit values")
        if groups < self.k // self.group_size or scale_stride < self.n:
            self.fail(f"scales {list(self.scales.max_sizes)} do not cover {self.k // self.group_size} groups x N={self.n}")
        if self.bias is not None and numel(self.bias.max_sizes) < self.n:
            self.fail(f"bias {self.bias.label} has fewer than N={self.n} values")
        self.weight_row_words = row_bytes // 4
        self.scale_stride = scale_stride

    def set_offsets(self, offsets):
        """Add offsets C (a float32 constant tensor [N, K / group_size], or None)."""
        if offsets is None:
            return
        groups = self.k // self.group_size
        if offsets.dtype != "float32" or offsets.constant is None or tuple(offsets.max_sizes) != (self.n, groups):
            self.fail(f"offsets {offsets.label} should be a float32 constant [{self.n}, {groups}], got {offsets.dtype}{list(offsets.max_sizes)}")
        self.offsets = offsets

    @property
    def offsets_start(self) -> int:
        """Where the offsets start in the bias binding, in floats: after the bias, padded."""
        return -(-self.n // 4) * 4 if self.bias is not None else 0

    @property
    def gemm_input(self):
        return self.x.buffer

    def max_rows(self) -> int:
        """The most rows of x (M) any live size can have."""
        return numel(self.x.max_sizes[:-1])

    def gemm_plans(self):
        """(M, gemm_plan) for the row counts that stand for all those this linear may run
        a GEMM for (see plan.gemm_plans)."""
        return plan.gemm_plans(self.kernel_set, self.max_rows(), self.n, self.k)

    def scratch_bytes(self) -> int:
        """The split-K GEMMs' sums (one per split and output) at the worst M."""
        return max((4 * splits * m * self.n for m, (_, splits) in self.gemm_plans() if splits > 1), default=0)

    def packed_buffers(self):
        """The buffers of the packed weights, the scales and the bias (None if none);
        build() calls it once."""
        if self.offsets is not None:
            return self.weights.buffer, self.scales.buffer, bias_and_offsets(self, [self])
        return self.weights.buffer, self.scales.buffer, self.bias.buffer if self.bias is not None else None

    async def build(self):
        self.params = self.params_buffer(PARAMS_BYTES)
        self.packed = self.packed_buffers()
        subgroups = "subgroups" in self.graph.device.features
        kernels = plan.decode_kernels(self.kernel_set, subgroups, self.group_size)
        self.kernels = {kernel: await self.make_kernel(kernel) for kernel in kernels}
        for kernel, splits in sorted({gemm for _, gemm in self.gemm_plans()}):
            if splits == 1:
                self.kernels[kernel] = await self.make_kernel(kernel)
                continue
            # Split K: the GEMM writes its splits' sums to the graph's scratch buffer, which
            # gemm_reduce reads in x's slot.
            if f"{kernel}_split" not in self.kernels:
                self.kernels[f"{kernel}_split"] = await self.make_kernel(kernel, out=self.graph.scratch)
            if "gemm_reduce" not in self.kernels:
                self.kernels["gemm_reduce"] = await self.make_kernel("gemm_reduce", x=self.graph.scratch)

    async def build_upgrades(self) -> bool:
        if not plan.builds_upgrade(self.kernel_set, self.max_rows()):
            return False
        self.kernels["gemv_rows16"] = await self.make_kernel("gemv_rows16")
        return True

    async def make_kernel(self, kernel: str, norm=None, out=None, x=None):
        """The pipeline and bind group of `kernel` (see shaders.kernel_build); with `norm`
        (an RmsNorm handler whose output is x), one that reads the norm's input and
        applies it (plan.NORM_KERNELS). `out`, `x`: buffers bound in those slots instead
        (split K's scratch); gemm_reduce binds no weights."""
        device = self.graph.device
        source, entry_point, constants = kernel_build(
            kernel, "subgroups" in device.features, has_bias=self.bias is not None, x_silu_mul=self.x_silu_mul,
            norm_eps=norm.eps if norm is not None else None, silu_mul_out=self.silu_mul_out, group_size=self.group_size,
            has_offsets=self.offsets is not None,
        )
        weights, scales, bias = self.packed
        # Slots of absent operands: any read-only buffer of this dispatch for the bias and
        # the side operand (residual or norm weight: never both), the graph's spare
        # buffers for unused outputs.
        outputs = [tensor.buffer for tensor in self.outputs] + list(self.graph.spare_buffers)
        side = self.residual if self.residual is not None else norm.weight if norm is not None else None
        buffers = {
            0: out or outputs[0],
            1: x or (norm.src.buffer if norm is not None else self.gemm_input),
            2: weights,
            3: scales,
            4: bias or scales,
            5: self.params,
            6: side.buffer if side is not None else scales,
            7: outputs[1],
            8: outputs[2],
        }
        if kernel == "gemm_reduce":
            del buffers[2], buffers[3]
        pipeline = await device.compute_pipeline(source, label=f"linear_q4gsw#{self.index}", entry_point=entry_point, constants=constants)
        return pipeline, device.bind_group(pipeline, buffers)

    def resize(self):
        x_features = 2 * self.k if self.x_silu_mul else self.k
        if self.x.sizes[-1] != x_features:
            self.fail(f"x has {self.x.sizes[-1]} input features, the weights {x_features}")
        self.m = numel(self.x.sizes[:-1])
        splits = self.set_output_sizes()
        self.kernel, self.k_splits = plan.choose_kernel(self.kernel_set, self.m, self.n, self.k, self.kernels)
        self.write_params(
            self.params,
            pack_params(
                self.m, self.n, self.k, self.weight_row_words, self.scale_stride, self.group_size, *splits,
                self.residual is not None, self.silu_mul_out, self.k_splits, self.offsets_start,
            ),
        )
        self.grid = dispatch_grid(self.kernel, self.m, self.n, self.k_splits)
        if self.kernel in ("gemm", "gemm_wide"):
            self.reduce_grid = reduce_grid(self.m, self.n)

    def set_output_sizes(self) -> tuple[int, int]:
        """Set the outputs' live sizes; returns the kernel's (split0, split1): all N
        outputs go to `out`."""
        self.set_sizes(self.out, (*self.x.sizes[:-1], self.n))
        return self.n, self.n

    def record(self, recorder):
        if not self.m:
            return
        if self.k_splits > 1:
            recorder.dispatch(*self.kernels[f"{self.kernel}_split"], *self.grid)
            recorder.dispatch(*self.kernels["gemm_reduce"], *self.reduce_grid)
        else:
            recorder.dispatch(*self.kernels[self.kernel], *self.grid)


def bias_and_offsets(op: LinearQ4gsw, linears) -> object:
    """One buffer of the biases of `linears` (the handlers whose outputs `op` computes, in
    order; all or none with a bias and with offsets) and their offsets from
    op.offsets_start: [N] then C transposed like the scales, [K / group_size,
    op.scale_stride], each linear's outputs after the last's."""
    groups = op.k // op.group_size
    start = op.offsets_start
    buffer = op.graph.device.create_buffer(4 * (start + groups * op.scale_stride), STORAGE_USAGE, label=f"{op.name}#{op.index}.bias_offsets")
    transposed = array("f", bytes(4 * groups * op.scale_stride)) if op.offsets is not None else None
    first_output = 0
    for linear in linears:
        if linear.bias is not None:
            op.graph.write_constant(buffer, linear.bias, [(first_output * 4, 0, linear.n * 4)])
        if linear.offsets is not None:
            # C [N, G] as stored, transposed: column g is every G-th value from g.
            offsets = array("f", op.graph.constant_bytes(linear.offsets)[: 4 * linear.n * groups])
            for g in range(groups):
                row = g * op.scale_stride + first_output
                transposed[row : row + linear.n] = offsets[g::groups]
        first_output += linear.n
    if transposed is not None:
        op.graph.device.write_buffer(buffer, transposed, 4 * start)
    return buffer


@register("et_vk.linear_q4gsw.default")
class LinearQ4gswWeightOnly(LinearQ4gsw):
    def __init__(self, graph, index, name, args, x_silu_mul=False, offsets=None):
        super().__init__(graph, index, name, args)
        self.x_silu_mul = x_silu_mul
        if len(args) != 6:
            self.fail(f"expected 6 arguments (x, weights, scales, group_size, bias, out), got {len(args)}")
        self.parse_weights(weights=1, scales=2, group_size=3, bias=4)
        self.set_offsets(offsets)
