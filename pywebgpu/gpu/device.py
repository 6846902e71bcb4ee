"""The backend-independent half of a device.

`Device` holds what both backends share: buffer bookkeeping, limit checks, the pipeline
cache, batched submits and error naming. A backend subclass (`_native.NativeDevice`,
`_browser.BrowserDevice`) implements the handful of `_raw_*` primitives over its own
WebGPU API.
"""

from __future__ import annotations

import contextlib

from .adapter import AdapterSummary
from .batch import Batch, BatchEncoder
from .buffers import (
    STORAGE_USAGE,
    Buffer,
    BufferUsage,
    StagingPool,
    as_bytes_view,
    byte_range,
    check_write,
    checked_read,
    note_created,
)
from .errors import DeviceLostError, GPUError
from .js_data import is_js_buffer
from .pipelines import BindGroup, Pipeline, PipelineCache, bind_group_entries
from .recorder import Recorder
from .timer import GPUTimer


class Device:
    """A WebGPU device. Create with `await pywebgpu.gpu.request_device()`."""

    # Whether compute_pipeline compiles off this thread, so that a pipeline can be built
    # while the host works (the browser's createComputePipelineAsync); natively creating
    # one blocks the thread until it is compiled.
    compiles_in_background = False

    def __init__(self, adapter: AdapterSummary):
        self.adapter = adapter
        self.features: frozenset[str] = adapter.features
        self.limits: dict[str, int] = adapter.limits
        self._pipelines = PipelineCache(self._raw_compute_pipeline)
        self._lost_reason: str | None = None
        self._pending_errors: list[str] = []
        # Bytes and count of the buffers made through create_buffer and not destroyed: what
        # this device holds in GPU memory for its user (readback staging is not counted).
        self.allocated_bytes = 0
        self.allocated_buffers = 0
        self._staging = StagingPool()
        self._batch: Batch | None = None  # the open batched_submits
        self._batch_encoder = BatchEncoder(self)

    # --- buffers -------------------------------------------------------------------
    def create_buffer(self, size: int, usage: int = STORAGE_USAGE, label: str = "") -> Buffer:
        """A zero-initialised buffer. Sizes are rounded up to 4 bytes (WebGPU's copy unit)."""
        self._check_alive()
        if size < 0:
            raise GPUError(f"buffer {label!r}: negative size {size}")
        size = max(4, (size + 3) & ~3)
        max_size = self.limits.get("maxBufferSize")
        if max_size and size > max_size:
            raise GPUError(
                f"buffer {label!r} needs {size} bytes, above this adapter's maxBufferSize {max_size}"
            )
        max_binding = self.limits.get("maxStorageBufferBindingSize")
        if usage & BufferUsage.STORAGE and max_binding and size > max_binding:
            raise GPUError(
                f"storage buffer {label!r} needs {size} bytes, above this adapter's "
                f"maxStorageBufferBindingSize {max_binding}"
            )
        buffer = Buffer(self._raw_create_buffer(size, usage, label), size, usage, label)
        self.allocated_bytes += size
        self.allocated_buffers += 1
        note_created(buffer)
        return buffer

    def create_buffer_with_data(self, data, usage: int = STORAGE_USAGE, label: str = "") -> Buffer:
        view = as_bytes_view(data)
        buffer = self.create_buffer(len(view), usage, label)
        self.write_buffer(buffer, view)
        return buffer

    def write_buffer(self, buffer: Buffer, data, buffer_offset: int = 0, data_offset: int = 0, size: int | None = None):
        """Queue a write of `data[data_offset:data_offset+size]` (bytes) into `buffer`.

        `data` is any buffer-protocol object, or in the browser a JS ArrayBuffer / typed
        array, which then goes to the GPU without passing through Python's heap.
        """
        self._check_alive()
        total, from_js = _source_bytes(data)
        if size is None:
            size = total - data_offset
        check_write(buffer, buffer_offset, data_offset, size, total)
        if not size:
            return
        batch = self._batch
        if batch is not None and batch.runs:  # a write between batched runs: copied in-stream
            if from_js:
                raise GPUError(f"write to buffer {buffer.label!r}: JS data cannot be written between batched submits")
            batch.write(buffer, buffer_offset, bytes(byte_range(data, data_offset, size)))
            return
        self._raw_write_buffer(buffer, buffer_offset, data, data_offset, size)

    def write_buffer_ranges(self, buffer: Buffer, data, ranges):
        """write_buffer of each (buffer_offset, data_offset, size) of `ranges`, in order,
        from one `data`; in the browser, from a JS buffer, one JS call makes them all."""
        self._check_alive()
        total, _ = _source_bytes(data)
        for buffer_offset, data_offset, size in ranges:
            check_write(buffer, buffer_offset, data_offset, size, total)
        ranges = [r for r in ranges if r[2]]
        batch = self._batch
        if batch is not None and batch.runs:
            for buffer_offset, data_offset, size in ranges:
                self.write_buffer(buffer, data, buffer_offset, data_offset, size)
        elif ranges:
            self._raw_write_buffer_ranges(buffer, data, ranges)

    async def read_buffer(self, buffer: Buffer, offset: int = 0, size: int | None = None) -> memoryview:
        """Copy `size` bytes at `offset` back from the GPU (waits for queued work)."""
        return await self.start_read(buffer, offset, size)

    def start_read(self, buffer: Buffer, offset: int = 0, size: int | None = None):
        """Queue the copy of `size` bytes at `offset` back from the GPU now, behind the
        work submitted so far, and return an awaitable of them: work submitted before
        awaiting it runs on the GPU while the bytes travel back."""
        self._check_outside_batch("reading a buffer back")
        return self._finish_read(self._raw_submit((), None, checked_read(buffer, offset, size)))

    async def _finish_read(self, finish) -> memoryview:
        data = await finish()
        self._raise_pending_errors()
        return data

    def destroy_buffer(self, buffer: Buffer):
        """Free the buffer's GPU memory now; destroying it again does nothing."""
        if buffer.destroyed:
            return
        if self._lost_reason is None:  # a lost device's memory is gone already
            self._check_outside_batch(f"destroying buffer {buffer.label!r}")
            self._raw_destroy_buffer(buffer)
        buffer.destroyed = True
        self.allocated_bytes -= buffer.size
        self.allocated_buffers -= 1

    # --- pipelines and bind groups -------------------------------------------------
    async def compute_pipeline(self, wgsl: str, label: str, entry_point: str = "main", constants: dict | None = None) -> Pipeline:
        """The compute pipeline for `wgsl` + override `constants`, built once and cached.

        A WGSL or pipeline error raises ShaderError naming `label`.
        """
        self._check_alive()
        return await self._pipelines.get(wgsl, label, entry_point, constants or {})

    def bind_group(self, pipeline: Pipeline, buffers, label: str = "") -> BindGroup:
        """Bind `buffers` to group 0: a list binds 0..n-1 in order, a dict {binding: entry}
        names its bindings. Each entry is a Buffer or (Buffer, offset, size) for a sub-range.
        """
        self._check_alive()
        entries = bind_group_entries(pipeline, buffers, label)
        label = label or pipeline.label
        return BindGroup(self._raw_bind_group(pipeline, entries, label), label)

    # --- recording and submission --------------------------------------------------
    def record(self) -> Recorder:
        """An empty command list to record into and hand to `submit`."""
        self._check_alive()
        return Recorder()

    def submit(self, *recorders: Recorder, timer: GPUTimer | None = None, read: tuple | None = None):
        """Run the recorders' commands, in order, as one command buffer; with a `timer`,
        the GPU also notes when its compute passes begin and end (see GPUTimer).

        With `read` = (buffer, offset, size), the same command buffer then copies those
        bytes back, and submit returns an awaitable of them (as start_read does), so a
        result costs no second submission.

        Inside batched_submits, the submission waits for the batch's end."""
        self._check_alive()
        self._raise_pending_errors()
        if self._batch is not None:
            if timer is not None:
                raise GPUError("a timed submit cannot join a batch of submits")
            return self._batch.add(recorders, None if read is None else checked_read(*read))
        if read is None:
            self._raw_submit(recorders, timer, None)
            return None
        return self._finish_read(self._raw_submit(recorders, timer, checked_read(*read)))

    @contextlib.contextmanager
    def batched_submits(self):
        """Make the submits inside one submission: one call that submits a command buffer
        per submit (the GPU starts on the first while the next are converted), whose reads
        come back in one readback, each submit's awaitable still giving its own bytes.

        A write made between two of them is copied on the GPU just before the later one's
        commands, so that each submit sees the writes made before it, as if submitted
        alone. The recorders submitted must not change until the batch is submitted (see
        Recorder.pinned); reading back, waiting for the GPU and destroying buffers are
        refused until then. Leaving by an exception submits the runs made so far."""
        self._check_outside_batch("opening a batch of submits")
        self._batch = batch = Batch()
        try:
            yield
        finally:
            self._batch = None
            self._submit_batch(batch)

    def _submit_batch(self, batch: Batch):
        try:
            if batch.runs:
                self._batch_encoder.submit(batch)
            for buffer, offset, data in batch.writes:  # after the last run: plain writes
                self._raw_write_buffer(buffer, offset, data, 0, len(data))
        finally:
            for recorders, _, _, _ in batch.runs:
                for recorder in recorders:
                    recorder.pinned = False

    def _check_outside_batch(self, what: str):
        self._check_alive()
        if self._batch is not None:
            raise GPUError(f"{what} inside a batch of submits: end the batch first")

    def timer(self) -> GPUTimer:
        """A GPUTimer for `submit` (needs the adapter's timestamp-query feature)."""
        self._check_alive()
        if "timestamp-query" not in self.features:
            raise GPUError("GPU timing needs the timestamp-query feature, which this adapter does not offer")
        resolved = self.create_buffer(16, BufferUsage.QUERY_RESOLVE | BufferUsage.COPY_SRC, label="timer.resolved")
        return GPUTimer(self, self._raw_timestamp_query_set(2), resolved)

    async def synchronize(self):
        """Wait until all submitted work is done; raise any error it produced."""
        self._check_outside_batch("waiting for the GPU")
        await self._raw_synchronize()
        self._raise_pending_errors()

    # --- errors --------------------------------------------------------------------
    def _device_lost(self, reason: str):
        self._lost_reason = reason or "unknown reason"

    def _uncaptured_error(self, message: str):
        self._pending_errors.append(message)

    def _check_alive(self):
        if self._lost_reason is not None:
            raise DeviceLostError(f"the GPU device was lost: {self._lost_reason}")

    def _raise_pending_errors(self):
        self._check_alive()
        if self._pending_errors:
            errors, self._pending_errors = self._pending_errors, []
            raise GPUError("GPU error: " + "\n".join(errors))

    # --- backend primitives ----------------------------------------------------------
    def _raw_create_buffer(self, size, usage, label):
        raise NotImplementedError

    def _raw_write_buffer(self, buffer, buffer_offset, data, data_offset, size):
        raise NotImplementedError

    def _raw_write_buffer_ranges(self, buffer, data, ranges):
        for buffer_offset, data_offset, size in ranges:
            self._raw_write_buffer(buffer, buffer_offset, data, data_offset, size)

    def _raw_destroy_buffer(self, buffer):
        raise NotImplementedError

    async def _raw_compute_pipeline(self, wgsl, label, entry_point, constants):
        raise NotImplementedError

    def _raw_bind_group(self, pipeline, entries, label):
        raise NotImplementedError

    def _raw_submit(self, recorders, timer, read):
        """Encode and submit; with `read` (buffer, offset, size) also queue that copy back
        and return an async function that waits for the bytes."""
        raise NotImplementedError

    def _raw_timestamp_query_set(self, count):
        raise NotImplementedError

    async def _raw_synchronize(self):
        raise NotImplementedError


def _source_bytes(data) -> tuple[int, bool]:
    """(byte length of `data`, whether it is a JS buffer)."""
    if type(data) is bytes:  # the common small write: no view
        return len(data), False
    if is_js_buffer(data):
        return data.byteLength, True
    return len(as_bytes_view(data)), False
