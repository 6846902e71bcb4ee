"""Fusion around the 4-bit linears: the MLP's SiLU gate, residual adds, linears of one
input, and the RMSNorm before a linear."""

from __future__ import annotations

from dataclasses import dataclass

from ...ops.linear import LinearQ4gswConcat, LinearQ4gswResidual, LinearQ4gswWeightOnly, RmsNormLinear
from ...ops.norm import RmsNorm
from ...ops.unary import SiluMul
from ...values import Tensor
from .matching import LinearArgs, OnlyReaders, add_args, fold, is_plain_linear, mul_args, sigmoid_args


@dataclass
class SiluMulMatch:
    """sigmoid(x) → s, mul(x, s) → t, mul(t, y) → out: ops `sigmoid`, `gate_mul`, `up_mul`."""

    sigmoid: int
    gate_mul: int
    up_mul: int
    x: int
    y: int
    out: int


def _match_silu_mul(graph, only_reader, sigmoid) -> SiluMulMatch | None:
    sigmoid_call = sigmoid_args(sigmoid)
    if sigmoid_call is None:
        return None
    x, s = sigmoid_call.x, sigmoid_call.out
    gate_mul = only_reader(s, sigmoid.index)
    gate = mul_args(graph.ops[gate_mul]) if gate_mul is not None else None
    if gate is None or {gate.a, gate.b} != {x, s}:
        return None
    t = gate.out
    up_mul = only_reader(t, gate_mul)
    up = mul_args(graph.ops[up_mul]) if up_mul is not None else None
    if up is None:
        return None
    y = up.other(t)
    tensors = [graph.values[v] for v in (x, y, up.out)]
    if t not in (up.a, up.b) or y == t or not all(isinstance(v, Tensor) for v in tensors):
        return None
    if not tensors[0].max_sizes == tensors[1].max_sizes == tensors[2].max_sizes:
        return None  # broadcasting: left to the binary kernel
    return SiluMulMatch(sigmoid.index, gate_mul, up_mul, x, y, up.out)


def fuse_silu_mul(graph):
    """torch's `F.silu(gate) * up` (sigmoid, then two muls), where nothing else reads the
    intermediates, becomes one SiluMul."""
    only_reader = OnlyReaders(graph)
    for sigmoid in list(graph.ops):
        match = _match_silu_mul(graph, only_reader, sigmoid)
        if match is None:
            continue
        graph.ops[match.up_mul] = SiluMul(graph, match.up_mul, "silu_mul (fused)", (match.x, match.y, match.out))
        fold(graph, match.sigmoid, match.up_mul)
        fold(graph, match.gate_mul, match.up_mul)


@dataclass
class LinearResidualMatch:
    """out = residual + linear(...), the linear's output read (through `views`) by the add alone."""

    linear: LinearQ4gswWeightOnly
    add: int
    views: list
    residual: int
    out: int


def _match_linear_residual(graph, only_reader, linear) -> LinearResidualMatch | None:
    if type(linear) is not LinearQ4gswWeightOnly:
        return None
    # The output, through any views (the exporter reshapes around 2-d linears).
    t, index, views = only_reader.through_views(linear.out.id, linear.index)
    add = add_args(graph.ops[index]) if index is not None else None
    if add is None or t not in (add.a, add.b):
        return None
    residual = add.other(t)
    if residual == t or graph.values[add.alpha] not in (None, 1, 1.0):
        return None
    tensors = [graph.values[v] for v in (t, residual, add.out)]
    if not all(isinstance(v, Tensor) for v in tensors):
        return None
    if not tensors[0].max_sizes == tensors[1].max_sizes == tensors[2].max_sizes:
        return None  # broadcasting: left to the binary kernel
    return LinearResidualMatch(linear, index, views, residual, add.out)


def fuse_linear_residual(graph):
    """A residual add of a linear's output moves into the linear's store (LinearQ4gswResidual)."""
    only_reader = OnlyReaders(graph)
    for linear in list(graph.ops):
        match = _match_linear_residual(graph, only_reader, linear)
        if match is None:
            continue
        call = LinearArgs(*linear.args)
        args = (call.x, call.weights, call.scales, call.group_size, call.bias, match.residual, match.out)
        graph.ops[match.add] = LinearQ4gswResidual(graph, match.add, _named("linear_q4gsw + add", linear), args, offsets=linear.offsets)
        for folded in (linear.index, *match.views):
            fold(graph, folded, match.add)


@dataclass
class MlpMatch:
    """The gate and up projections of one x, read (through views) by one SiluMul alone."""

    gate: LinearQ4gswWeightOnly
    up: LinearQ4gswWeightOnly
    views: list  # the views between them and the SiluMul
    silu_mul: SiluMul

    @property
    def first(self) -> int:
        return min(self.gate.index, self.up.index)

    @property
    def last(self) -> int:
        return max(self.gate.index, self.up.index)


