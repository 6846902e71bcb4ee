"""Native backend: the `wgpu` package (wgpu-native) in CPython."""

from __future__ import annotations

import asyncio

import wgpu

from .adapter import OPTIONAL_FEATURES, REQUESTED_LIMITS, AdapterSummary, normalize_feature, requested_limits
from .buffers import STAGING_USAGE, STORAGE_USAGE, as_bytes_view
from .device import Device
from .errors import DeviceLostError, GPUError, ShaderError
from .recorder import Recorder


# Subgroup builtins need these directives in browsers (WGSL); naga (wgpu 0.32) refuses
# the first, warns about the second, and takes the builtins without either.
BROWSER_ONLY_DIRECTIVES = ("enable subgroups;", "diagnostic(off, subgroup_uniformity);")


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


# wgpu-native ranks adapters by backend: Vulkan first (a real GPU, or lavapipe on a CPU
# machine); OpenGL only where there is no Vulkan driver at all.
_BACKEND_PREFERENCE = {"Vulkan": 0, "Metal": 0, "D3D12": 1, "OpenGL": 2}


def _pick_adapter():
    adapters = wgpu.gpu.enumerate_adapters_sync()
    if not adapters:
        raise GPUError("no WebGPU adapter found (wgpu-native sees no Vulkan, Metal, D3D12 or OpenGL driver)")
    kind_rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    return min(
        adapters,
        key=lambda a: (
            _BACKEND_PREFERENCE.get(a.info["backend_type"], 3),
            kind_rank.get(a.info["adapter_type"], 4),
        ),
    )


async def request_device(limits: str = "adapter") -> "NativeDevice":
    adapter = _pick_adapter()
    adapter_features = {normalize_feature(f): f for f in adapter.features}
    wanted = [adapter_features[f] for f in OPTIONAL_FEATURES if f in adapter_features]
    adapter_limits = {name: adapter.limits[_kebab(name)] for name in REQUESTED_LIMITS}
    required = {_kebab(name): value for name, value in requested_limits(adapter_limits, limits).items()}
    raw = adapter.request_device_sync(required_features=wanted, required_limits=required, label="pywebgpu")
    info = adapter.info
    summary = AdapterSummary(
        backend="native",
        description=f"{info['device']} ({info['backend_type']}, {info['adapter_type']})",
        features=frozenset(normalize_feature(f) for f in raw.features),
        limits={name: raw.limits[_kebab(name)] for name in REQUESTED_LIMITS},
        is_fallback=info["adapter_type"] == "CPU",
    )
    return NativeDevice(raw, summary)


# How wgpu-native's errors say that their device is lost (destroyed, or reset by the
# driver): wgpu 0.32 only logs the loss itself, so the errors that follow tell it.
_LOST_MARKER = "device is lost"


