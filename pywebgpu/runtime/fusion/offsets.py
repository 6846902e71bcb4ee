"""Fusion of an exact GGUF linear's offset term into the 4-bit linear beside it:
add(linear_q4gsw(x, P, S), linear(sum(view(x, [..., G, gs]), [-1]), C)) becomes the
linear_q4gsw with offsets C [N, G] (ops.linear.q4gsw), either add operand order."""

from __future__ import annotations

from dataclasses import dataclass

from ...ops.linear import LinearQ4gswWeightOnly
from ...ops.linear_f32 import LinearF32
from ...ops.sum import SumDims
from ...ops.view import ContiguousCopy, ViewCopy
from ...values import Tensor
from .matching import OnlyReaders, add_args, fold, is_plain_linear


@dataclass
class OffsetsMatch:
    """The add of a plain 4-bit linear's output and the f32 linear of the group sums of
    its x (`offsets`, after `group_sums`), each read (through `views`) by the add alone."""

    linear: LinearQ4gswWeightOnly
    offsets: LinearF32
    group_sums: list  # the view regrouping x, the sum and the views after it
    add: int
    views: list
    out: int


def _reader_through_views(only_reader, op):
    """(the op that alone reads op's output through views, the value it reads, the views)."""
    value_id, index, views = only_reader.through_views(op.out.id, op.index)
    return index, value_id, views


def _group_sums_of(only_reader, writers, offsets: LinearF32, linear: LinearQ4gswWeightOnly):
    """The indexes of the view and the sum (and the views after it) where offsets.x is
    the sum over the last dim of the linear's x regrouped by its group size, each read by
    the next alone; None otherwise."""
    group_sum = writers.get(offsets.x.id)
    while isinstance(group_sum, ContiguousCopy):  # the exporter flattens the sums to 2-d
        group_sum = writers.get(group_sum.src.id)
    if type(group_sum) is not SumDims or group_sum.reduced != 1 or group_sum.keepdim:
        return None
    view = writers.get(group_sum.x.id)
    if type(view) is not ViewCopy or view.src.id != linear.x.id:
        return None
    lead, k = linear.x.max_sizes[:-1], linear.x.max_sizes[-1]
    if tuple(view.out.max_sizes) != (*lead, k // linear.group_size, linear.group_size):
        return None
    read, reader, views = only_reader.through_views(group_sum.out.id, group_sum.index)
    if only_reader(view.out.id, view.index) != group_sum.index or reader != offsets.index or read != offsets.x.id:
        return None
    return [view.index, group_sum.index, *views]


def _match_offsets(graph, only_reader, writers, linear) -> OffsetsMatch | None:
    if not is_plain_linear(linear) or linear.offsets is not None:
        return None
    add_index, t, views = _reader_through_views(only_reader, linear)
    add = add_args(graph.ops[add_index]) if add_index is not None else None
    if add is None or t not in (add.a, add.b) or graph.values[add.alpha] not in (None, 1, 1.0):
        return None
    other = add.other(t)
    offsets = writers.get(other)
    offsets_views = []
    while isinstance(offsets, ContiguousCopy):  # the offset term's views, back to its linear
        offsets_views.append(offsets.index)
        offsets = writers.get(offsets.src.id)
    if type(offsets) is not LinearF32 or offsets.bias is not None or offsets.weight.constant is None:
        return None
    reader, _, between = _reader_through_views(only_reader, offsets)
    if reader != add_index or sorted(between) != sorted(offsets_views):
        return None
    out = graph.values[add.out]
    if not isinstance(out, Tensor) or tuple(out.max_sizes) != (*linear.x.max_sizes[:-1], linear.n):
        return None
    if tuple(offsets.weight.max_sizes) != (linear.n, linear.k // linear.group_size):
        return None
    grouping = _group_sums_of(only_reader, writers, offsets, linear)
    if grouping is None:
        return None
    return OffsetsMatch(linear, offsets, grouping, add_index, [*views, *offsets_views], add.out)


def fuse_linear_offsets(graph):
    """The offset term of an exact GGUF linear moves into its 4-bit linear (offsets C)."""
    only_reader = OnlyReaders(graph)
    writers = {op.out.id: op for op in graph.ops if isinstance(op, (LinearF32, SumDims, ContiguousCopy))}
    for linear in list(graph.ops):
        match = _match_offsets(graph, only_reader, writers, linear)
        if match is None:
            continue
        args = (*linear.args[:-1], match.out)
        name = "linear_q4gsw + offsets (fused)"
        graph.ops[match.add] = LinearQ4gswWeightOnly(graph, match.add, name, args, offsets=match.offsets.weight)
        for folded in (linear.index, match.offsets.index, *match.group_sums, *match.views):
            fold(graph, folded, match.add)
