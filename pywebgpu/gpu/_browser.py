"""Browser backend: the page's (or worker's) `navigator.gpu` through Pyodide's JS proxies."""

from __future__ import annotations

import js
from pyodide.code import run_js
from pyodide.ffi import JsException, create_proxy, to_js

from .adapter import OPTIONAL_FEATURES, REQUESTED_LIMITS, AdapterSummary, requested_limits
from .buffers import STAGING_USAGE, as_bytes_view, byte_range
from .device import Device
from .errors import DeviceLostError, GPUError, ShaderError
from .js_data import is_js_buffer
from .recorder import Recorder

# Small writes from Python are held and handed over with the next submit, in the same JS
# call, since each Python→JS crossing costs microseconds; anything else that reaches the
# queue (a large or JS-side write, a readback, waiting for the GPU, destroying a buffer)
# hands them over first, so the queue sees every operation in the order it was made.
HELD_WRITE_BYTES = 4096
# Held bytes live in a Python buffer of this size, copied in one go into a JS Uint8Array
# of the same size made once (converting a new memoryview to JS each submit costs more);
# full, it is handed over.
HELD_DATA_CAPACITY = 2 * HELD_WRITE_BYTES
# Lists of held writes converted to JS and kept, keyed by their buffers, offsets and
# sizes, since a repeated step holds the same writes with new bytes only.
KEPT_WRITE_LISTS = 16

# Writes the held writes (`writes`: [buffer, offset, start, size, ...] into `data`, a
# Uint8Array; or null/undefined), then encodes and submits whole command lists, all in
# one call from Python, since a submit would otherwise cross into JS three times per
# dispatch. Commands:
# [0, pipeline, bindGroup, x, y, z] (dispatch; consecutive ones share a compute pass),
# [1, src, srcOffset, dst, dstOffset, size] (copy) and [2] (submit what is encoded so far,
# go on in a new command buffer). `timer` is null or [querySet, buffer]:
# the first pass's beginning and the last pass's end are written there (see GPUTimer).
# With a `staging` buffer (else null), the same command buffer copies `readSize` bytes at
# `readOffset` of `readSrc` into it, and its mapping promise is returned. (Plain
# arguments: a list would cost a conversion per call.)
_ENCODE_AND_SUBMIT_JS = """
(device, writes, data, timer, readSrc, readOffset, staging, readSize, ...lists) => {
  if (writes != null) {
    for (let i = 0; i < writes.length; i += 4) {
      device.queue.writeBuffer(writes[i], writes[i + 1], data, writes[i + 2], writes[i + 3]);
    }
  }
  if (lists.length === 0 && staging == null) return null;
  let encoder = device.createCommandEncoder();
  let last = -1;
  if (timer != null) {
    let inPass = false;
    for (const commands of lists) for (const c of commands) {
      if (c[0] === 0) { if (!inPass) last++; inPass = true; } else inPass = false;
    }
  }
  let pass = null, pipeline = null, started = 0;
  for (const commands of lists) for (const c of commands) {
    if (c[0] === 0) {
      if (pass === null) {
        let descriptor = undefined;
        if (timer != null && (started === 0 || started === last)) {
          const writes = { querySet: timer[0] };
          if (started === 0) writes.beginningOfPassWriteIndex = 0;
          if (started === last) writes.endOfPassWriteIndex = 1;
          descriptor = { timestampWrites: writes };
        }
        pass = encoder.beginComputePass(descriptor);
        pipeline = null;
        started++;
      }
      if (c[1] !== pipeline) { pass.setPipeline(c[1]); pipeline = c[1]; }
      pass.setBindGroup(0, c[2]);
      pass.dispatchWorkgroups(c[3], c[4], c[5]);
    } else {
      if (pass !== null) { pass.end(); pass = null; }
      if (c[0] === 1) {
        encoder.copyBufferToBuffer(c[1], c[2], c[3], c[4], c[5]);
      } else {
        device.queue.submit([encoder.finish()]);
        encoder = device.createCommandEncoder();
      }
    }
  }
  if (pass !== null) pass.end();
  if (timer != null) encoder.resolveQuerySet(timer[0], 0, 2, timer[1], 0);
  if (staging != null) encoder.copyBufferToBuffer(readSrc, readOffset, staging, 0, readSize);
  device.queue.submit([encoder.finish()]);
  return staging == null ? null : staging.mapAsync(1 /* GPUMapMode.READ */);
}
"""


# Device.write_buffer_ranges from a JS buffer: `ranges` holds [buffer offset, data
# offset, size, ...]; one call from Python for all of them.
_WRITE_RANGES_JS = """
(queue, buffer, data, ranges) => {
  for (let i = 0; i < ranges.length; i += 3) queue.writeBuffer(buffer, ranges[i], data, ranges[i + 1], ranges[i + 2]);
}
"""


