"""Symbolic integers, evaluated on the host while sizes propagate: sym_size.int, the
symbolic add/sub/mul/floordiv, and et_vk.select_as_symint (reads an input's value)."""

from __future__ import annotations

from .registry import OpHandler, contiguous_strides, register

_ARITHMETIC = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
}


@register("sym_size.int")
class SymSize(OpHandler):
    host_only = True

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.symint_out(2)
        self.dim = self.normalize_dim(self.int_arg(1), len(self.src.max_sizes))

    def resize(self):
        self.set_symint(self.out, self.src.sizes[self.dim])


@register(*_ARITHMETIC)
class SymArithmetic(OpHandler):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.function = _ARITHMETIC[name]
        self.out = self.symint_out(2)

    def resize(self):
        a, b = self.int_arg(0), self.int_arg(1)
        if self.name == "floordiv" and b == 0:
            self.fail("division by zero")
        self.set_symint(self.out, self.function(a, b))


@register("et_vk.select_as_symint.default")
class SelectAsSymInt(OpHandler):
    RESIZED = ("_checked_selection", "_flat_index")

    host_only = True
    reads_host_values = True

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.symint_out(3)
        if self.src not in graph.inputs:
            self.fail(f"{self.src.label} is computed on the GPU; select_as_symint needs a graph input")
        # (sizes, dim, index) last checked → the flat index of the element they select:
        # a decode step changes the input's value, not where the element is.
        self._checked_selection = None
        self._flat_index = 0

    def value_key(self):
        # Of a one-element input, every index that resize accepts (0, -1: Llama's position
        # is read as both) selects that element.
        if self.src.max_sizes == (1,):
            return ("the element of", self.src.id)
        return None

    def resize(self):
        selection = (self.src.sizes, self.int_arg(1), self.int_arg(2))
        if selection != self._checked_selection:
            self._flat_index = self._selected_element(*selection)
            self._checked_selection = selection
        self.set_symint(self.out, int(self.src.host_values[self._flat_index]))

    def _selected_element(self, sizes, dim, index) -> int:
        dim = self.normalize_dim(dim, len(sizes))
        if not -sizes[dim] <= index < sizes[dim]:
            self.fail(f"index {index} out of range for dim {dim} of size {sizes[dim]}")
        index %= sizes[dim]
        # Only a selection that leaves a single element makes a scalar.
        if self.src.numel != sizes[dim]:
            self.fail(f"select_as_symint on {list(sizes)} does not give a single element")
        return index * contiguous_strides(sizes)[dim]

