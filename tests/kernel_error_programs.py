"""Kernels with validation errors, dispatched through pywebgpu.gpu: each case returns the
error's class and message (or that there was none), and whether a correct kernel then
still runs on the same device. Shared by the native and browser tests (the browser test
loads this file's source into the page)."""

from pywebgpu.gpu import UNIFORM_USAGE, GPUError, request_device

# Writes a fixed-size array: its binding needs 64 bytes.
FILL_VEC4 = """
@group(0) @binding(0) var<storage, read_write> out: array<vec4<f32>, 4>;
@compute @workgroup_size(1) fn main() { out[0] = vec4<f32>(1.0); }
"""
# Doubles each of its 4-byte words.
DOUBLE = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3<u32>) { x[id.x] = 2.0 * x[id.x]; }
"""
# Reads a uniform and writes a storage buffer.
SCALE = """
@group(0) @binding(0) var<uniform> factor: vec4<f32>;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(4) fn main(@builtin(global_invocation_id) id: vec3<u32>) { x[id.x] = factor.x * x[id.x]; }
"""
# Valid WGSL whose pipeline no adapter builds: more invocations per workgroup than
# WebGPU allows (maxComputeInvocationsPerWorkgroup is 256 by default, 1024 at most).
TOO_WIDE = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(1024, 1024) fn main(@builtin(global_invocation_id) id: vec3<u32>) { x[id.x] = 1.0; }
"""

CASES = ("binding_too_small", "binding_without_storage_usage", "storage_for_a_uniform", "missing_binding", "bind_group_of_another_kernel", "pipeline_too_wide")


async def _run(device, wgsl, label, buffers, read):
    """Dispatch `label`'s kernel over `buffers` and read `read` (a buffer) back in the
    same submission."""
    pipeline = await device.compute_pipeline(wgsl, label=label)
    group = device.bind_group(pipeline, buffers)
    recorder = device.record()
    recorder.dispatch(pipeline, group, 1)
    return bytes(await device.submit(recorder, read=(read, 0, read.size)))


async def _case(device, name):
    words = device.create_buffer_with_data(b"\x00\x00\x80\x3f" * 16, label="words")  # sixteen 1.0s
    if name == "binding_too_small":
        small = device.create_buffer(16, label="small")
        return await _run(device, FILL_VEC4, "fill_vec4", [small], small)
    if name == "binding_without_storage_usage":
        uniform = device.create_buffer(64, UNIFORM_USAGE, label="factors")
        return await _run(device, DOUBLE, "double", [uniform], words)
    if name == "storage_for_a_uniform":
        return await _run(device, SCALE, "scale", [words, words], words)
    if name == "missing_binding":
        factors = device.create_buffer_with_data(b"\x00\x00\x00\x40" * 4, UNIFORM_USAGE, label="factors")
        return await _run(device, SCALE, "scale", {0: factors}, words)
    if name == "bind_group_of_another_kernel":  # and after it a correct kernel, in one submission
        double = await device.compute_pipeline(DOUBLE, label="double")
        fill = await device.compute_pipeline(FILL_VEC4, label="fill_vec4")
        recorder = device.record()
        recorder.dispatch(double, device.bind_group(fill, [words]), 1)
        recorder.dispatch(fill, device.bind_group(fill, [words]), 1)
        return bytes(await device.submit(recorder, read=(words, 0, words.size)))
    if name == "pipeline_too_wide":
        return await _run(device, TOO_WIDE, "too_wide", [words], words)
    raise ValueError(name)


async def error_case(name):
    """{"type", "message"} of the error `name`'s kernel raised (type None: none), and
    "after": the bytes a correct kernel then reads back on the same device."""
    device = await request_device()
    try:
        result = await _case(device, name)
        outcome = {"type": None, "message": result.hex()}
    except GPUError as error:
        outcome = {"type": type(error).__name__, "message": str(error)}
    words = device.create_buffer_with_data(b"\x00\x00\x80\x3f" * 4, label="after")
    outcome["after"] = await _run(device, DOUBLE, "double", [words], words)
    return outcome
