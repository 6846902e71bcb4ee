"""Fusion of RoPE: its tables' slices at the position, and RoPE into attention."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ops.attention import RopeSdpaWithKvCache, SdpaWithKvCache
from ...ops.indexing import SliceCopy
from ...ops.rope import ApplyRotaryEmb, RotaryEmbAtPosition
from ...ops.symint import SelectAsSymInt, SymArithmetic, SymSize
from ...ops.view import ContiguousCopy
from ...values import SymInt
from .matching import BinaryArgs, OnlyReaders, SliceArgs, constant_aliases, fold, make_no_op, readers


@dataclass
class TableSlice:
    """A slice_copy of a table's rows [start, end) (dim 0, step 1), read through `views`."""

    op: SliceCopy
    args: SliceArgs
    views: list


@dataclass
class RopeTables:
    """The cos and sin slices that RoPE ops read, and the views in between."""

    cos: TableSlice
    sin: TableSlice
    ropes: list = field(default_factory=list)
    views: set = field(default_factory=set)


def _table_slice(graph, writers, value_id) -> TableSlice | None:
    """The slice of rows at a start whose output `value_id` is, through views, if it is one."""
    views, op = [], writers.get(value_id)
    while isinstance(op, ContiguousCopy):
        views.append(op)
        op = writers.get(op.src.id)
    if type(op) is not SliceCopy or op.dim != 0:
        return None
    args = SliceArgs(*op.args)
    if graph.values[args.step] not in (None, 1) or graph.values[args.start] is None or graph.values[args.end] is None:
        return None
    return TableSlice(op, args, views)


def _rope_tables(graph) -> list[RopeTables]:
    writers = {op.out.id: op for op in graph.ops if isinstance(op, (SliceCopy, ContiguousCopy))}
    found: dict[tuple, RopeTables] = {}
    for rope in graph.ops:
        if type(rope) is not ApplyRotaryEmb:
            continue
        cos, sin = _table_slice(graph, writers, rope.cos.id), _table_slice(graph, writers, rope.sin.id)
        if cos is None or sin is None or cos.op is sin.op or (cos.args.start, cos.args.end) != (sin.args.start, sin.args.end):
            continue
        tables = found.setdefault((cos.op, sin.op), RopeTables(cos, sin))
        tables.ropes.append(rope)
        tables.views.update(cos.views + sin.views)
    return list(found.values())


def fuse_rope_tables(graph):
    """RoPE ops reading their tables' slices at the position read the whole tables from the
    position on the GPU (RotaryEmbAtPosition), where nothing else reads the slices."""
    readers_of = readers(graph.ops, graph.values)
    outputs = {tensor.id for tensor in graph.outputs}
    sums = {op.out.id: op for op in graph.ops if type(op) is SymArithmetic and op.name == "add"}
    for tables in _rope_tables(graph):
        cos, sin, ropes = tables.cos.op, tables.sin.op, tables.ropes
        folded = {cos.index, sin.index, *(view.index for view in tables.views)}
        fused = {rope.index for rope in ropes}
        made = [cos.out.id, sin.out.id, *(view.out.id for view in tables.views)]
        if any(value_id in outputs or not set(readers_of.get(value_id, ())) <= folded | fused for value_id in made):
            continue  # a slice is read by something else too: left as it is
        start, end = tables.cos.args.start, tables.cos.args.end
        # Where the slices end at start + a SymInt (Llama: input_pos + seq_len), that one is
        # their length: no subtraction to resize at every step.
        addends = []
        if end in sums:
            total = BinaryArgs.of_symint(sums[end])
            addends = [total.a, total.b]
        if start in addends:
            addends.remove(start)
        if len(addends) == 1 and type(graph.values[addends[0]]) is SymInt:
            (length_id,) = addends
            fold(graph, cos.index, ropes[0].index)
        else:
            length_id = len(graph.values)
            graph.values.append(SymInt(length_id, 0))
            graph.ops[cos.index] = SymArithmetic(graph, cos.index, "sub", (end, start, length_id))
        for index in folded - {cos.index}:
            fold(graph, index, ropes[0].index)
        for rope in ropes:
            args = (rope.xq.id, rope.xk.id, cos.src.id, sin.src.id, start, length_id, rope.xq_out.id, rope.xk_out.id)
            graph.ops[rope.index] = RotaryEmbAtPosition(graph, rope.index, "apply_rotary_emb at position (fused)", args)


def fold_unread_symints(graph):
    """Host arithmetic whose SymInt nothing reads any more (the RoPE slices' end, once
    fused) becomes a no-op: else it would be resized whenever its arguments change."""
    readers_of = readers(graph.ops, graph.values)
    for op in reversed(graph.ops):  # readers come after writers: one pass from the end
        if isinstance(op, (SymSize, SymArithmetic, SelectAsSymInt)) and readers_of.get(op.out.id) == [op.index]:
            for arg in op.args:
                users = readers_of.get(arg)
                if users is not None and op.index in users:
                    users.remove(op.index)
            make_no_op(graph, op.index, "unread")


def fuse_rope_attention(graph):
    """A RoPE op at the position whose q and k only an sdpa_with_kv_cache reads, with
    constant tables and a head dim that is a multiple of 4, becomes part of it."""
    only_reader = OnlyReaders(graph)
    aliases = constant_aliases(graph.ops)
    for rope in list(graph.ops):
        if type(rope) is not RotaryEmbAtPosition:
            continue
        index = only_reader(rope.xq_out.id, rope.index)
        sdpa = graph.ops[index] if index is not None else None
        if type(sdpa) is not SdpaWithKvCache or only_reader(rope.xk_out.id, rope.index) != index:
            continue
        if sdpa.q is not rope.xq_out or sdpa.k is not rope.xk_out or sdpa.head_dim % 4:
            continue
        if any(graph.values[aliases.get(t.id, t.id)].constant is None for t in (rope.cos, rope.sin)):
            continue
        graph.ops[index] = RopeSdpaWithKvCache(graph, index, "rope + sdpa_with_kv_cache (fused)", rope, sdpa)
        fold(graph, rope.index, index)
