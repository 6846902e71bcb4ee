"""et_vk.prepack: a constant made ready for the GPU. Constants are uploaded once at build
in the layout the kernels read, so the output simply shares the constant's buffer."""

from .registry import OpHandler, register


@register("et_vk.prepack.default")
class Prepack(OpHandler):
    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        self.src, self.out = self.tensor(0), self.tensor(1)
        if self.src.constant is None:
            self.fail(f"{self.src.label} is not a constant")
        if self.src.dtype != self.out.dtype or self.src.max_sizes != self.out.max_sizes:
            self.fail(f"{self.src.label} and {self.out.label} differ in dtype or shape")

    def aliases(self):
        return {self.out.id: self.src.id}