class NativeDevice(Device):
    """A device over wgpu-native."""

    def __init__(self, raw, summary: AdapterSummary):
        super().__init__(summary)
        self.raw = raw
        self._queue = raw.queue
        self._sync_buffer = None

    def _error(self, context: str, error: Exception) -> GPUError:
        """The GPUError to raise for wgpu-native's `error` while doing `context`: a
        DeviceLostError from then on where it says the device is lost."""
        if _LOST_MARKER in str(error):
            self._device_lost("wgpu-native says so")
            return DeviceLostError(f"the GPU device was lost ({self._lost_reason}, {context})")
        return GPUError(f"{context}: {error}")

    def _raw_create_buffer(self, size, usage, label):
        try:
            return self.raw.create_buffer(size=size, usage=usage, label=label)
        except wgpu.GPUError as error:
            raise self._error(f"creating buffer {label!r} of {size:,} bytes", error) from None

    def _raw_write_buffer(self, buffer, buffer_offset, data, data_offset, size):
        view = as_bytes_view(data)[data_offset : data_offset + size]
        self._queue.write_buffer(buffer.handle, buffer_offset, view)

    def _read_back(self, encoder, read):
        """Encode the copy of `read` (buffer, offset, size) into a staging buffer; returns
        an async function that waits for the bytes, once the encoder is submitted."""
        buffer, offset, size = read
        staging = self._staging.take(size, lambda: self._raw_create_buffer(size, STAGING_USAGE, "readback"))
        encoder.copy_buffer_to_buffer(buffer.handle, offset, staging, 0, size)

        async def finish():
            try:
                staging.map_sync(wgpu.MapMode.READ)
                data = memoryview(staging.read_mapped())  # a copy: valid after unmap
                staging.unmap()
            except wgpu.GPUError as error:
                staging.destroy()
                raise self._error(f"reading buffer {buffer.label!r}", error) from None
            # map_sync leaves its promise's resolution queued on the running loop: yield to
            # the loop once, or a caller whose awaits never suspend piles them up per read.
            await asyncio.sleep(0)
            if not self._staging.keep(size, staging):
                staging.destroy()
            return data

        return finish

    def _raw_destroy_buffer(self, buffer):
        buffer.handle.destroy()

    async def _raw_compute_pipeline(self, wgsl, label, entry_point, constants):
        for directive in BROWSER_ONLY_DIRECTIVES:
            wgsl = wgsl.replace(directive, "")
        try:
            module = self.raw.create_shader_module(code=wgsl, label=label)
            pipeline = self.raw.create_compute_pipeline(
                layout="auto",
                compute={"module": module, "entry_point": entry_point, "constants": constants},
                label=label,
            )
        except wgpu.GPUError as error:
            if _LOST_MARKER in str(error):
                raise self._error(f"building kernel {label!r}", error) from None
            raise ShaderError(f"kernel {label!r} failed to build:\n{error}") from None
        return pipeline, pipeline.get_bind_group_layout(0)

    def _raw_bind_group(self, pipeline, entries, label):
        try:
            return self.raw.create_bind_group(
                layout=pipeline.bind_group_layout,
                entries=[
                    {"binding": binding, "resource": {"buffer": buffer.handle, "offset": offset, "size": size}}
                    for binding, buffer, offset, size in entries
                ],
                label=label,
            )
        except wgpu.GPUError as error:
            raise self._error(f"bind group for kernel {label!r}", error) from None

    def _raw_timestamp_query_set(self, count):
        return self.raw.create_query_set(type="timestamp", count=count, label="timer")

    def _raw_submit(self, recorders, timer, read):
        encoder = self.raw.create_command_encoder()
        compute_pass = None
        label = ""
        passes = _count_passes(recorders) if timer else 0
        started = 0
        for recorder in recorders:
            for command in recorder.commands:
                if command[0] == Recorder.DISPATCH:
                    _, pipeline, bind_group, x, y, z = command
                    if compute_pass is None:
                        writes = None
                        if timer and started in (0, passes - 1):
                            writes = {"query_set": timer.query_set}
                            if started == 0:
                                writes["beginning_of_pass_write_index"] = 0
                            if started == passes - 1:
                                writes["end_of_pass_write_index"] = 1
                        compute_pass = encoder.begin_compute_pass(timestamp_writes=writes)
                        started += 1
                    compute_pass.set_pipeline(pipeline.handle)
                    compute_pass.set_bind_group(0, bind_group.handle)
                    compute_pass.dispatch_workgroups(x, y, z)
                    label = pipeline.label
                else:
                    if compute_pass is not None:
                        compute_pass.end()
                        compute_pass = None
                    if command[0] == Recorder.COPY:
                        _, src, src_offset, dst, dst_offset, size = command
                        encoder.copy_buffer_to_buffer(src.handle, src_offset, dst.handle, dst_offset, size)
                    else:
                        self._submit_encoder(encoder, recorders, label, None)
                        encoder = self.raw.create_command_encoder()
        if compute_pass is not None:
            compute_pass.end()
        if timer:
            encoder.resolve_query_set(timer.query_set, 0, 2, timer.resolved.handle, 0)
        finish = None if read is None else self._read_back(encoder, read)
        self._submit_encoder(encoder, recorders, label, read)
        return finish

    def _submit_encoder(self, encoder, recorders, label, read):
        try:
            self._queue.submit([encoder.finish()])
        except wgpu.GPUError as error:
            if not label and read is not None:
                raise self._error(f"reading buffer {read[0].label!r}", error) from None
            if _LOST_MARKER in str(error):
                raise self._error(f"submitting work (last kernel {label!r})", error) from None
            failing = self._refused_kernel(recorders)
            if failing is not None:
                raise GPUError(f"kernel {failing!r} cannot run: {error}") from None
            raise GPUError(f"submitting work (last kernel {label!r}): {error}") from None

    def _refused_kernel(self, recorders) -> str | None:
        """The label of the first dispatch of `recorders` that wgpu-native refuses on its
        own (each encoded alone, never submitted), so that an error names its kernel
        rather than the submission's last."""
        for recorder in recorders:
            for command in recorder.commands:
                if command[0] != Recorder.DISPATCH:
                    continue
                _, pipeline, bind_group, x, y, z = command
                try:
                    encoder = self.raw.create_command_encoder()
                    compute_pass = encoder.begin_compute_pass()
                    compute_pass.set_pipeline(pipeline.handle)
                    compute_pass.set_bind_group(0, bind_group.handle)
                    compute_pass.dispatch_workgroups(x, y, z)
                    compute_pass.end()
                    encoder.finish()
                except wgpu.GPUError:
                    return pipeline.label
        return None

    async def _raw_synchronize(self):
        # A readback waits for all earlier submissions. (wgpu 0.32's
        # on_submitted_work_done_sync fails inside its own cffi binding.)
        if self._sync_buffer is None:
            self._sync_buffer = self.raw.create_buffer(size=4, usage=STORAGE_USAGE, label="synchronize")
        self._queue.read_buffer(self._sync_buffer, 0, 4)


def _count_passes(recorders) -> int:
    """Compute passes the recorders' commands make: runs of dispatches between other commands."""
    passes, in_pass = 0, False
    for recorder in recorders:
        for command in recorder.commands:
            if command[0] == Recorder.DISPATCH:
                passes += not in_pass
                in_pass = True
            else:
                in_pass = False
    return passes
