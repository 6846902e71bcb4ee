"""aten.cat.default: tensors joined along one dim (any dim, negative too; inputs of
different live sizes along it). Each input is one strided copy (wgsl/gather.wgsl) into its
block of the output."""

from __future__ import annotations

from ..values import Tensor, ValueList
from .dims import check_dims
from .indexing import StridedCopy, check_word_sized
from .registry import OpHandler, contiguous_strides, register


@register("aten.cat.default")
class Cat(OpHandler):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 3:
            self.fail(f"expected 3 arguments, got {len(args)}")
        listed = self.value(0)
        if not isinstance(listed, ValueList):
            self.fail(f"argument 0 should be a list of tensors, got {type(listed).__name__}")
        self.inputs = [graph.values[i] for i in listed.items]
        if not self.inputs or not all(isinstance(t, Tensor) for t in self.inputs):
            self.fail("argument 0 should be a non-empty list of tensors")
        self.out = self.tensor(2)
        check_word_sized(self, *self.inputs, self.out)
        check_dims(self, self.out)
        self.ndim = len(self.out.max_sizes)
        for tensor in self.inputs:
            if len(tensor.max_sizes) != self.ndim:
                self.fail(f"{tensor.label} has {len(tensor.max_sizes)} dims, the output {self.ndim}")
        self.dim = self.normalize_dim(self.int_arg(1), self.ndim)
        self.copies = [StridedCopy(self, src, self.out) for src in self.inputs]

    async def build(self):
        for copy in self.copies:
            await copy.build()

    def resize(self):
        dim = self.dim
        out_sizes = list(self.inputs[0].sizes)
        for tensor in self.inputs[1:]:
            if any(s != o for d, (s, o) in enumerate(zip(tensor.sizes, out_sizes)) if d != dim):
                self.fail(f"sizes {[list(t.sizes) for t in self.inputs]} differ outside dim {dim}")
            out_sizes[dim] += tensor.sizes[dim]
        self.set_sizes(self.out, out_sizes)
        out_strides = contiguous_strides(out_sizes)
        start = 0  # where along `dim` the current input's block begins
        for tensor, copy in zip(self.inputs, self.copies):
            copy.set_view(tensor.sizes, 0, contiguous_strides(tensor.sizes), start * out_strides[dim], out_strides)
            start += tensor.sizes[dim]

    def record(self, recorder):
        for copy in self.copies:
            copy.record(recorder)