def _mlp_matches(graph, only_reader):
    # The plain linears that a SiluMul alone reads (through views): what it reads → the
    # linear and the views between.
    feeding = {}
    for op in graph.ops:
        if is_plain_linear(op):
            value_id, reader, views = only_reader.through_views(op.out.id, op.index)
            if reader is not None and type(graph.ops[reader]) is SiluMul:
                feeding[value_id] = (op, views)
    for silu_mul in list(graph.ops):
        if type(silu_mul) is not SiluMul:
            continue
        gate_out, up_out = silu_mul.x.id, silu_mul.y.id
        if gate_out not in feeding or up_out not in feeding or gate_out == up_out:
            continue
        (gate, gate_views), (up, up_views) = feeding[gate_out], feeding[up_out]
        if gate.x.id != up.x.id or not LinearQ4gswConcat.can_concatenate([gate, up]):
            continue
        if not gate.out.max_sizes == up.out.max_sizes == silu_mul.x.max_sizes:
            continue  # the views reshape: silu(gate) * up would be read in another order
        yield MlpMatch(gate, up, [*gate_views, *up_views], silu_mul)


def fuse_mlp(graph):
    """The MLP's gate and up projections become one linear, and the SiluMul between it and
    the down projection goes: on CPU adapters the fused linear writes silu(gate) * up
    itself; else it writes gate and up side by side, which the down projection reads as
    silu(gate) * up (x_silu_mul)."""
    only_reader = OnlyReaders(graph)
    for match in _mlp_matches(graph, only_reader):
        gate, up, silu_mul, first = match.gate, match.up, match.silu_mul, match.first
        x, out = gate.x.id, silu_mul.out.id
        if graph.kernel_set == "cpu":
            name = "linear_q4gsw gate|up + silu_mul (fused)"
            graph.ops[first] = LinearQ4gswConcat(graph, first, name, (x, out), [gate, up], silu_mul_out=True)
            for index in (match.last, *match.views, silu_mul.index):
                fold(graph, index, first)
            continue
        down_index = only_reader(out, silu_mul.index)
        down = graph.ops[down_index] if down_index is not None else None
        if type(down) not in (LinearQ4gswWeightOnly, LinearQ4gswResidual) or down.x.id != out or down.x_silu_mul:
            continue
        sizes = (*gate.out.max_sizes[:-1], gate.n + up.n)
        both = Tensor(len(graph.values), "float32", sizes, sizes)
        graph.values.append(both)
        graph.ops[first] = LinearQ4gswConcat(graph, first, "linear_q4gsw gate|up (fused)", (x, both.id), [gate, up])
        fold(graph, match.last, first)
        for index in (*match.views, silu_mul.index):
            fold(graph, index, down.index)
        name = _named("silu_mul + " + ("linear_q4gsw + add" if type(down) is LinearQ4gswResidual else "linear_q4gsw"), down)
        graph.ops[down.index] = type(down)(graph, down.index, name, _with_x(down, both.id), x_silu_mul=True, offsets=down.offsets)


def fuse_shared_input_linears(graph):
    """Plain linears of one x (attention's q, k and v projections) become one dispatch
    writing each output to its own tensor, placed at the first of them."""
    by_input: dict[int, list] = {}
    for op in graph.ops:
        if is_plain_linear(op):
            by_input.setdefault(op.x.id, []).append(op)
    for linears in by_input.values():
        for start in range(0, len(linears), LinearQ4gswConcat.MAX_OUTPUTS):
            chunk = linears[start : start + LinearQ4gswConcat.MAX_OUTPUTS]
            if len(chunk) < 2 or not LinearQ4gswConcat.can_concatenate(chunk):
                continue
            first = chunk[0].index
            args = (chunk[0].x.id, *(linear.out.id for linear in chunk))
            graph.ops[first] = LinearQ4gswConcat(graph, first, f"linear_q4gsw x{len(chunk)} (fused)", args, chunk)
            for linear in chunk[1:]:
                fold(graph, linear.index, first)


def fuse_rms_norm_linear(graph):
    """An RMSNorm whose output only a linear reads as x (a plain one, or one of one x)
    becomes one op (RmsNormLinear); a plain linear reading it through views that keep its
    rows is given the norm's output itself."""
    only_reader = OnlyReaders(graph)
    for norm in list(graph.ops):
        if type(norm) is not RmsNorm:
            continue
        x, index, views = only_reader.through_views(norm.out.id, norm.index)
        linear = graph.ops[index] if index is not None else None
        if type(linear) not in (LinearQ4gswWeightOnly, LinearQ4gswConcat):
            continue
        if views:
            if not is_plain_linear(linear) or linear.x.id != x or graph.values[x].max_sizes[-1] != norm.width:
                continue
            linear = LinearQ4gswWeightOnly(graph, index, linear.name, _with_x(linear, norm.out.id), offsets=linear.offsets)
            for folded in views:
                fold(graph, folded, index)
        if linear.x is not norm.out or linear.x_silu_mul or linear.k != norm.width:
            continue
        linear_name = "linear_q4gsw" if type(linear) is LinearQ4gswWeightOnly else linear.name.removesuffix(" (fused)")
        graph.ops[index] = RmsNormLinear(graph, index, f"rms_norm + {linear_name} (fused)", norm, linear)
        fold(graph, norm.index, index)


def _named(fused: str, linear) -> str:
    """The name of a fused op of `linear`: "<fused> (fused)", with "+ offsets" if it has them."""
    return f"{fused} + offsets (fused)" if linear.offsets is not None else f"{fused} (fused)"


def _with_x(linear, x_id: int) -> tuple:
    """The arguments of `linear` with another x (a linear's first argument)."""
    return (x_id, *linear.args[1:])
