"""The backend-independent half of the GPU layer.

`Device` holds what both backends share: buffer bookkeeping, limit checks, the pipeline
cache and error naming. A backend subclass (`_native.NativeDevice`, `_browser.BrowserDevice`)
implements the handful of `_raw_*` primitives over its own WebGPU API.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field


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

# Features a kernel may specialise on, under their WebGPU-spec names. wgpu-native calls
# "subgroups" "subgroup"; `_normalize_feature` maps backend names onto these.
OPTIONAL_FEATURES = ("shader-f16", "subgroups", "timestamp-query")

# Limits requested at the adapter's real values instead of WebGPU's small defaults
# (a 4-bit 1B-model embedding alone is ~131 MB, above the default 128 MiB binding size).
REQUESTED_LIMITS = (
    "maxStorageBufferBindingSize",
    "maxBufferSize",
    "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup",
    "maxComputeWorkgroupSizeX",
    "maxStorageBuffersPerShaderStage",
)


# Readbacks up to this size reuse their staging buffers (a token's top-k is 8 bytes per
# candidate): nothing is created per token.
POOLED_READ_BYTES = 64 * 1024

# Batched submits (Device.batched_submits) keep the copy commands they make between runs,
# keyed by those commands: a decode block makes the same copies every time.
KEPT_BATCH_COPIES = 64

# WebGPU's default maxComputeWorkgroupsPerDimension; no adapter here offers more.
MAX_WORKGROUPS_PER_DIMENSION = 65535


class GPUError(Exception):
    """A WebGPU operation failed; the message names the kernel or buffer involved."""


class ShaderError(GPUError):
    """A WGSL kernel failed to compile or its pipeline failed to build."""


class DeviceLostError(GPUError):
    """The GPU device is gone (driver reset, tab in background too long, out of memory)."""


def check_grid(label: str, x: int, y: int, z: int):
    limit = MAX_WORKGROUPS_PER_DIMENSION  # compared one by one: a resize records hundreds
    if not (0 <= x <= limit and 0 <= y <= limit and 0 <= z <= limit):
        raise GPUError(
            f"kernel {label!r}: dispatch grid {(x, y, z)} exceeds {MAX_WORKGROUPS_PER_DIMENSION} "
            "workgroups per dimension"
        )


def linear_grid(invocations: int, workgroup_size: int) -> tuple[int, int]:
    """A 2-D grid covering `invocations` threads, for kernels that flatten
    (global_id.x + global_id.y * num_workgroups.x * workgroup_size)."""
    groups = max(1, -(-invocations // workgroup_size))
    rows = -(-groups // MAX_WORKGROUPS_PER_DIMENSION)
    return -(-groups // rows), rows


@dataclass(eq=False)
class Buffer:
    handle: object
    size: int
    usage: int
    label: str
    destroyed: bool = False


@dataclass(eq=False)
class Pipeline:
    handle: object
    bind_group_layout: object
    label: str


@dataclass(eq=False)
class BindGroup:
    handle: object
    label: str


def _normalize_feature(name: str) -> str:
    return "subgroups" if name == "subgroup" else name


def _as_bytes_view(data) -> memoryview:
    """A flat byte view of any buffer-protocol object (bytes, array.array, numpy array)."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise GPUError("data written to a GPU buffer must be contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _byte_range(data, offset: int, size: int):
    """Bytes [offset, offset + size) of a buffer-protocol object: a whole `bytes` as it is
    (the common small write: parameters, positions), else a view of the range."""
    if type(data) is bytes and offset == 0 and size == len(data):
        return data
    return _as_bytes_view(data)[offset : offset + size]


@dataclass
class AdapterSummary:
    backend: str  # "browser" or "native"
    description: str
    features: frozenset = field(default_factory=frozenset)
    limits: dict = field(default_factory=dict)
    is_fallback: bool = False


