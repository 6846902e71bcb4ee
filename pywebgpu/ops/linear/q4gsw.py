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

A linear whose weights, scales or bias and offsets one storage binding cannot hold is
stored by blocks of outputs (row_blocks.py), one dispatch a block: each block's buffers
hold its outputs' weight rows, scale columns and bias and offsets, and its kernels bind
`out` (and a residual) from the block's first output on (a row's outputs stay N apart:
p.split0 = N).
"""

from __future__ import annotations

from array import array
from functools import cached_property

from ...gpu import STORAGE_USAGE
from ...values import numel
from ..registry import OpHandler, register
from ..row_blocks import row_blocks, store_row_blocks
from . import plan
from .params import PARAMS_BYTES, WORD_VALUES, dispatch_grid, pack_params, reduce_grid
from .shaders import kernel_build

# Outputs per block, in multiples: a block's first output is then at a multiple of 256
# bytes of `out`, WebGPU's default minStorageBufferOffsetAlignment (every adapter's most).
BLOCK_OUTPUTS = 64


class LinearQ4gsw(OpHandler):
    """Base of the 4-bit linears: parses the weight arguments, runs GEMV or GEMM on
    `self.gemm_input` (x itself, or a dequantized copy made by a subclass)."""

    RESIZED = ("grids", "k_splits", "kernel", "m", "reduce_grids")

    # With X_SILU_MUL (runtime/fusion/) x rows hold a gate and an up projection, 2K
    # values, and the linear reads silu(gate) * up.
    x_silu_mul = False
    # With silu_mul_out (LinearQ4gswConcat of a gate and an up projection, for the kernels
    # for CPU adapters) the linear writes silu(gate) * up, N / 2 values a row.
    silu_mul_out = False
    residual = None  # a tensor added to the output (LinearQ4gswResidual)
    offsets = None  # the constant C [N, K / group_size] of the offsets (module docstring)
    # Whether constants over one binding may be stored by output blocks (not where a
    # fusion concatenates linears).
    stores_by_blocks = True

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
        if self.n % 4 or scale_stride % 4:
            # The kernels read 4 outputs' scales, bias or offsets in one load.
            self.fail(f"N={self.n} and the scales' row of {scale_stride} must be multiples of 4, as ExecuTorch's Vulkan exporter writes them")
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

    @cached_property
    def blocks(self) -> list[tuple[int, int]]:
        """(first output, outputs) of each block of outputs the constants are stored by:
        one block where one binding holds each of them whole (module docstring)."""
        if not self.stores_by_blocks or any(t is not None and t.constant is None for t in (self.weights, self.scales, self.bias)):
            return [(0, self.n)]
        groups = self.k // self.group_size
        output_bytes = [4 * self.weight_row_words, 4 * groups]
        if self.bias is not None or self.offsets is not None:
            output_bytes.append(4 * ((self.bias is not None) + groups * (self.offsets is not None)))
        return row_blocks(self.n, output_bytes, self.graph.device, BLOCK_OUTPUTS)

    @property
    def block_n(self) -> int:
        """The outputs of the widest block: those the kernels are chosen for."""
        return self.blocks[0][1]

    def block_layout(self, outputs: int) -> tuple[int, int]:
        """(scale stride, offsets start) in the buffers of a block of `outputs` outputs."""
        if len(self.blocks) == 1:
            return self.scale_stride, self.offsets_start
        stride = -(-outputs // 4) * 4
        return stride, stride if self.bias is not None else 0

    def host_constants(self) -> tuple:
        return () if self.offsets is None else (self.offsets,)  # transposed on the host

    def stored_constants(self) -> set:
        if len(self.blocks) == 1:
            return set()
        return {t.id for t in (self.weights, self.scales, self.bias, self.offsets) if t is not None}

    @property
    def gemm_input(self):
        return self.x.buffer

    def max_rows(self) -> int:
        """The most rows of x (M) any live size can have."""
        return numel(self.x.max_sizes[:-1])

    def gemm_plans(self):
        """(M, gemm_plan) for the row counts that stand for all those this linear may run
        a GEMM for (see plan.gemm_plans)."""
        return plan.gemm_plans(self.kernel_set, self.max_rows(), self.block_n, self.k)

    def scratch_bytes(self) -> int:
        """The split-K GEMMs' sums (one per split and output of a block) at the worst M."""
        return max((4 * splits * m * self.block_n for m, (_, splits) in self.gemm_plans() if splits > 1), default=0)

    def packed_buffers(self):
        """Per block, the buffers of its packed weights, scales and bias (None if none);
        build() calls it once."""
        if len(self.blocks) > 1:
            return self.block_buffers()
        if self.offsets is not None:
            return [(self.weights.buffer, self.scales.buffer, bias_and_offsets(self, [self]))]
        return [(self.weights.buffer, self.scales.buffer, self.bias.buffer if self.bias is not None else None)]

    def block_buffers(self):
        """packed_buffers' of a linear stored by blocks, written from the program's bytes."""
        graph, groups = self.graph, self.k // self.group_size
        weights = store_row_blocks(self, self.weights, self.blocks, 4 * self.weight_row_words)
        packed = []
        for (first, outputs), block_weights in zip(self.blocks, weights):
            stride, start = self.block_layout(outputs)
            label = f"{self.scales.label}.outputs{first}-{first + outputs - 1}"
            scales = graph.device.create_buffer(4 * groups * stride, STORAGE_USAGE, label=label)
            graph.write_constant(scales, self.scales, [(4 * g * stride, 4 * (g * self.scale_stride + first), 4 * outputs) for g in range(groups)])
            bias = None
            if self.bias is not None or self.offsets is not None:
                bias = graph.device.create_buffer(4 * (start + groups * stride), STORAGE_USAGE, label=f"{label}.bias_offsets")
                if self.bias is not None:
                    graph.write_constant(bias, self.bias, [(0, 4 * first, 4 * outputs)])
                if self.offsets is not None:
                    graph.device.write_buffer(bias, transposed_offsets(self, first, outputs, stride), 4 * start)
            packed.append((block_weights, scales, bias))
        return packed

    async def build(self):
        self.params = [self.params_buffer(PARAMS_BYTES) for _ in self.blocks]
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
        """The pipeline and a bind group per block of `kernel` (see shaders.kernel_build);
        with `norm` (an RmsNorm handler whose output is x), one that reads the norm's input
        and applies it (plan.NORM_KERNELS). `out`, `x`: buffers bound in those slots
        instead (split K's scratch); gemm_reduce binds no weights."""
        device = self.graph.device
        source, entry_point, constants = kernel_build(
            kernel, "subgroups" in device.features, has_bias=self.bias is not None, x_silu_mul=self.x_silu_mul,
            norm_eps=norm.eps if norm is not None else None, silu_mul_out=self.silu_mul_out, group_size=self.group_size,
            has_offsets=self.offsets is not None,
        )
        pipeline = await device.compute_pipeline(source, label=f"linear_q4gsw#{self.index}", entry_point=entry_point, constants=constants)
        # Slots of absent operands: any read-only buffer of this dispatch for the bias and
        # the side operand (residual or norm weight: never both), the graph's spare
        # buffers for unused outputs.
        outputs = [tensor.buffer for tensor in self.outputs] + list(self.graph.spare_buffers)
        side = self.residual if self.residual is not None else norm.weight if norm is not None else None
        groups = []
        for (first, _), (weights, scales, bias), params in zip(self.blocks, self.packed, self.params):
            buffers = {
                0: out or from_output(outputs[0], first),
                1: x or (norm.src.buffer if norm is not None else self.gemm_input),
                2: weights,
                3: scales,
                4: bias or scales,
                5: params,
                6: (from_output(side.buffer, first) if self.residual is not None else side.buffer) if side is not None else scales,
                7: outputs[1],
                8: outputs[2],
            }
            if kernel == "gemm_reduce":
                del buffers[2], buffers[3]
            groups.append(device.bind_group(pipeline, buffers))
        return pipeline, groups

    def resize(self):
        x_features = 2 * self.k if self.x_silu_mul else self.k
        if self.x.sizes[-1] != x_features:
            self.fail(f"x has {self.x.sizes[-1]} input features, the weights {x_features}")
        self.m = numel(self.x.sizes[:-1])
        splits = self.set_output_sizes()
        self.kernel, self.k_splits = plan.choose_kernel(self.kernel_set, self.m, self.block_n, self.k, self.kernels)
        for (_, outputs), params in zip(self.blocks, self.params):
            stride, offsets_start = self.block_layout(outputs)
            self.write_params(
                params,
                pack_params(
                    self.m, outputs, self.k, self.weight_row_words, stride, self.group_size, *splits,
                    self.residual is not None, self.silu_mul_out, self.k_splits, offsets_start,
                ),
            )
        self.grids = [dispatch_grid(self.kernel, self.m, outputs, self.k_splits) for _, outputs in self.blocks]
        if self.kernel in ("gemm", "gemm_wide"):
            self.reduce_grids = [reduce_grid(self.m, outputs) for _, outputs in self.blocks]

    def set_output_sizes(self) -> tuple[int, int]:
        """Set the outputs' live sizes; returns the kernel's (split0, split1): all N
        outputs go to `out`."""
        self.set_sizes(self.out, (*self.x.sizes[:-1], self.n))
        return self.n, self.n

    def record(self, recorder):
        if not self.m:
            return
        if self.k_splits > 1:
            (split, split_groups), (reduce, reduce_groups) = self.kernels[f"{self.kernel}_split"], self.kernels["gemm_reduce"]
            for block in range(len(self.blocks)):
                recorder.dispatch(split, split_groups[block], *self.grids[block])
                recorder.dispatch(reduce, reduce_groups[block], *self.reduce_grids[block])
        else:
            record_blocks(recorder, self.kernels[self.kernel], self.grids)


def from_output(buffer, first: int):
    """`buffer` (an [M, N] output or residual) bound from output `first` of its first row."""
    return (buffer, 4 * first, buffer.size - 4 * first) if first else buffer


def record_blocks(recorder, kernel, grids):
    """Dispatch `kernel` (a pipeline and its bind group per block) once per block."""
    pipeline, groups = kernel
    for group, grid in zip(groups, grids):
        recorder.dispatch(pipeline, group, *grid)


def transposed_offsets(op: LinearQ4gsw, first: int, outputs: int, stride: int) -> array:
    """The offsets C [N, G] of `op`'s outputs first .. first + outputs - 1, transposed like
    the scales: [G, stride]."""
    groups = op.k // op.group_size
    offsets = array("f", op.graph.constant_bytes(op.offsets)[4 * first * groups : 4 * (first + outputs) * groups])
    transposed = array("f", bytes(4 * groups * stride))
    for g in range(groups):
        transposed[g * stride : g * stride + outputs] = offsets[g::groups]
    return transposed


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
            columns = transposed_offsets(linear, 0, linear.n, linear.n)
            for g in range(groups):
                row = g * op.scale_stride + first_output
                transposed[row : row + linear.n] = columns[g * linear.n : (g + 1) * linear.n]
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
