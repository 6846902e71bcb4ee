"""GPU buffers: usage flags, the Buffer record, byte views of written data, range checks
and the pool of readback staging buffers."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from .errors import GPUError


class BufferUsage:
    """GPUBufferUsage flags (the same numbers in every WebGPU implementation)."""

    MAP_READ = 0x0001
    MAP_WRITE = 0x0002
    COPY_SRC = 0x0004
    COPY_DST = 0x0008
    INDEX = 0x0010
    VERTEX = 0x0020
    UNIFORM = 0x0040
    STORAGE = 0x0080
    INDIRECT = 0x0100
    QUERY_RESOLVE = 0x0200


STORAGE_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST
UNIFORM_USAGE = BufferUsage.UNIFORM | BufferUsage.COPY_DST
STAGING_USAGE = BufferUsage.MAP_READ | BufferUsage.COPY_DST

# Readbacks up to this size reuse their staging buffers, so that small repeated reads
# create nothing.
POOLED_READ_BYTES = 64 * 1024


@dataclass(eq=False)
class Buffer:
    handle: object
    size: int
    usage: int
    label: str
    destroyed: bool = False


# The BufferOwner collecting the buffers created in the current context (None: nobody).
_collecting: ContextVar = ContextVar("pywebgpu_buffer_owner", default=None)


class BufferOwner:
    """The buffers a device creates while it collects: in its `collecting()` context and
    in the asyncio tasks started there, so that whoever made them can free them all."""

    def __init__(self):
        self.buffers: list[Buffer] = []

    @contextmanager
    def collecting(self):
        token = _collecting.set(self)
        try:
            yield self
        finally:
            _collecting.reset(token)

    def take(self) -> list[Buffer]:
        """The buffers collected so far, forgotten here."""
        buffers, self.buffers = self.buffers, []
        return buffers


def note_created(buffer: Buffer):
    """Hand a new buffer to the BufferOwner collecting now, if any."""
    owner = _collecting.get()
    if owner is not None:
        owner.buffers.append(buffer)


def as_bytes_view(data) -> memoryview:
    """A flat byte view of any buffer-protocol object (bytes, array.array, numpy array)."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise GPUError("data written to a GPU buffer must be contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def byte_range(data, offset: int, size: int):
    """Bytes [offset, offset + size) of a buffer-protocol object: a whole `bytes` as it is
    (the common small write), else a view of the range."""
    if type(data) is bytes and offset == 0 and size == len(data):
        return data
    return as_bytes_view(data)[offset : offset + size]


def check_write(buffer: Buffer, buffer_offset: int, data_offset: int, size: int, total: int):
    """Refuse a write of `size` bytes at `data_offset` of a `total`-byte source to
    `buffer_offset` of `buffer` that is out of range or not 4-byte aligned."""
    if data_offset < 0 or size < 0 or data_offset + size > total:
        raise GPUError(
            f"write to buffer {buffer.label!r}: range [{data_offset}, {data_offset + size}) "
            f"is outside the {total}-byte source"
        )
    if buffer_offset % 4 or size % 4:
        raise GPUError(
            f"write to buffer {buffer.label!r}: offset {buffer_offset} and size {size} must be multiples of 4"
        )
    if buffer_offset < 0 or buffer_offset + size > buffer.size:
        raise GPUError(
            f"write of {size} bytes at offset {buffer_offset} overflows buffer "
            f"{buffer.label!r} of {buffer.size} bytes"
        )


def checked_read(buffer: Buffer, offset: int = 0, size: int | None = None) -> tuple:
    """(buffer, offset, size) of a readback, `size` defaulting to the rest of the buffer;
    refused when out of range or not 4-byte aligned."""
    if size is None:
        size = buffer.size - offset
    if offset < 0 or size < 0 or offset + size > buffer.size or offset % 4 or size % 4:
        raise GPUError(
            f"read of [{offset}, {offset + size}) from buffer {buffer.label!r} "
            f"({buffer.size} bytes): out of range or not 4-byte aligned"
        )
    return buffer, offset, size


class StagingPool:
    """Unmapped readback staging buffers (backend handles) by size, for reads of up to
    POOLED_READ_BYTES."""

    def __init__(self):
        self._free: dict[int, list] = {}

    def take(self, size: int, create):
        """A staging buffer of `size` bytes: a pooled one when one is free, else `create()`'s."""
        free = self._free.get(size) if size <= POOLED_READ_BYTES else None
        return free.pop() if free else create()

    def keep(self, size: int, staging) -> bool:
        """Keep an unmapped staging buffer for the next read of `size` bytes; False when
        reads of that size are not pooled (the backend then destroys it)."""
        if size > POOLED_READ_BYTES:
            return False
        self._free.setdefault(size, []).append(staging)
        return True
