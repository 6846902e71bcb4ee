"""aten._softmax and aten._log_softmax along any dim (kernel: wgsl/softmax.wgsl)."""

from __future__ import annotations

from ..values import numel
from .registry import OpHandler, linear_grid, pack_u32, register


@register("aten._softmax.default", "aten._log_softmax.default")
class Softmax(OpHandler):
    """Args: x, dim (Int, may be negative), half_to_float (Bool), out."""

    RESIZED = ("grid", "rows")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments (x, dim, half_to_float, out), got {len(args)}")
        self.src, self.out = self.tensor(0), self.tensor(3)
        self.dim = self.normalize_dim(self.int_arg(1), len(self.src.max_sizes))
        if self.value(2):
            self.fail("half_to_float is only meaningful for float16 inputs, which are not supported")
        for tensor in (self.src, self.out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")

    async def build(self):
        self.params = self.params_buffer(16)
        self.pipeline = await self.make_pipeline("softmax", {"LOG": int(self.name == "aten._log_softmax.default")})
        self.group = self.graph.device.bind_group(self.pipeline, [self.out.buffer, self.src.buffer, self.params])

    def resize(self):
        sizes = self.src.sizes
        self.set_sizes(self.out, sizes)
        # A 0-d tensor is one row of one element.
        length = sizes[self.dim] if sizes else 1
        inner = numel(sizes[self.dim + 1 :])
        self.rows = numel(sizes) // length if length else 0
        self.write_params(self.params, pack_u32(self.rows, length, max(inner, 1), 0))
        self.grid = linear_grid(self.rows, 1)

    def record(self, recorder):
        if self.rows:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