class Device:
    """A WebGPU device. Create with `await pywebgpu.gpu.request_device()`."""

    # Whether compute_pipeline compiles off this thread, so that a pipeline can be built
    # while the host runs the model (the browser's createComputePipelineAsync); natively
    # (wgpu-native) creating one blocks the thread until it is compiled.
    compiles_in_background = False

    def __init__(self, adapter: AdapterSummary):
        self.adapter = adapter
        self.features: frozenset[str] = adapter.features
        self.limits: dict[str, int] = adapter.limits
        self._pipelines: dict[tuple, asyncio.Future] = {}
        self._lost_reason: str | None = None
        self._pending_errors: list[str] = []
        # Bytes of the buffers made through create_buffer and not destroyed: what this
        # device holds in GPU memory for its user (readback staging is not counted).
        self.allocated_bytes = 0
        # size → unmapped readback staging buffers (backend handles), for reads of up to
        # POOLED_READ_BYTES
        self._free_staging: dict[int, list] = {}
        # The open batch of submits (batched_submits), its buffers for the bytes written
        # between runs and for the bytes read back, and its copy commands kept.
        self._batch: _Batch | None = None
        self._batch_upload: Buffer | None = None
        self._batch_gather: Buffer | None = None
        self._batch_copies: dict[tuple, Recorder] = {}

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
        return buffer

    def create_buffer_with_data(self, data, usage: int = STORAGE_USAGE, label: str = "") -> Buffer:
        view = _as_bytes_view(data)
        buffer = self.create_buffer(len(view), usage, label)
        self.write_buffer(buffer, view)
        return buffer

    def write_buffer(self, buffer: Buffer, data, buffer_offset: int = 0, data_offset: int = 0, size: int | None = None):
        """Queue a write of `data[data_offset:data_offset+size]` (bytes) into `buffer`.

        `data` is any buffer-protocol object, or in the browser a JS ArrayBuffer / typed
        array, which then goes to the GPU without passing through Python's heap.
        """
        self._check_alive()
        total, from_js = self._source_bytes(data)
        if size is None:
            size = total - data_offset
        self._check_write(buffer, buffer_offset, data_offset, size, total)
        if not size:
            return
        batch = self._batch
        if batch is not None and batch.runs:  # a write between batched runs: copied in-stream
            if from_js:
                raise GPUError(f"write to buffer {buffer.label!r}: JS data cannot be written between batched submits")
            batch.write(buffer, buffer_offset, bytes(_byte_range(data, data_offset, size)))
            return
        self._raw_write_buffer(buffer, buffer_offset, data, data_offset, size)

    def write_buffer_ranges(self, buffer: Buffer, data, ranges):
        """write_buffer of each (buffer_offset, data_offset, size) of `ranges`, in order,
        from one `data`. In the browser, from a JS buffer, one JS call makes them all (a
        concatenated linear's scales: a write per group row, ~2,700 for SmolLM2)."""
        self._check_alive()
        total, _ = self._source_bytes(data)
        for buffer_offset, data_offset, size in ranges:
            self._check_write(buffer, buffer_offset, data_offset, size, total)
        ranges = [r for r in ranges if r[2]]
        batch = self._batch
        if batch is not None and batch.runs:
            for buffer_offset, data_offset, size in ranges:
                self.write_buffer(buffer, data, buffer_offset, data_offset, size)
        elif ranges:
            self._raw_write_buffer_ranges(buffer, data, ranges)

    def _source_bytes(self, data) -> tuple[int, bool]:
        """(byte length of `data`, whether it is a JS buffer)."""
        if type(data) is bytes:  # the common small write (parameters, positions): no view
            return len(data), False
        js_length = self._js_bytes_length(data)
        if js_length is not None:
            return js_length, True
        return len(_as_bytes_view(data)), False

    @staticmethod
    def _check_write(buffer: Buffer, buffer_offset: int, data_offset: int, size: int, total: int):
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

    async def read_buffer(self, buffer: Buffer, offset: int = 0, size: int | None = None) -> memoryview:
        """Copy `size` bytes at `offset` back from the GPU (waits for queued work)."""
        return await self.start_read(buffer, offset, size)

    def start_read(self, buffer: Buffer, offset: int = 0, size: int | None = None):
        """Queue the copy of `size` bytes at `offset` back from the GPU now, behind the
        work submitted so far, and return an awaitable of them: work submitted before
        awaiting it runs on the GPU while the bytes travel back."""
        self._check_outside_batch("reading a buffer back")
        return self._finish_read(self._raw_submit((), None, _checked_read(buffer, offset, size)))

    def _take_staging(self, size: int, create):
        """A readback staging buffer (backend handle) of `size` bytes: a pooled one when
        one is free, else `create()`'s."""
        free = self._free_staging.get(size) if size <= POOLED_READ_BYTES else None
        return free.pop() if free else create()

    def _keep_staging(self, size: int, staging) -> bool:
        """Keep an unmapped staging buffer for the next read of `size` bytes; False when
        reads of that size are not pooled (the backend then destroys it)."""
        if size > POOLED_READ_BYTES:
            return False
        self._free_staging.setdefault(size, []).append(staging)
        return True

    async def _finish_read(self, finish) -> memoryview:
        data = await finish()
        self._raise_pending_errors()
        return data

    def destroy_buffer(self, buffer: Buffer):
        """Free the buffer's GPU memory now; destroying it again does nothing."""
        if buffer.destroyed:
            return
        self._check_outside_batch(f"destroying buffer {buffer.label!r}")
        self._raw_destroy_buffer(buffer)
        buffer.destroyed = True
        self.allocated_bytes -= buffer.size

    # --- pipelines and bind groups -------------------------------------------------
    async def compute_pipeline(self, wgsl: str, label: str, entry_point: str = "main", constants: dict | None = None) -> Pipeline:
        """The compute pipeline for `wgsl` + override `constants`, built once and cached.

        A WGSL or pipeline error raises ShaderError naming `label`.
        """
        self._check_alive()
        constants = dict(sorted((constants or {}).items()))
        # Keyed by the source itself: a string's hash is computed once per string object
        # (the kernels' sources are cached, kernels.load_wgsl), where a sha256 of each
        # request's source (~47 KB for the linears', ~1,000 requests in a graph's build)
        # cost 0.15 ms a request in Pyodide.
        key = (wgsl, entry_point, tuple(constants.items()))
        # The cache holds the task making a pipeline: ops building concurrently (a
        # graph's build) that ask for one being made wait for it rather than make it again.
        making = self._pipelines.get(key)
        if making is None:
            making = self._pipelines[key] = asyncio.ensure_future(self._new_pipeline(wgsl, label, entry_point, constants))
        return await making

    async def _new_pipeline(self, wgsl, label, entry_point, constants) -> Pipeline:
        handle, layout = await self._raw_compute_pipeline(wgsl, label, entry_point, constants)
        return Pipeline(handle, layout, label)

    def bind_group(self, pipeline: Pipeline, buffers, label: str = "") -> BindGroup:
        """Bind `buffers` to group 0: a list binds 0..n-1 in order, a dict {binding: entry}
        names its bindings. Each entry is a Buffer or (Buffer, offset, size) for a sub-range.
        """
        self._check_alive()
        entries = []
        numbered = buffers.items() if isinstance(buffers, dict) else enumerate(buffers)
        for binding, entry in numbered:
            buffer, offset, size = (entry, 0, entry.size) if isinstance(entry, Buffer) else entry
            if offset + size > buffer.size:
                raise GPUError(
                    f"bind group {label or pipeline.label!r}: binding {binding} range "
                    f"[{offset}, {offset + size}) exceeds buffer {buffer.label!r} of {buffer.size} bytes"
                )
            entries.append((binding, buffer, offset, size))
        label = label or pipeline.label
        return BindGroup(self._raw_bind_group(pipeline, entries, label), label)

    # --- recording and submission --------------------------------------------------
    def record(self) -> "Recorder":
        """An empty command list to record into and hand to `submit`."""
        self._check_alive()
        return Recorder()

    def submit(self, *recorders: "Recorder", timer: "GPUTimer | None" = None, read: tuple | None = None):
        """Run the recorders' commands, in order, as one command buffer; with a `timer`,
        the GPU also notes when its compute passes begin and end (see GPUTimer).

        With `read` = (buffer, offset, size), the same command buffer then copies those
        bytes back, and submit returns an awaitable of them (as start_read does): a
        decode step's result costs no second submission.

        Inside batched_submits, the submission waits for the batch's end."""
        self._check_alive()
        self._raise_pending_errors()
        if self._batch is not None:
            if timer is not None:
                raise GPUError("a timed submit cannot join a batch of submits")
            return self._batch.add(recorders, None if read is None else _checked_read(*read))
        if read is None:
            self._raw_submit(recorders, timer, None)
            return None
        return self._finish_read(self._raw_submit(recorders, timer, _checked_read(*read)))

    @contextlib.contextmanager
    def batched_submits(self):
        """Make the submits inside one submission: one call that submits a command buffer
        per submit (the GPU starts on the first while the next are converted), whose reads
        come back in one readback, each submit's awaitable still giving its own bytes. A write
        made between two of them is copied on the GPU just before the later one's
        commands (from bytes uploaded with the batch), so that each submit sees the
        writes made before it, as if submitted alone. For work the host prepares faster
        than one submission per run allows (decode steps: one JS call and one readback
        for several). The recorders submitted must not change until the batch is
        submitted (see Recorder.pinned); reading back, waiting for the GPU and destroying
        buffers are refused until then. Leaving by an exception submits the runs made so far."""
        self._check_outside_batch("opening a batch of submits")
        self._batch = batch = _Batch()
        try:
            yield
        finally:
            self._batch = None
            self._submit_batch(batch)

    def _check_outside_batch(self, what: str):
        self._check_alive()
        if self._batch is not None:
            raise GPUError(f"{what} inside a batch of submits: end the batch first")

    def _submit_batch(self, batch: "_Batch"):
        try:
            if batch.runs:
                self._encode_batch(batch)
            for buffer, offset, data in batch.writes:  # after the last run: plain writes
                self._raw_write_buffer(buffer, offset, data, 0, len(data))
        finally:
            for recorders, _, _, _ in batch.runs:
                for recorder in recorders:
                    recorder.pinned = False

    def _encode_batch(self, batch: "_Batch"):
        upload_size = sum(len(data) for _, _, writes, _ in batch.runs for _, _, data in writes)
        gather_size = sum(read[2] for _, read, _, _ in batch.runs if read is not None)
        upload = self._batch_upload = self._batch_buffer(self._batch_upload, upload_size, "batch.upload")
        gather = self._batch_gather = self._batch_buffer(self._batch_gather, gather_size, "batch.gather")
        lists, copies, uploaded, at, gathered = [], [], [], 0, 0
        for number, (recorders, read, writes, part) in enumerate(batch.runs):
            if number:
                copies.append((Recorder.SUBMIT,))  # each run a command buffer of its own
            for buffer, offset, data in writes:
                copies.append((Recorder.COPY, upload, at, buffer, offset, len(data)))
                uploaded.append(data)
                at += len(data)
            if copies:
                lists.append(self._batch_copy_recorder(copies))
                copies = []
            lists.extend(recorders)
            if read is not None:
                buffer, offset, size = read
                copies.append((Recorder.COPY, buffer, offset, gather, gathered, size))
                part.start, part.size = gathered, size
                gathered += size
        if copies:
            lists.append(self._batch_copy_recorder(copies))
        if uploaded:
            self._raw_write_buffer(upload, 0, b"".join(uploaded), 0, upload_size)
        if not gathered:
            self._raw_submit(lists, None, None)
            return
        whole = _SharedRead(self._finish_read(self._raw_submit(lists, None, (gather, 0, gathered))))
        for _, _, _, part in batch.runs:
            if part is not None:
                part.whole = whole

    def _batch_buffer(self, buffer: "Buffer | None", size: int, label: str) -> "Buffer | None":
        """`buffer` if it holds `size` bytes, else a larger one in its place (a power of two)."""
        if not size or (buffer is not None and buffer.size >= size):
            return buffer
        if buffer is not None:
            self.destroy_buffer(buffer)
            self._batch_copies.clear()  # their commands name the old buffer
        return self.create_buffer(max(256, 1 << (size - 1).bit_length()), BufferUsage.COPY_SRC | BufferUsage.COPY_DST, label)

    def _batch_copy_recorder(self, commands: list) -> "Recorder":
        """A recorder of the copy `commands`, kept for the next batch that makes them."""
        key = tuple(commands)
        recorder = self._batch_copies.get(key)
        if recorder is None:
            if len(self._batch_copies) >= KEPT_BATCH_COPIES:
                self._batch_copies.clear()
            recorder = self._batch_copies[key] = Recorder()
            recorder.extend(commands)
        return recorder

    def timer(self) -> "GPUTimer":
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
    def _js_bytes_length(self, data) -> int | None:
        """Byte length of `data` if it is a JS ArrayBuffer/typed array (browser only)."""
        return None

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


