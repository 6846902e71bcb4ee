"""aten.permute_copy.default: the input's elements reordered so that output dim i is input
dim dims[i] (kernel: wgsl/gather.wgsl through indexing.StridedCopy)."""

from __future__ import annotations

from .indexing import GatherOp
from .registry import contiguous_strides, register


@register("aten.permute_copy.default")
class PermuteCopy(GatherOp):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 3:
            self.fail(f"expected 3 arguments, got {len(args)}")
        ndim = len(self.src.max_sizes)
        self.dims = [self.normalize_dim(d, ndim) for d in self.ints_arg(1)]
        if sorted(self.dims) != list(range(ndim)):
            self.fail(f"dims {self.ints_arg(1)} are not a permutation of the {ndim} dims of {self.src.label}")

    def resize(self):
        strides = contiguous_strides(self.src.sizes)
        out_sizes = [self.src.sizes[d] for d in self.dims]
        self.set_sizes(self.out, out_sizes)
        # Walking the output in order reads the input along the permuted strides.
        self.copy.set_view(out_sizes, 0, [strides[d] for d in self.dims])
