"""A graph's constants: uploading them from the .pte's bytes, widening an f16 program's
float16 constants to float32 on the GPU, and reading a constant's bytes on the host."""

from __future__ import annotations

from ..gpu import STORAGE_USAGE, Device, is_js_buffer
from ..ops.registry import OpError
from ..ops.widen import HalfWidener, widen_on_host
from ..values import Tensor, numel
from .ranged_file import RangedFile, write_in_file_order


def is_widened(tensor: Tensor) -> bool:
    """Whether a constant runs as float32 though the program stores it as float16."""
    return tensor.constant_dtype == "float16" and tensor.dtype == "float32"


def check_constant(tensor: Tensor):
    """Refuse a constant whose stored size does not match its dtype and shape."""
    ref = tensor.constant
    if ref.size != tensor.constant_nbytes:
        raise OpError(
            f"constant {tensor.label} ({ref.key or 'inline'}) has {ref.size} bytes, but "
            f"{tensor.constant_dtype or tensor.dtype}{list(tensor.max_sizes)} needs {tensor.constant_nbytes}"
        )


def upload_bytes(tensor: Tensor) -> int:
    """Bytes of the buffer that Constants.upload makes for constant `tensor`."""
    size = tensor.max_nbytes if is_widened(tensor) else tensor.constant.size
    return (size + 15) & ~15


class Constants:
    """The constants of one graph, read from `data` (the .pte bytes, a JS ArrayBuffer, or a
    RangedFile: then every write waits for `flush`, which reads the file once in order, and
    the constants read on the host are those `keep` kept).

    Widened constants are made on first use: their bytes uploaded as they are, widened by a
    dispatch that `finish` submits, with the copies `write` queued from the float32 images,
    once every op is built."""

    def __init__(self, device: Device, data, values: list, aliases: dict[int, int]):
        self.device = device
        self.data = data
        self.values = values
        self.aliases = aliases  # tensor id → the constant whose buffer it shares (prepack)
        self._widener = None
        self._widening = None  # the recorder of the widening dispatches and copies
        self._widened: dict[int, object] = {}  # tensor id → float32 image
        self._float16_uploads: list = []
        self._file_writes: list = []  # (buffer, buffer offset, file offset, size) for flush

    async def start_widening(self):
        """Build the widening kernel, if any constant is widened."""
        if any(isinstance(t, Tensor) and is_widened(t) for t in self.values):
            self._widener = HalfWidener(self.device)
            await self._widener.build()
            self._widening = self.device.record()

    def upload(self, tensor: Tensor):
        """A buffer holding constant `tensor` as the ops see it (float32 if widened)."""
        check_constant(tensor)
        if is_widened(tensor):
            return self._widened_image(tensor)
        return self._upload(tensor.constant, f"{tensor.label}.constant")

    def write(self, buffer, tensor: Tensor, ranges):
        """Queue bytes of constant `tensor`'s data as the ops see it into `buffer`: for each
        (buffer offset, offset in the tensor, size) of `ranges` (multiples of 4), in one
        call to the device (Device.write_buffer_ranges)."""
        check_constant(tensor)
        for _, offset, size in ranges:
            if offset < 0 or offset + size > tensor.max_nbytes:
                raise OpError(f"bytes [{offset}, {offset + size}) are outside constant {tensor.label}")
        if is_widened(tensor):
            image = self._widened_image(tensor)
            for buffer_offset, offset, size in ranges:
                self._widening.copy(image, buffer, size, src_offset=offset, dst_offset=buffer_offset)
            return
        start = tensor.constant.offset
        self._write_from_file(buffer, [(to, start + offset, size) for to, offset, size in ranges])

    def bytes_of(self, tensor: Tensor) -> bytes:
        """The data of a constant tensor, or of one sharing a constant's buffer (prepack)."""
        source = self.values[self.aliases.get(tensor.id, tensor.id)]
        if source.constant is None:
            raise OpError(f"{tensor.label} is not a constant")
        check_constant(source)
        data = bytes(self._read_bytes(source.constant.offset, source.constant.size))
        return widen_on_host(data) if is_widened(source) else data

    async def keep(self, tensors):
        """Have the bytes of constants `tensors` (or those whose buffers they share) at hand
        for bytes_of: read now from a RangedFile, which otherwise streams them by."""
        if isinstance(self.data, RangedFile):
            for tensor in tensors:
                ref = self.values[self.aliases.get(tensor.id, tensor.id)].constant
                await self.data.keep(ref.offset, ref.size)

    async def flush(self):
        """Queue the writes from a RangedFile, in file order."""
        writes, self._file_writes = self._file_writes, []
        if writes:
            await write_in_file_order(self.device, self.data, writes)
        if isinstance(self.data, RangedFile):
            self.data.release()

    def finish(self):
        """Submit the widening and its copies; free the float16 uploads, and the images that
        only served copies (those of constants concatenated by fusion)."""
        if self._widening is None:
            return
        self.device.submit(self._widening)
        kept = {id(t.buffer) for t in self.values if isinstance(t, Tensor) and t.buffer is not None}
        for buffer in self._float16_uploads + [b for b in self._widened.values() if id(b) not in kept]:
            self.device.destroy_buffer(buffer)
        self._widened.clear()
        self._widening = self._widener = None
        self._float16_uploads = []

    def _widened_image(self, tensor: Tensor):
        image = self._widened.get(tensor.id)
        if image is None:
            halves = self._upload(tensor.constant, f"{tensor.label}.float16")
            self._float16_uploads.append(halves)
            image = self._widener.widen(self._widening, halves, numel(tensor.max_sizes), f"{tensor.label}.constant")
            self._widened[tensor.id] = image
        return image

    def _upload(self, ref, label: str):
        """A buffer holding a constant's bytes as the program stores them."""
        # Whole vec4s: kernels may read a constant as vec4s (the KV caches).
        buffer = self.device.create_buffer((ref.size + 15) & ~15, STORAGE_USAGE, label=label)
        if isinstance(self.data, RangedFile):  # whole words too: the flush pads the last
            self._write_from_file(buffer, [(0, ref.offset, ref.size)])
            return buffer
        aligned = ref.size & ~3
        self.device.write_buffer(buffer, self.data, data_offset=ref.offset, size=aligned)
        if aligned != ref.size:  # WebGPU writes whole words: pad the last few bytes
            tail = bytes(self._read_bytes(ref.offset + aligned, ref.size - aligned)).ljust(4, b"\0")
            self.device.write_buffer(buffer, tail, buffer_offset=aligned)
        return buffer

    def _write_from_file(self, buffer, ranges):
        """Queue each (buffer offset, file offset, size) of `ranges` into `buffer`."""
        if isinstance(self.data, RangedFile):
            self._file_writes.extend((buffer, to, offset, size) for to, offset, size in ranges)
        else:
            self.device.write_buffer_ranges(buffer, self.data, ranges)

    def _read_bytes(self, offset, size):
        if isinstance(self.data, RangedFile):
            return self.data.read(offset, size)
        if is_js_buffer(self.data):
            import js

            return js.Uint8Array.new(self.data, offset, size).to_bytes()
        return memoryview(self.data)[offset : offset + size]
