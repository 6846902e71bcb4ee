"""Ops whose output holds the input's elements in the same order: view_copy, clone,
squeeze/unsqueeze, and same-dtype _to_copy. No kernel: the output shares the input's
buffer where the graph's memory plan allows (see GraphRuntime), else one buffer-to-buffer
copy of the live bytes."""

from __future__ import annotations

from ..values import numel
from .registry import OpHandler, register


class ContiguousCopy(OpHandler):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.tensor(len(args) - 1)
        if self.src.dtype != self.out.dtype:
            self.fail(f"converting {self.src.dtype} to {self.out.dtype} is not supported")

    def out_sizes(self) -> tuple:
        raise NotImplementedError

    def view_of(self):
        return self.out.id, self.src.id

    def resize(self):
        sizes = self.out_sizes()
        if numel(sizes) != self.src.numel:
            self.fail(f"cannot view {list(self.src.sizes)} ({self.src.numel} elements) as {list(sizes)}")
        self.set_sizes(self.out, sizes)

    def record(self, recorder):
        # Same buffer (shared as a view, or by memory planning): the bytes are in place.
        if self.src.buffer is not self.out.buffer and self.out.nbytes:
            recorder.copy(self.src.buffer, self.out.buffer, (self.out.nbytes + 3) & ~3)


@register("aten.view_copy.default")
class ViewCopy(ContiguousCopy):
    def out_sizes(self):
        sizes = self.ints_arg(1)
        if sizes.count(-1) > 1:
            self.fail(f"view sizes {sizes} have more than one -1")
        if -1 in sizes:
            known = numel(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = self.src.numel // known if known else 0
        return tuple(sizes)


@register("aten.clone.default", "aten._to_copy.default")
class Clone(ContiguousCopy):
    def out_sizes(self):
        return self.src.sizes


@register("aten.squeeze_copy.dims", "aten.squeeze_copy.dim", "aten.squeeze_copy.default")
class SqueezeCopy(ContiguousCopy):
    def out_sizes(self):
        ndim = len(self.src.sizes)
        if self.name.endswith(".default"):
            dims = range(ndim)
        elif self.name.endswith(".dim"):
            dims = [self.int_arg(1)]
        else:
            dims = self.ints_arg(1)
        squeezed = {self.normalize_dim(d, ndim) for d in dims}
        # Only size-1 dims go; PyTorch leaves others untouched. The export fixed which dims
        # were squeezed, so the planned output rank decides when a live size is not 1.
        sizes = [s for d, s in enumerate(self.src.sizes) if not (d in squeezed and s == 1)]
        if len(sizes) != len(self.out.max_sizes):
            sizes = [s for d, s in enumerate(self.src.sizes) if d not in squeezed]
        return tuple(sizes)


@register("aten.unsqueeze_copy.default")
class UnsqueezeCopy(ContiguousCopy):
    def out_sizes(self):
        sizes = list(self.src.sizes)
        dim = self.int_arg(1)
        if dim < 0:
            dim += len(sizes) + 1
        if not 0 <= dim <= len(sizes):
            self.fail(f"unsqueeze dim {self.int_arg(1)} out of range for {len(sizes)} dims")
        sizes.insert(dim, 1)
        return tuple(sizes)
