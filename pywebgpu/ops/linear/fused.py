"""The 4-bit linears the runtime's fusion makes (runtime/fusion/): a linear plus a
residual, linears that read one x as one, and an RMSNorm folded into the linear it feeds."""

from __future__ import annotations

from ...gpu import STORAGE_USAGE
from ..registry import OpHandler
from . import plan
from .q4gsw import LinearQ4gsw, LinearQ4gswWeightOnly, bias_and_offsets, record_blocks


class LinearQ4gswResidual(LinearQ4gswWeightOnly):
    """out = linear_q4gsw(x) + residual, one dispatch. Not an op of the exported graph:
    the runtime puts it in place of a linear whose output only a same-shape add reads,
    maybe through views (runtime/fusion/): `out` and `residual` have the add's shape,
    the [M, N] result in its element order. Args: x, weights, scales, group_size, bias,
    residual, out."""

    def __init__(self, graph, index, name, args, x_silu_mul=False, offsets=None):
        LinearQ4gsw.__init__(self, graph, index, name, args)
        self.x_silu_mul = x_silu_mul
        if len(args) != 7:
            self.fail(f"expected 7 arguments (x, weights, scales, group_size, bias, residual, out), got {len(args)}")
        self.parse_weights(weights=1, scales=2, group_size=3, bias=4)
        self.set_offsets(offsets)
        self.residual = self.tensor(5)
        if self.residual.dtype != "float32":
            self.fail(f"the residual {self.residual.label} is {self.residual.dtype}; only float32 is supported")

    def set_output_sizes(self) -> tuple[int, int]:
        if self.residual.numel != self.m * self.n:
            self.fail(f"the residual is {list(self.residual.sizes)}, the linear's output {self.m}x{self.n}")
        self.set_sizes(self.out, self.residual.sizes)
        return self.n, self.n


