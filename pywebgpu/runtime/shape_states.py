"""The per-input-shape state cache of a graph.

A change of input shape (a prompt after decoding, decoding after a prompt) resizes many
ops, re-records them and rebuilds the schedule. So the graph keeps what resizing and
recording left for each of the last `kept` input shapes (a ShapeState) and restores it
when the inputs return to a shape; the run then resizes only what changed since (the
position). Decoding's one shape returns after every prompt.

A state holds only what differs from the graph as the full resize left it: the ops
resized and the values changed since then. So tracking starts at the end of a full
resize, and an op or value that changes the first time is put, as it was, into every
state kept.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..ops.registry import OpPart
from ..values import SymInt, Tensor

# How many input shapes' states a graph keeps: a chat returns to decoding's one shape after
# every prompt, and to a prompt's length when one recurs.
KEPT_SHAPES = 8


@dataclass
class ShapeState:
    """What resizing and recording left for one shape of the inputs. `ops`: op index → the
    attributes resize() sets, of the op and the OpParts it keeps; `values`: value id → a
    tensor's (sizes, host values) or a SymInt's value; `written`: the bytes last written to
    each buffer (Uniforms.last_written); the ops' commands and the schedule."""

    ops: dict
    values: dict
    written: dict | None = None
    op_commands: list | None = None
    schedule: object = None
    op_starts: list | None = None


def value_state(value):
    """What a shape state keeps of a tensor (live sizes, host values) or a SymInt (value)."""
    return value.value if type(value) is SymInt else (value.sizes, value.host_values)


def shape_key(shapes) -> tuple:
    """The key of the inputs' shapes: a tuple per input, None for one the graph does not read."""
    return tuple(tuple(shape) if shape is not None else None for shape in shapes)


class ShapeStates:
    """The kept states, oldest first, by the inputs' shapes (`shape_key`), and the tracking
    of what changed: since the full resize, and since the inputs took their shape now."""

    def __init__(self, ops: list, values: list, kept: int = KEPT_SHAPES):
        self.ops = ops
        self.values = values
        self.kept = kept
        self.tracking = False
        self._states: OrderedDict[tuple, ShapeState] = OrderedDict()
        self._varied_ops: set[int] = set()
        self._varied_values: set[int] = set()
        self._resized_ops: set[int] = set()
        self._changed_values: set[int] = set()
        self._base_values: dict[int, object] = {}
        self._parts: dict[int, list] = {}

    def pop(self, shapes, default=None):
        """Drop the state kept for inputs of `shapes`: the next run of that shape resizes as
        for a new one."""
        return self._states.pop(shape_key(shapes), default)

    def reset(self):
        """Drop every state and stop tracking, until the next full resize is made."""
        self.tracking = False
        self._states.clear()
        for changes in (self._varied_ops, self._varied_values, self._resized_ops, self._changed_values):
            changes.clear()

    def start_tracking(self):
        """The full resize is made: note every value as it is, and track changes from here."""
        self._base_values = {v.id: value_state(v) for v in self.values if type(v) in (Tensor, SymInt)}
        self.tracking = True

    def note_resize(self, index: int):
        """Op `index` is about to be resized; the first time since the full resize, its
        state as it has been since then goes into every kept state."""
        if index not in self._varied_ops:
            self._varied_ops.add(index)
            unchanged = self._op_state(index)
            for state in self._states.values():
                state.ops[index] = unchanged
        self._resized_ops.add(index)

    def note_change(self, value_id: int):
        """Value `value_id` changed; the first time since the full resize, its value until
        now goes into every kept state."""
        if value_id not in self._varied_values:
            self._varied_values.add(value_id)
            for state in self._states.values():
                state.values[value_id] = self._base_values[value_id]
        self._changed_values.add(value_id)

    def switch(self, shape: tuple, new_shape: tuple, written: dict, op_commands: list, schedule, op_starts) -> ShapeState | None:
        """Keep the state of the inputs' `shape` (with the graph's `written` bytes, its ops'
        commands and schedule, copied) and restore the ops and values of `new_shape`'s if it
        is kept; returns that state (the caller restores its buffers and schedule), or None."""
        restored = self._states.get(new_shape)
        if restored is not None:
            self._states.move_to_end(new_shape)  # not the one evicted while keeping
        if self.kept:
            self._keep(shape, written, op_commands, schedule, op_starts)
        if restored is not None:
            self._restore(restored)
        self._resized_ops = set()
        self._changed_values = set()
        return restored

    def op_parts(self, index: int) -> list:
        """[(part, the attributes its resize sets)] for op `index` and the OpParts it keeps
        (see OpPart)."""
        parts = self._parts.get(index)
        if parts is None:
            found, pending = [], [self.ops[index]]
            while pending:
                part = pending.pop()
                if any(part is known for known in found):
                    continue  # a helper's reference back to its op
                found.append(part)
                for attribute in vars(part).values():
                    items = attribute if isinstance(attribute, (list, tuple)) else (attribute,)
                    pending.extend(item for item in items if isinstance(item, OpPart))
            parts = self._parts[index] = [(part, part.resized_attributes()) for part in found]
        return parts

    def _keep(self, shape, written, op_commands, schedule, op_starts):
        state = self._states.get(shape)
        if state is None:
            state = self._states[shape] = ShapeState({}, {})
            ops, values = self._varied_ops, self._varied_values
            while len(self._states) > self.kept:
                self._states.popitem(last=False)
        else:
            # Restored when the inputs took this shape: only what changed since differs.
            self._states.move_to_end(shape)
            ops, values = self._resized_ops, self._changed_values
        for index in ops:
            state.ops[index] = self._op_state(index)
        for value_id in values:
            state.values[value_id] = value_state(self.values[value_id])
        state.written = dict(written)
        state.op_commands = list(op_commands)
        state.schedule, state.op_starts = schedule, op_starts

    def _restore(self, state: ShapeState):
        for index, held in state.ops.items():
            for (part, names), values in zip(self._parts[index], held):
                part.__dict__.update(zip(names, values))
        for value_id, held in state.values.items():
            value = self.values[value_id]
            if type(value) is SymInt:
                value.value = held
            else:
                value.sizes, value.host_values = held

    def _op_state(self, index: int) -> tuple:
        """The values of the attributes resize() sets, per part of op_parts(index): tuples
        (few containers for Python's garbage collector to walk), None for one not set yet."""
        return tuple(tuple(map(part.__dict__.get, names)) for part, names in self.op_parts(index))
