"""float16 constants widened to float32 on the GPU (kernel: wgsl/widen_f16.wgsl).

Not a graph op: programs exported with ExecuTorch's `force_fp16` store every float tensor
as float16, and pywebgpu runs them with float32 tensors (its kernels are f32), so the
runtime widens their constants once, at build (runtime/constants.py), but for the KV
caches, which attention keeps as float16 (ops/attention/). The results are the
program's weights and caches computed in f32: as precise as the program, or more.
"""

from __future__ import annotations

import struct

from ..gpu import STORAGE_USAGE, Buffer, Device, Recorder
from ..kernels import load_wgsl
from .dims import element_grid


class HalfWidener:
    def __init__(self, device: Device):
        self.device = device
        self.pipeline = None

    async def build(self):
        self.pipeline = await self.device.compute_pipeline(load_wgsl("widen_f16"), "widen_f16")

    def widen(self, recorder: Recorder, halves: Buffer, count: int, label: str) -> Buffer:
        """A new buffer of `count` float32 values, the float16 values in `halves` (packed
        two per word, low half first) widened by a dispatch added to `recorder`."""
        out = self.device.create_buffer((4 * count + 15) & ~15, STORAGE_USAGE, label=label)
        words = -(-count // 2)
        group = self.device.bind_group(self.pipeline, [out, (halves, 0, 4 * words)], label=f"{label}.widen")
        recorder.dispatch(self.pipeline, group, *element_grid(words))
        return out


def widen_on_host(data: bytes) -> bytes:
    """float16 bytes → float32 bytes, in Python (for the few constants read on the host)."""
    count = len(data) // 2
    return struct.pack(f"<{count}f", *struct.unpack(f"<{count}e", data[: 2 * count]))
