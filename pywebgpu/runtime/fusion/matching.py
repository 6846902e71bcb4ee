"""What the fusion patterns match on: ops' arguments by name, and the graph's readers."""

from __future__ import annotations

from dataclasses import dataclass

from ...ops.linear import LinearQ4gswWeightOnly
from ...ops.registry import OpHandler
from ...ops.view import ContiguousCopy
from ...values import ValueList

# Argument lists of exported ops, as value ids, by name.


@dataclass(frozen=True)
class SigmoidArgs:
    x: int
    out: int


@dataclass(frozen=True)
class BinaryArgs:
    """mul(a, b, out), or SymInt arithmetic."""

    a: int
    b: int
    out: int

    def other(self, value_id: int) -> int:
        """The operand that is not `value_id`."""
        return self.b if self.a == value_id else self.a

    @classmethod
    def of_symint(cls, op) -> "BinaryArgs":
        """The arguments of SymInt arithmetic (ops.symint.SymArithmetic)."""
        return cls(op.args[0], op.args[1], op.out.id)


@dataclass(frozen=True)
class AddArgs:
    a: int
    b: int
    alpha: int
    out: int

    def other(self, value_id: int) -> int:
        return self.b if self.a == value_id else self.a


@dataclass(frozen=True)
class SliceArgs:
    src: int
    dim: int
    start: int
    end: int
    step: int
    out: int


@dataclass(frozen=True)
class LinearArgs:
    """linear_q4gsw(x, weights, scales, group_size, bias, out)."""

    x: int
    weights: int
    scales: int
    group_size: int
    bias: int
    out: int


def sigmoid_args(op) -> SigmoidArgs | None:
    return SigmoidArgs(*op.args) if op.name == "aten.sigmoid.default" and len(op.args) == 2 else None


def mul_args(op) -> BinaryArgs | None:
    return BinaryArgs(*op.args) if op.name == "aten.mul.Tensor" and len(op.args) == 3 else None


def add_args(op) -> AddArgs | None:
    return AddArgs(*op.args) if op.name == "aten.add.Tensor" and len(op.args) == 4 else None


def is_plain_linear(op) -> bool:
    """A 4-bit linear that reads x as it is (not fused with anything yet)."""
    return type(op) is LinearQ4gswWeightOnly and not op.x_silu_mul


def readers(ops, values) -> dict[int, list[int]]:
    """value id → indexes of the ops whose arguments name it (directly or in a list), in
    op order."""
    found: dict[int, list[int]] = {}
    for op in ops:
        for arg in op.args:
            value = values[arg]
            for value_id in value.items if isinstance(value, ValueList) else [arg]:
                users = found.setdefault(value_id, [])
                if not users or users[-1] != op.index:
                    users.append(op.index)
    return found


def constant_aliases(ops) -> dict[int, int]:
    """tensor id → the constant whose buffer it shares (prepack's outputs)."""
    aliases = {}
    for op in ops:
        aliases.update(op.aliases())
    return aliases


class OnlyReaders:
    """The op that alone reads a value, from the graph's readers as they are when made."""

    def __init__(self, graph):
        self.graph = graph
        self.readers = readers(graph.ops, graph.values)
        self.outputs = {tensor.id for tensor in graph.outputs}

    def __call__(self, value_id: int, index: int) -> int | None:
        """The op that alone reads `value_id` (besides op `index`, which writes it), None
        if several or none do or it is a graph output."""
        users = [i for i in self.readers.get(value_id, []) if i != index]
        return users[0] if len(users) == 1 and value_id not in self.outputs else None

    def through_views(self, value_id: int, index: int) -> tuple[int, int | None, list[int]]:
        """Follows value `value_id`, written by op `index`, through the views that alone read
        it: (the last view's output, the op that alone reads that, the views' indexes)."""
        ops = self.graph.ops
        views, reader = [], self(value_id, index)
        while reader is not None and isinstance(ops[reader], ContiguousCopy):
            views.append(reader)
            value_id = ops[reader].out.id
            reader = self(value_id, reader)
        return value_id, reader, views


def fold(graph, index: int, into: int):
    """Op `index` is now part of op `into`."""
    make_no_op(graph, index, f"fused into #{into}")


def make_no_op(graph, index: int, why: str):
    """Op `index` becomes one that names no values (its tensors then get no memory)."""
    op = graph.ops[index]
    graph.ops[index] = OpHandler(graph, index, f"{op.name} ({why})", ())
