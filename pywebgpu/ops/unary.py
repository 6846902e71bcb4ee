"""Elementwise unary ops: sigmoid and friends, and the fused silu(x) * y
(kernel: wgsl/unary.wgsl)."""

from .dims import element_grid
from .registry import OpHandler, pack_u32, register

UNARY_OPS = {
    "aten.sigmoid.default": 0,
    "aten.neg.default": 1,
    "aten.exp.default": 2,
    "aten.relu.default": 3,
    "aten.silu.default": 4,
    "aten.tanh.default": 5,
}


@register(*UNARY_OPS)
class UnaryOp(OpHandler):
    RESIZED = ("grid",)

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.tensor(len(args) - 1)
        if self.src.dtype != "float32" or self.out.dtype != "float32":
            self.fail("only float32 is supported")

    async def build(self):
        self.params = self.params_buffer(16)
        self.pipeline = await self.make_pipeline("unary", {"OP": UNARY_OPS[self.name]})
        self.group = self.graph.device.bind_group(self.pipeline, [self.out.buffer, self.src.buffer, self.params])

    def resize(self):
        self.set_sizes(self.out, self.src.sizes)
        self.write_params(self.params, pack_u32(self.src.numel, 0, 0, 0))
        self.grid = element_grid(self.src.numel)

    def record(self, recorder):
        recorder.dispatch(self.pipeline, self.group, *self.grid)


class SiluMul(OpHandler):
    """out = silu(x) * y, elementwise over one shape. Not an op of the exported graph: the
    runtime puts it in place of sigmoid(x), x * sigmoid(x) and that times y
    (runtime/fusion/linears.py). Args: x, y, out."""

    RESIZED = ("grid",)

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.x, self.y, self.out = self.tensor(0), self.tensor(1), self.tensor(2)
        if any(t.dtype != "float32" for t in (self.x, self.y, self.out)):
            self.fail("only float32 is supported")

    async def build(self):
        self.params = self.params_buffer(16)
        self.pipeline = await self.make_pipeline("unary", entry_point="silu_mul")
        self.group = self.graph.device.bind_group(
            self.pipeline, {0: self.out.buffer, 1: self.x.buffer, 2: self.params, 3: self.y.buffer}
        )

    def resize(self):
        if self.y.sizes != self.x.sizes:
            self.fail(f"silu(x) * y needs one shape, got {list(self.x.sizes)} and {list(self.y.sizes)}")
        self.set_sizes(self.out, self.x.sizes)
        self.write_params(self.params, pack_u32(self.x.numel, 0, 0, 0))
        self.grid = element_grid(self.x.numel)

    def record(self, recorder):
        recorder.dispatch(self.pipeline, self.group, *self.grid)