class LinearQ4gswConcat(LinearQ4gsw):
    """Linears that read one x, as one dispatch: their packed weights, scales and biases
    concatenated by output at build (the constants themselves are then not uploaded).
    Not an op of the exported graph: the runtime puts it in place of the first of them
    (runtime/fusion/). Args: x, then one output per linear (at most 3), or one output
    holding all of them side by side ([..., N1 + N2 + ...]). `linears`: the handlers of
    the exported linear_q4gsw ops, in output order. With `silu_mul_out` (a gate and an up
    projection of equal widths, the kernels for CPU adapters) the one output holds
    silu(gate) * up ([..., N1])."""

    MAX_OUTPUTS = 3  # the kernels' out, out1, out2
    stores_by_blocks = False

    def __init__(self, graph, index, name, args, linears, silu_mul_out=False):
        super().__init__(graph, index, name, args)
        self.linears = linears
        self.silu_mul_out = silu_mul_out
        self.x, self.outputs = self.tensor(0), [self.tensor(i) for i in range(1, len(args))]
        self.out = self.outputs[0]
        first = linears[0]
        if len(self.outputs) not in (1, len(linears)) or len(self.outputs) > self.MAX_OUTPUTS:
            self.fail(f"{len(linears)} linears need one output or one each (at most {self.MAX_OUTPUTS})")
        if not self.can_concatenate(linears):
            self.fail("the linears differ in K, group size, weight row length or having a bias or offsets, or a weight is not a constant")
        self.k, self.group_size, self.weight_row_words = first.k, first.group_size, first.weight_row_words
        self.widths = [linear.n for linear in linears]
        self.n = sum(self.widths)
        self.scale_stride = -(-self.n // 4) * 4
        self.bias = first.bias  # only whether there is one: the buffer is concatenated
        self.offsets = first.offsets  # likewise
        if silu_mul_out and (len(linears) != 2 or self.widths[0] != self.widths[1] or len(self.outputs) != 1):
            self.fail("silu(gate) * up needs a gate and an up projection of one width and one output")
        if silu_mul_out and self.kernel_set != "cpu":
            self.fail("only the kernels for CPU adapters write silu(gate) * up")
        if len(self.outputs) == 1 and self.out.max_sizes[-1] != self.stored_width:
            self.fail(f"output {self.out.label} {list(self.out.max_sizes)} does not hold {self.stored_width} features")

    @property
    def stored_width(self) -> int:
        """Values a row of the one output holds: N, or N / 2 with silu_mul_out."""
        return self.n // 2 if self.silu_mul_out else self.n

    @staticmethod
    def can_concatenate(linears) -> bool:
        first = linears[0]
        for linear in linears:
            if (linear.k, linear.group_size, linear.weight_row_words) != (first.k, first.group_size, first.weight_row_words):
                return False
            if (linear.bias is None) != (first.bias is None) or (linear.offsets is None) != (first.offsets is None):
                return False
            if any(t is not None and t.constant is None for t in (linear.weights, linear.scales, linear.bias)):
                return False
        return True

    def host_constants(self) -> tuple:
        return tuple(linear.offsets for linear in self.linears if linear.offsets is not None)

    def packed_buffers(self):
        graph, device, linears = self.graph, self.graph.device, self.linears
        label = f"{self.name}#{self.index}"
        row_bytes = 4 * self.weight_row_words
        weights = device.create_buffer(self.n * row_bytes, STORAGE_USAGE, label=f"{label}.weights")
        scales = device.create_buffer(self.k // self.group_size * self.scale_stride * 4, STORAGE_USAGE, label=f"{label}.scales")
        with_bias = self.bias is not None or self.offsets is not None
        bias = bias_and_offsets(self, linears) if with_bias else None
        first_output = 0
        for linear in linears:
            graph.write_constant(weights, linear.weights, [(first_output * row_bytes, 0, linear.n * row_bytes)])
            # Scales are [groups, N padded]: each group's row of this linear's.
            groups = range(self.k // self.group_size)
            rows = [((g * self.scale_stride + first_output) * 4, g * linear.scale_stride * 4, linear.n * 4) for g in groups]
            graph.write_constant(scales, linear.scales, rows)
            first_output += linear.n
        return [(weights, scales, bias)]

    def set_output_sizes(self) -> tuple[int, int]:
        lead = self.x.sizes[:-1]
        if len(self.outputs) == 1:
            self.set_sizes(self.out, (*lead, self.stored_width))
            return self.stored_width, self.stored_width
        for tensor, width in zip(self.outputs, self.widths):
            self.set_sizes(tensor, (*lead, width))
        return self.widths[0], sum(self.widths[:2])


class RmsNormLinear(OpHandler):
    """An RMSNorm whose output only a 4-bit linear reads, as one op (runtime/fusion/
    puts it in place of the linear). Where the linear runs a kernel that can apply the
    norm (plan.norm_kernels: the GEMVs of decode), one dispatch: the kernel reads the
    norm's input and applies the norm itself (X_RMS_NORM). Otherwise the norm's own
    dispatch writes its output, then the linear reads it. `norm` and `linear` are the
    handlers of the exported ops; args are theirs, for liveness and resizing."""

    def __init__(self, graph, index, name, norm, linear):
        super().__init__(graph, index, name, (*norm.args, *linear.args))
        self.norm, self.linear = norm, linear
        if not isinstance(linear, LinearQ4gsw) or linear.x is not norm.out or linear.k != norm.width:
            self.fail(f"{linear.name} does not read {norm.name}'s output as its x")
        if linear.x_silu_mul or linear.residual is not None:
            self.fail(f"{linear.name} reads silu(gate) * up or adds a residual: it cannot apply a norm too")

    def scratch_bytes(self) -> int:
        return self.linear.scratch_bytes()

    def stored_constants(self) -> set:
        return self.linear.stored_constants()

    def host_constants(self) -> tuple:
        return self.linear.host_constants()

    async def build(self):
        await self.norm.build()
        await self.linear.build()
        fused = plan.norm_kernels(self.linear.kernels, self.linear.block_n)
        self.fused = {kernel: await self.linear.make_kernel(kernel, self.norm) for kernel in fused}

    async def build_upgrades(self) -> bool:
        return await self.linear.build_upgrades()

    def resize(self):
        self.norm.resize()
        self.linear.resize()

    def record(self, recorder):
        fused = self.fused.get(self.linear.kernel)
        if fused is None:
            self.norm.record(recorder)
            self.linear.record(recorder)
        elif self.linear.m:
            record_blocks(recorder, fused, self.linear.grids)
