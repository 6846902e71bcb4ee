"""Random access to the bytes of a `.pte` file, with reads checked against its size."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .errors import PteError


@runtime_checkable
class ByteSource(Protocol):
    """Random access to the bytes of a `.pte` file.

    `read` returns a bytes-like object (bytes, memoryview, ...) of exactly `size`
    bytes starting at `offset`; the reader only calls it for ranges inside
    `0 <= offset <= offset + size <= source.size`. In the browser a source can wrap
    a JS ArrayBuffer and copy out only the small regions the reader asks for. The size is
    an attribute, not `len()`: Pyodide's `len()` stops at 2 GiB (wasm32), files do not.
    """

    size: int

    def read(self, offset: int, size: int) -> bytes: ...


class BytesSource:
    """A `ByteSource` over an in-memory bytes-like object (bytes, bytearray,
    memoryview, mmap, array, ...). `read` returns zero-copy memoryview slices, which
    keep the underlying object exported (an mmap cannot be closed while they live)."""

    def __init__(self, data) -> None:
        self._view = memoryview(data).cast("B")
        self.size = self._view.nbytes

    def read(self, offset: int, size: int) -> memoryview:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"read of {size} bytes at {offset} is outside the {self.size} byte buffer"
            )
        return self._view[offset : offset + size]


def as_source(data) -> ByteSource:
    """`data` as a ByteSource: bytes-like objects are wrapped, ByteSources kept."""
    # Bytes-like first: an mmap also has `read` and `size`, but means its bytes.
    try:
        return BytesSource(data)
    except TypeError:
        if isinstance(data, ByteSource):
            return data
        raise TypeError(
            f"expected a bytes-like object or a ByteSource, not {type(data).__name__}"
        ) from None


def read_range(source: ByteSource, offset: int, size: int, what: str) -> bytes:
    """Reads `size` bytes of `what` at absolute `offset`, checked against the file size."""
    file_size = source.size
    if offset < 0 or size < 0 or offset + size > file_size:
        raise PteError(
            f"{what}: bytes {offset}..{offset + size} lie outside the {file_size} byte file"
        )
    data = bytes(source.read(offset, size))
    if len(data) != size:
        raise PteError(
            f"{what}: the byte source returned {len(data)} bytes for a read of {size} at {offset}"
        )
    return data