class GPUTimer:
    """GPU time of one submit, from timestamp queries: the beginning of its first compute
    pass to the end of its last (copies between passes included, the queue's wait before
    the first not). Browsers may round timestamps (Chromium: to 100 µs by default)."""

    def __init__(self, device: Device, query_set, resolved: Buffer):
        self.device = device
        self.query_set = query_set
        self.resolved = resolved  # the two timestamps (ns, u64) of the last timed submit
        self.backend_form = None  # the browser's JS [querySet, buffer] pair

    async def read_seconds(self) -> float:
        """GPU seconds of the last submit made with this timer (waits for it)."""
        begin, end = struct.unpack("<QQ", bytes(await self.device.read_buffer(self.resolved)))
        return max(0, end - begin) / 1e9


def _checked_read(buffer: Buffer, offset: int = 0, size: int | None = None) -> tuple:
    if size is None:
        size = buffer.size - offset
    if offset < 0 or size < 0 or offset + size > buffer.size or offset % 4 or size % 4:
        raise GPUError(
            f"read of [{offset}, {offset + size}) from buffer {buffer.label!r} "
            f"({buffer.size} bytes): out of range or not 4-byte aligned"
        )
    return buffer, offset, size


class _Batch:
    """The submits of an open Device.batched_submits, in order: (recorders, read, the
    writes made before it since the submit before, its _BatchedRead or None) each; and
    the writes made since the last one."""

    def __init__(self):
        self.runs: list[tuple] = []
        self.writes: list[tuple] = []  # (buffer, offset, bytes)

    def write(self, buffer: Buffer, offset: int, data: bytes):
        self.writes.append((buffer, offset, data))

    def add(self, recorders, read):
        for recorder in recorders:
            recorder.pinned = True
        part = None if read is None else _BatchedRead()
        self.runs.append((recorders, read, self.writes, part))
        self.writes = []
        return part