# Creates a bind group inside a validation error scope, so that its error (a binding of
# the wrong size, usage or type) reaches `errors` as [label, message], named by its
# kernel, and not only as the errors it causes later in a submit.
_CREATE_BIND_GROUP_JS = """
(device, descriptor, errors) => {
  device.pushErrorScope("validation");
  const group = device.createBindGroup(descriptor);
  device.popErrorScope().then((error) => { if (error) errors.push([descriptor.label, error.message]); });
  return group;
}
"""


def _byte_view(data):
    """A Uint8Array over a JS ArrayBuffer or typed array: writeBuffer counts a typed
    array's offsets in its elements, a byte view's in bytes. No copy through Python."""
    if not hasattr(data, "byteOffset"):
        return js.Uint8Array.new(data)
    return js.Uint8Array.new(data.buffer, data.byteOffset, data.byteLength)


def _js(value):
    """Python dicts/lists → plain JS objects/arrays, as WebGPU descriptors must be."""
    return to_js(value, dict_converter=js.Object.fromEntries)


async def request_device(limits: str = "adapter") -> "BrowserDevice":
    gpu = getattr(js.navigator, "gpu", None)
    if not gpu:
        raise GPUError(
            "WebGPU is not available here: navigator.gpu is missing "
            "(use a browser with WebGPU enabled, served from localhost or https)"
        )
    adapter = await gpu.requestAdapter(_js({"powerPreference": "high-performance"}))
    if not adapter:
        raise GPUError("this browser offers WebGPU but found no GPU adapter for it")
    adapter_features = set(adapter.features)
    wanted = [f for f in OPTIONAL_FEATURES if f in adapter_features]
    required = requested_limits({name: getattr(adapter.limits, name) for name in REQUESTED_LIMITS}, limits)
    raw = await adapter.requestDevice(_js({"requiredFeatures": wanted, "requiredLimits": required, "label": "pywebgpu"}))
    info = adapter.info
    description = " ".join(str(part) for part in (info.vendor, info.architecture, info.description) if part)
    summary = AdapterSummary(
        backend="browser",
        description=description or "unknown adapter",
        features=frozenset(raw.features),
        limits={name: getattr(raw.limits, name) for name in REQUESTED_LIMITS},
        is_fallback=bool(getattr(info, "isFallbackAdapter", False)),
    )
    return BrowserDevice(raw, summary)


