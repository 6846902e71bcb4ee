"""aten.sum.dim_IntList over the trailing dims of a float32 tensor (kernel:
wgsl/sum_last.wgsl)."""

from __future__ import annotations

from ..values import numel
from .dims import element_grid
from .registry import OpHandler, pack_u32, register


@register("aten.sum.dim_IntList")
class SumDims(OpHandler):
    """Args: x, dims (IntList, may be negative; empty: all), keepdim (Bool), dtype (Null),
    out. The dims must be the last ones of x (a view's regrouped rows, summed)."""

    RESIZED = ("grid", "rows")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 5:
            self.fail(f"expected 5 arguments (x, dims, keepdim, dtype, out), got {len(args)}")
        self.x, self.out = self.tensor(0), self.tensor(4)
        for tensor in (self.x, self.out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if self.value(3) is not None:
            self.fail(f"a dtype argument ({self.value(3)!r}) is not supported")
        ndim = len(self.x.max_sizes)
        dims = self.value(1)
        dims = [] if dims is None else self.ints_arg(1)
        normalized = sorted({self.normalize_dim(d, ndim) for d in dims}) if dims else list(range(ndim))
        if normalized != list(range(ndim - len(normalized), ndim)):
            self.fail(f"dims {dims} of a {ndim}-d tensor are not its last dims: only sums over the last dims are supported")
        self.reduced = len(normalized)
        self.keepdim = bool(self.value(2))

    async def build(self):
        self.params = self.params_buffer(16)
        self.pipeline = await self.make_pipeline("sum_last")
        self.group = self.graph.device.bind_group(self.pipeline, [self.out.buffer, self.x.buffer, self.params])

    def resize(self):
        sizes = self.x.sizes
        kept = sizes[: len(sizes) - self.reduced]
        self.set_sizes(self.out, (*kept, *(1,) * self.reduced) if self.keepdim else kept)
        length = numel(sizes[len(kept) :])
        self.rows = numel(kept) if length else 0
        self.write_params(self.params, pack_u32(self.rows, length, 0, 0))
        self.grid = element_grid(self.rows)

    def record(self, recorder):
        if self.rows:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
