"""Batched submits (Device.batched_submits): several submits made as one submission with
one readback, each still seeing the writes made before it."""

from __future__ import annotations

import asyncio

from .buffers import Buffer, BufferUsage
from .errors import GPUError
from .recorder import Recorder

# Copy recorders kept between batches, keyed by their commands, since a batch repeated
# makes the same copies every time.
KEPT_BATCH_COPIES = 64


class Batch:
    """The submits of an open batch, in order: (recorders, read, the writes made before it
    since the submit before, its BatchedRead or None) each; and the writes made since the
    last one."""

    def __init__(self):
        self.runs: list[tuple] = []
        self.writes: list[tuple] = []  # (buffer, offset, bytes)

    def write(self, buffer: Buffer, offset: int, data: bytes):
        self.writes.append((buffer, offset, data))

    def add(self, recorders, read):
        for recorder in recorders:
            recorder.pinned = True
        part = None if read is None else BatchedRead()
        self.runs.append((recorders, read, self.writes, part))
        self.writes = []
        return part


class SharedRead:
    """A readback awaited by several: the first await starts it, every await gets its bytes."""

    def __init__(self, pending):
        self._pending = pending
        self._future = None

    async def data(self) -> memoryview:
        if self._future is None:
            self._future = asyncio.ensure_future(self._pending)
        return await self._future


class BatchedRead:
    """The awaitable of a batched submit's read: its bytes in the batch's readback."""

    def __init__(self):
        self.whole: SharedRead | None = None  # set when the batch is submitted
        self.start = self.size = 0

    def __await__(self):
        return self._bytes().__await__()

    async def _bytes(self) -> memoryview:
        if self.whole is None:
            raise GPUError("a batched submit's read was awaited before its batch ended, or the batch failed")
        data = await self.whole.data()
        return data[self.start : self.start + self.size]


class BatchEncoder:
    """Encodes a batch's runs as one submission on `device`: the writes made between runs
    are uploaded together and copied in-stream before the run that follows them, and the
    runs' reads are gathered into one buffer and read back once. Its upload and gather
    buffers and its copy recorders are kept for the next batch."""

    def __init__(self, device):
        self._device = device
        self._upload: Buffer | None = None
        self._gather: Buffer | None = None
        self._copies: dict[tuple, Recorder] = {}

    def submit(self, batch: Batch):
        device = self._device
        upload_size = sum(len(data) for _, _, writes, _ in batch.runs for _, _, data in writes)
        gather_size = sum(read[2] for _, read, _, _ in batch.runs if read is not None)
        upload = self._upload = self._resized(self._upload, upload_size, "batch.upload")
        gather = self._gather = self._resized(self._gather, gather_size, "batch.gather")
        lists, copies, uploaded, at, gathered = [], [], [], 0, 0
        for number, (recorders, read, writes, part) in enumerate(batch.runs):
            if number:
                copies.append((Recorder.SUBMIT,))  # each run a command buffer of its own
            for buffer, offset, data in writes:
                copies.append((Recorder.COPY, upload, at, buffer, offset, len(data)))
                uploaded.append(data)
                at += len(data)
            if copies:
                lists.append(self._copy_recorder(copies))
                copies = []
            lists.extend(recorders)
            if read is not None:
                buffer, offset, size = read
                copies.append((Recorder.COPY, buffer, offset, gather, gathered, size))
                part.start, part.size = gathered, size
                gathered += size
        if copies:
            lists.append(self._copy_recorder(copies))
        if uploaded:
            device._raw_write_buffer(upload, 0, b"".join(uploaded), 0, upload_size)
        if not gathered:
            device._raw_submit(lists, None, None)
            return
        whole = SharedRead(device._finish_read(device._raw_submit(lists, None, (gather, 0, gathered))))
        for _, _, _, part in batch.runs:
            if part is not None:
                part.whole = whole

    def _resized(self, buffer: Buffer | None, size: int, label: str) -> Buffer | None:
        """`buffer` if it holds `size` bytes, else a larger one in its place (a power of two)."""
        if not size or (buffer is not None and buffer.size >= size):
            return buffer
        if buffer is not None:
            self._device.destroy_buffer(buffer)
            self._copies.clear()  # their commands name the old buffer
        usage = BufferUsage.COPY_SRC | BufferUsage.COPY_DST
        return self._device.create_buffer(max(256, 1 << (size - 1).bit_length()), usage, label)

    def _copy_recorder(self, commands: list) -> Recorder:
        """A recorder of the copy `commands`, kept for the next batch that makes them."""
        key = tuple(commands)
        recorder = self._copies.get(key)
        if recorder is None:
            if len(self._copies) >= KEPT_BATCH_COPIES:
                self._copies.clear()
            recorder = self._copies[key] = Recorder()
            recorder.extend(commands)
        return recorder
