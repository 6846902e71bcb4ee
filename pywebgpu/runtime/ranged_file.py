"""A .pte read piece by piece, never held whole: what a model larger than one ArrayBuffer,
or than the host's memory, loads from (a Blob in the browser, a file natively).

The reader's reads (headers, flatbuffers) and the constants ops read on the host are
served from byte ranges kept while the graph builds; the rest goes to the GPU as each
piece is read, once, in file order (`write_in_file_order`)."""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict, deque

from .. import pte
from ..gpu import Device, is_js_buffer

# Pieces of the manifests' chunk size (llm.manifest.CHUNK_BYTES), so that each can be
# checked against its chunk's sha256 as it is read.
PIECE_BYTES = 16 << 20
# Pieces read (fetched, checked) ahead while a piece's writes are queued; more did not
# load faster where measured (BENCHMARKS.md).
READ_AHEAD = 1


class RangeMissing(Exception):
    """A read of bytes not kept (yet): `read_vulkan_graph` keeps them and reads again."""

    def __init__(self, offset: int, size: int):
        super().__init__(f"bytes [{offset}, {offset + size}) are not kept")
        self.offset, self.size = offset, size


def _length(data) -> int:
    return data.byteLength if is_js_buffer(data) else len(memoryview(data).cast("B"))


def _host_bytes(data, offset: int, size: int) -> bytes:
    if is_js_buffer(data):
        import js

        return js.Uint8Array.new(data, offset, size).to_bytes()
    return bytes(memoryview(data).cast("B")[offset : offset + size])


class RangedFile:
    """A `size`-byte file whose pieces of `piece_bytes` come from `read_piece(index)` (an
    awaitable of bytes-like data or a JS ArrayBuffer), each passed to `check(index, data)`
    (awaited; it raises for a damaged piece) before any use."""

    def __init__(self, size: int, read_piece, piece_bytes: int = PIECE_BYTES, check=None):
        self.size = size
        self.piece_bytes = piece_bytes
        self._read_piece = read_piece
        self._check = check
        self._kept: list[tuple[int, bytes]] = []  # (offset, bytes)

    def read(self, offset: int, size: int) -> bytes:
        """The bytes [offset, offset + size) from a kept range (the reader's ByteSource)."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise pte.PteError(f"read of [{offset}, {offset + size}) outside the {self.size}-byte file")
        for start, data in self._kept:
            if start <= offset and offset + size <= start + len(data):
                return data[offset - start : offset - start + size]
        raise RangeMissing(offset, size)

    async def piece(self, index: int):
        """Piece `index`, read (and checked) now."""
        data = await self._read_piece(index)
        expected = min(self.piece_bytes, self.size - index * self.piece_bytes)
        if _length(data) != expected:
            raise pte.PteError(f"piece {index} of the file: {_length(data)} bytes read, {expected} expected")
        if self._check is not None:
            await self._check(index, data)
        return data

    async def keep(self, offset: int, size: int):
        """Keep bytes [offset, offset + size) on the host until `release`."""
        parts = []
        for index in range(offset // self.piece_bytes, -(-(offset + size) // self.piece_bytes)):
            start = index * self.piece_bytes
            first, last = max(offset, start), min(offset + size, start + self.piece_bytes)
            parts.append(_host_bytes(await self.piece(index), first - start, last - first))
        self._kept.append((offset, b"".join(parts)))

    def release(self):
        self._kept.clear()


def file_pieces(path, piece_bytes: int = PIECE_BYTES, check=None) -> RangedFile:
    """A RangedFile over a file on disk (natively)."""
    size = os.path.getsize(path)

    async def read_piece(index: int) -> bytes:
        with open(path, "rb") as file:
            file.seek(index * piece_bytes)
            return file.read(piece_bytes)

    return RangedFile(size, read_piece, piece_bytes, check)


def blob_pieces(blob, piece_bytes: int = PIECE_BYTES, check=None) -> RangedFile:
    """A RangedFile over a JS Blob (a File the user chose, a Cache API entry's blob)."""

    async def read_piece(index: int):
        start = index * piece_bytes
        return await blob.slice(start, min(start + piece_bytes, blob.size)).arrayBuffer()

    return RangedFile(int(blob.size), read_piece, piece_bytes, check)


async def read_vulkan_graph(file: RangedFile, method: str = "forward") -> pte.VkGraph:
    """`method`'s Vulkan graph, keeping the ranges the reader asks for: each try reads the
    program again, with one more range at hand."""
    while True:
        try:
            return pte.load_program(file).vulkan_graph(method)
        except RangeMissing as missing:
            await file.keep(missing.offset, missing.size)


async def write_in_file_order(device: Device, file: RangedFile, writes):
    """Queue each (buffer, buffer offset, file offset, size) of `writes` (buffer offsets
    multiples of 4), reading each piece that holds any of their bytes once, in file order;
    a last word that a write leaves short is padded with zeros."""
    piece_bytes = file.piece_bytes
    segments = defaultdict(list)  # piece index → (buffer, buffer offset, offset in piece, size)
    for buffer, to, offset, size in writes:
        end = offset + size
        while offset < end:
            index = offset // piece_bytes
            n = min(end, (index + 1) * piece_bytes) - offset
            segments[index].append((buffer, to, offset - index * piece_bytes, n))
            to, offset = to + n, offset + n
    words = {}  # (buffer, word offset) → bytearray(4): words a write fills only in part
    indices = sorted(segments)
    reading = deque(asyncio.ensure_future(file.piece(i)) for i in indices[:READ_AHEAD])
    try:
        for position, index in enumerate(indices):
            data = await reading.popleft()
            if position + READ_AHEAD < len(indices):
                reading.append(asyncio.ensure_future(file.piece(indices[position + READ_AHEAD])))
            _queue_piece(device, data, segments[index], words)
    finally:
        for task in reading:
            task.cancel()
    for (buffer, to), word in words.items():
        device.write_buffer(buffer, bytes(word), to)


def _queue_piece(device: Device, data, segments, words):
    """Queue each (buffer, buffer offset, offset in the piece, size) of `segments` from
    the piece's `data`; bytes of words they fill only in part go to `words`."""
    whole = defaultdict(list)
    for buffer, to, at, n in segments:
        if to % 4:  # the rest of a word a segment in the last piece began
            head = min(n, 4 - to % 4)
            word = words.setdefault((buffer, to - to % 4), bytearray(4))
            word[to % 4 : to % 4 + head] = _host_bytes(data, at, head)
            to, at, n = to + head, at + head, n - head
        body = n & ~3
        if body:
            whole[buffer].append((to, at, body))
        if n > body:
            words.setdefault((buffer, to + body), bytearray(4))[: n - body] = _host_bytes(data, at + body, n - body)
    for buffer, ranges in whole.items():
        device.write_buffer_ranges(buffer, data, ranges)
