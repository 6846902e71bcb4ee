"""aten.linear with float32 weights [N, K] and an optional bias [N] (kernel:
wgsl/linear_f32.wgsl): the small f32 products of exported graphs, such as an exact GGUF
linear's offset term (which runtime/fusion/ folds into the 4-bit linear beside it)."""

from __future__ import annotations

from ..values import numel
from .dims import element_grid
from .registry import OpHandler, pack_u32, register


@register("aten.linear.default")
class LinearF32(OpHandler):
    """Args: x [..., K], weight [N, K], bias [N] or Null, out [..., N]."""

    RESIZED = ("grid", "m")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments (x, weight, bias, out), got {len(args)}")
        self.x, self.weight, self.out = self.tensor(0), self.tensor(1), self.tensor(3)
        self.bias = self.optional_tensor(2)
        for tensor in (self.x, self.weight, self.bias, self.out):
            if tensor is not None and tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if len(self.weight.max_sizes) != 2 or not self.x.max_sizes:
            self.fail(f"weight {list(self.weight.max_sizes)} should be [N, K] and x at least 1-d, x is {list(self.x.max_sizes)}")
        self.n, self.k = self.weight.max_sizes
        if self.x.max_sizes[-1] != self.k:
            self.fail(f"x {list(self.x.max_sizes)} does not have the weight's K={self.k} input features")
        if self.bias is not None and list(self.bias.max_sizes) != [self.n]:
            self.fail(f"bias {list(self.bias.max_sizes)} should be [{self.n}]")

    async def build(self):
        self.params = self.params_buffer(16)
        self.pipeline = await self.make_pipeline("linear_f32", {"HAS_BIAS": self.bias is not None})
        bias = self.bias if self.bias is not None else self.weight
        self.group = self.graph.device.bind_group(
            self.pipeline, [self.out.buffer, self.x.buffer, self.weight.buffer, bias.buffer, self.params]
        )

    def resize(self):
        if tuple(self.weight.sizes) != (self.n, self.k) or self.x.sizes[-1] != self.k:
            self.fail(f"x {list(self.x.sizes)} times weight {list(self.weight.sizes)}: K must be {self.k}")
        self.set_sizes(self.out, (*self.x.sizes[:-1], self.n))
        self.m = numel(self.x.sizes[:-1])
        self.write_params(self.params, pack_u32(self.m, self.n, self.k, 0))
        self.grid = element_grid(self.m * self.n)

    def record(self, recorder):
        if self.m and self.n:
            recorder.dispatch(self.pipeline, self.group, *self.grid)
