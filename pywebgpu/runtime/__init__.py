"""Load a .pte program onto a GPU device and run it.

    device = await pywebgpu.gpu.request_device()
    graph = await load(device, pte_bytes_or_js_array_buffer)
    (logits,) = await graph.execute(HostTensor((1, 5), tokens), HostTensor((1,), [0]))
"""

from __future__ import annotations

from .. import pte
from ..gpu import Device, is_js_buffer
from .fit import ModelTooLargeError
from .graph import GraphRuntime, HostTensor
from .ranged_file import RangedFile, blob_pieces, file_pieces, read_vulkan_graph


class JsArrayBufferSource:
    """The reader's byte source over a JS ArrayBuffer: only the bytes the reader asks for
    (headers, flatbuffers) cross into Python; weights go from it straight to the GPU."""

    def __init__(self, array_buffer):
        self.array_buffer = array_buffer
        self.size = array_buffer.byteLength

    def read(self, offset: int, size: int) -> bytes:
        import js

        if offset < 0 or size < 0 or offset + size > self.size:
            raise pte.PteError(f"read of [{offset}, {offset + size}) outside the {self.size}-byte file")
        return js.Uint8Array.new(self.array_buffer, offset, size).to_bytes()


async def read_graph(data, method: str = "forward") -> pte.VkGraph:
    """`method`'s Vulkan graph in a .pte: bytes-like, a JS ArrayBuffer or a RangedFile."""
    if isinstance(data, RangedFile):
        return await read_vulkan_graph(data, method)
    return pte.load_program(JsArrayBufferSource(data) if is_js_buffer(data) else data).vulkan_graph(method)


async def load(device: Device, data, method: str = "forward", *, kernel_set: str | None = None) -> GraphRuntime:
    """Read a .pte (bytes-like, a JS ArrayBuffer in the browser, or a RangedFile: one read
    piece by piece) and build its graph, whose ops run `kernel_set`'s kernels ("cpu" or
    "gpu"; None: those that suit the device)."""
    graph = GraphRuntime(device, await read_graph(data, method), data, kernel_set)
    await graph.build()
    return graph


__all__ = [
    "GraphRuntime", "HostTensor", "JsArrayBufferSource", "ModelTooLargeError", "RangedFile",
    "blob_pieces", "file_pieces", "load", "read_graph",
]