class BrowserDevice(Device):
    """A device over the page's WebGPU, submitting through one JS call per submit."""

    compiles_in_background = True

    def __init__(self, raw, summary: AdapterSummary):
        super().__init__(summary)
        self.raw = raw
        self._queue = raw.queue
        # Proxies kept on self: JS holds these callbacks for the device's lifetime.
        self._on_lost = create_proxy(lambda info: self._device_lost(f"{info.reason}: {info.message}"))
        raw.lost.then(self._on_lost)
        self._on_error = create_proxy(lambda event: self._uncaptured_error(str(event.error.message)))
        raw.addEventListener("uncapturederror", self._on_error)
        self._encode_and_submit = run_js(_ENCODE_AND_SUBMIT_JS)
        self._write_ranges = run_js(_WRITE_RANGES_JS)
        self._create_bind_group = run_js(_CREATE_BIND_GROUP_JS)
        self._bind_group_errors = js.Array.new()  # [label, message] of each refused bind group
        self._held_writes: list = []  # [Buffer, offset, start in _held_data, size, ...]
        self._held_data = bytearray(HELD_DATA_CAPACITY)
        self._held_data_js = js.Uint8Array.new(HELD_DATA_CAPACITY)
        self._held_bytes = 0  # of _held_data in use
        self._write_lists: dict[tuple, object] = {}  # tuple(_held_writes) → its JS form

    def _take_held_writes(self):
        """(writes, data) for _ENCODE_AND_SUBMIT_JS, emptying the held ones; (None, None)
        if none are held."""
        if not self._held_writes:
            return None, None
        key = tuple(self._held_writes)
        writes = self._write_lists.get(key)
        if writes is None:
            if len(self._write_lists) >= KEPT_WRITE_LISTS:
                self._write_lists.clear()
            writes = self._write_lists[key] = to_js([w.handle if i % 4 == 0 else w for i, w in enumerate(key)])
        self._held_data_js.assign(self._held_data)
        self._held_writes, self._held_bytes = [], 0
        return writes, self._held_data_js

    def _hand_over_writes(self):
        if self._held_writes:
            self._encode_and_submit(self.raw, *self._take_held_writes(), None, None, 0, None, 0)

    def _raw_timestamp_query_set(self, count):
        return self.raw.createQuerySet(_js({"type": "timestamp", "count": count, "label": "timer"}))

    def _raw_submit(self, recorders, timer, read):
        # A recorder submitted again reuses its JS array: only the call itself crosses
        # over, and the commands replaced since.
        for recorder in recorders:
            if recorder.backend_form is None:
                recorder.backend_form = _js([_js_command(c) for c in recorder.commands])
            else:
                for index in recorder.replaced:
                    recorder.backend_form[index] = _js(_js_command(recorder.commands[index]))
            recorder.replaced.clear()
        if timer is not None and timer.backend_form is None:
            timer.backend_form = _js([timer.query_set, timer.resolved.handle])
        timing = None if timer is None else timer.backend_form
        reading = (None, 0, None, 0)
        if read is not None:
            buffer, offset, size = read
            staging = self._staging.take(
                size, lambda: self.raw.createBuffer(_js({"size": size, "usage": STAGING_USAGE, "label": "readback"}))
            )
            reading = (buffer.handle, offset, staging, size)
        lists = (recorder.backend_form for recorder in recorders)
        mapping = self._encode_and_submit(self.raw, *self._take_held_writes(), timing, *reading, *lists)
        if read is None:
            return None

        async def finish():
            mapped = False
            try:
                try:
                    await mapping
                except JsException as error:
                    self._check_alive()
                    raise GPUError(f"reading buffer {buffer.label!r} back failed: {error}") from None
                mapped = True
                return memoryview(staging.getMappedRange().to_bytes())
            finally:
                if mapped:
                    staging.unmap()
                if not (mapped and self._staging.keep(size, staging)):
                    staging.destroy()

        return finish

    def _raw_create_buffer(self, size, usage, label):
        return self.raw.createBuffer(_js({"size": size, "usage": usage, "label": label}))

    def _raw_write_buffer(self, buffer, buffer_offset, data, data_offset, size):
        from_js = type(data) is not bytes and is_js_buffer(data)
        if not from_js and size <= HELD_WRITE_BYTES:
            if self._held_bytes + size > HELD_DATA_CAPACITY:
                self._hand_over_writes()
            start = self._held_bytes
            self._held_data[start : start + size] = byte_range(data, data_offset, size)
            self._held_writes += (buffer, buffer_offset, start, size)
            self._held_bytes = start + size
            return
        self._hand_over_writes()
        if from_js:
            self._queue.writeBuffer(buffer.handle, buffer_offset, _byte_view(data), data_offset, size)
        else:
            view = as_bytes_view(data)[data_offset : data_offset + size]
            self._queue.writeBuffer(buffer.handle, buffer_offset, to_js(view))

    def _raw_write_buffer_ranges(self, buffer, data, ranges):
        if type(data) is bytes or not is_js_buffer(data):
            super()._raw_write_buffer_ranges(buffer, data, ranges)
            return
        self._hand_over_writes()
        self._write_ranges(self._queue, buffer.handle, _byte_view(data), to_js([n for r in ranges for n in r]))

    def _raw_destroy_buffer(self, buffer):
        self._hand_over_writes()
        buffer.handle.destroy()
        self._write_lists.clear()  # a kept list may name the buffer, which would then stay alive

    async def _raw_compute_pipeline(self, wgsl, label, entry_point, constants):
        module = self.raw.createShaderModule(_js({"code": wgsl, "label": label}))
        info = await module.getCompilationInfo()
        errors = [m for m in info.messages if m.type == "error"]
        if errors:
            details = "\n".join(f"  line {m.lineNum}:{m.linePos}: {m.message}" for m in errors)
            raise ShaderError(f"kernel {label!r} failed to compile:\n{details}")
        descriptor = {"label": label, "layout": "auto", "compute": {"module": module, "entryPoint": entry_point}}
        if constants:
            descriptor["compute"]["constants"] = constants
        try:
            pipeline = await self.raw.createComputePipelineAsync(_js(descriptor))
        except JsException as error:
            self._check_alive()
            raise ShaderError(f"kernel {label!r}: pipeline creation failed: {error}") from None
        return pipeline, pipeline.getBindGroupLayout(0)

    def _raw_bind_group(self, pipeline, entries, label):
        descriptor = {
            "label": label,
            "layout": pipeline.bind_group_layout,
            "entries": [
                {"binding": binding, "resource": {"buffer": buffer.handle, "offset": offset, "size": size}}
                for binding, buffer, offset, size in entries
            ],
        }
        return self._create_bind_group(self.raw, _js(descriptor), self._bind_group_errors)

    def _raise_pending_errors(self):
        # A refused bind group comes first: the errors of the submits that used it follow from it.
        if self._bind_group_errors.length:
            refused = [f"bind group for kernel {label!r}: {message}" for label, message in self._bind_group_errors.to_py()]
            self._bind_group_errors.length = 0
            self._pending_errors[:0] = refused
        super()._raise_pending_errors()

    async def _raw_synchronize(self):
        self._hand_over_writes()
        try:
            await self._queue.onSubmittedWorkDone()
        except JsException as error:
            self._check_alive()
            raise DeviceLostError(f"waiting for the GPU failed: {error}") from None


def _js_command(command):
    if command[0] == Recorder.DISPATCH:
        kind, pipeline, bind_group, x, y, z = command
        return (kind, pipeline.handle, bind_group.handle, x, y, z)
    if command[0] == Recorder.SUBMIT:
        return command
    kind, src, src_offset, dst, dst_offset, size = command
    return (kind, src.handle, src_offset, dst.handle, dst_offset, size)