class _SharedRead:
    """A readback awaited by several: the first await starts it, every await gets its bytes."""

    def __init__(self, pending):
        self._pending = pending
        self._future = None

    async def data(self) -> memoryview:
        if self._future is None:
            self._future = asyncio.ensure_future(self._pending)
        return await self._future


class _BatchedRead:
    """The awaitable of a batched submit's read: its bytes in the batch's readback."""

    def __init__(self):
        self.whole: _SharedRead | None = None  # set when the batch is submitted
        self.start = self.size = 0

    def __await__(self):
        return self._bytes().__await__()

    async def _bytes(self) -> memoryview:
        if self.whole is None:
            raise GPUError("a batched submit's read was awaited before its batch ended, or the batch failed")
        data = await self.whole.data()
        return data[self.start : self.start + self.size]


class Recorder:
    """A list of dispatches and copies, recorded in Python and submitted whole, as often
    as wanted: a graph records its schedule once and submits the same list every token.

    Consecutive dispatches share one compute pass (WebGPU orders their storage accesses);
    a copy ends the pass. `commands` holds (DISPATCH, pipeline, bind group, x, y, z) and
    (COPY, src, src offset, dst, dst offset, size) tuples, and (SUBMIT,): the commands
    before it go to the GPU as a command buffer of their own, the rest in the next.
    """

    DISPATCH = 0
    COPY = 1
    SUBMIT = 2

    def __init__(self):
        self.commands: list[tuple] = []
        # The backend's own form of `commands` (in the browser, a JS array), made at the
        # first submit and kept while nothing is added; `replaced` lists the commands to
        # convert again before the next submit.
        self.backend_form = None
        self.replaced: list[int] = []
        # Submitted in an open batch (Device.batched_submits), which encodes it at its end:
        # changing it before then would change what the earlier submit runs.
        self.pinned = False

    def dispatch(self, pipeline: Pipeline, bind_group: BindGroup, x: int, y: int = 1, z: int = 1):
        check_grid(pipeline.label, x, y, z)
        if self.pinned:
            self._refuse_change()
        self.commands.append((self.DISPATCH, pipeline, bind_group, x, y, z))
        self.backend_form = None

    def copy(self, src: Buffer, dst: Buffer, size: int, src_offset: int = 0, dst_offset: int = 0):
        if self.pinned:
            self._refuse_change()
        self.commands.append((self.COPY, src, src_offset, dst, dst_offset, size))
        self.backend_form = None

    def extend(self, commands):
        if self.pinned:
            self._refuse_change()
        self.commands.extend(commands)
        self.backend_form = None

    @staticmethod
    def _refuse_change():
        raise GPUError("a recorder submitted in an open batch of submits cannot change before the batch ends")

    def replace(self, start: int, commands):
        """Overwrite as many commands as given from index `start` on (a schedule's op
        whose commands changed their arguments only)."""
        if self.pinned:
            self._refuse_change()
        end = start + len(commands)
        if end > len(self.commands):
            raise GPUError(f"replacing commands [{start}, {end}) of a list of {len(self.commands)}")
        self.commands[start:end] = commands
        if self.backend_form is not None:
            self.replaced.extend(range(start, end))
