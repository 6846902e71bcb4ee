"""et_vk.rms_norm: RMSNorm over the last dim, fused by the Vulkan partitioner from the
Llama pattern x * rsqrt(mean(x * x, -1) + eps) * weight (kernel: wgsl/rms_norm.wgsl)."""

from __future__ import annotations

import struct

from .registry import OpHandler, linear_grid, register

ROW_THREADS = 64  # rows per row_per_thread workgroup (rms_norm.wgsl)


@register("et_vk.rms_norm.default")
class RmsNorm(OpHandler):
    """Args: x, weight [width], eps (Double), out."""

    RESIZED = ("grid", "kernel", "rows")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments (x, weight, eps, out), got {len(args)}")
        self.src, self.weight, self.out = self.tensor(0), self.tensor(1), self.tensor(3)
        self.eps = self.float_arg(2)
        for tensor in (self.src, self.weight, self.out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if not self.src.max_sizes:
            self.fail("x must have at least one dim")
        self.width = self.src.max_sizes[-1]
        if self.width == 0:
            self.fail("x's last dim is empty")
        if self.weight.max_sizes != (self.width,):
            self.fail(f"weight is {list(self.weight.max_sizes)}, expected [{self.width}] to match x's last dim")

    async def build(self):
        self.params = self.params_buffer(16)
        buffers = [self.out.buffer, self.src.buffer, self.weight.buffer, self.params]
        self.kernels = {}
        for kernel in ("main", "row_per_thread"):
            pipeline = await self.make_pipeline("rms_norm", entry_point=kernel)
            self.kernels[kernel] = (pipeline, self.graph.device.bind_group(pipeline, buffers))

    def resize(self):
        sizes = self.src.sizes
        if sizes[-1] != self.width:
            self.fail(f"x's last dim is {sizes[-1]}, but the weight has {self.width}")
        self.set_sizes(self.out, sizes)
        self.rows = self.src.numel // self.width
        self.write_params(self.params, struct.pack("<IIfI", self.rows, self.width, self.eps, 0))
        if self.kernel_set == "cpu":
            self.kernel, self.grid = "row_per_thread", linear_grid(self.rows, ROW_THREADS)
        else:
            self.kernel, self.grid = "main", linear_grid(self.rows, 1)

    def record(self, recorder):
        if self.rows:
            recorder.dispatch(*self.kernels[self.kernel], *self.grid)
