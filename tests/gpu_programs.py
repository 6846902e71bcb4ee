"""Small GPU programs run unchanged natively (imported) and in the page (source sent
over): the same code checks both backends. Stdlib + pywebgpu only."""

import array
import asyncio
import hashlib

from pywebgpu.gpu import UNIFORM_USAGE, GPUError, ShaderError, linear_grid, request_device
from pywebgpu.kernels import load_wgsl
from pywebgpu.ops.binary import BINARY_OPS, broadcast_shape, pack_params
from pywebgpu.ops.dims import element_grid
from pywebgpu.values import numel

_device = None


async def device():
    global _device
    if _device is None:
        _device = await request_device()
    return _device


async def adapter_summary():
    d = await device()
    return {
        "backend": d.adapter.backend,
        "description": d.adapter.description,
        "features": sorted(d.features),
        "limits": d.limits,
    }


async def run_binary(device, op, a, a_shape, b, b_shape, alpha=1.0):
    """`a op b` into a new buffer with the binary kernel alone, outside a graph; returns
    (buffer, shape)."""
    if op not in BINARY_OPS:
        raise ValueError(f"unknown binary op {op!r}; known: {sorted(BINARY_OPS)}")
    out_shape = broadcast_shape(a_shape, b_shape)
    out = device.create_buffer(4 * numel(out_shape), label=f"{op}.out")
    params = device.create_buffer_with_data(pack_params(out_shape, a_shape, b_shape, alpha), UNIFORM_USAGE, f"{op}.params")
    pipeline = await device.compute_pipeline(load_wgsl("binary"), label=f"binary.{op}", constants={"OP": BINARY_OPS[op]})
    group = device.bind_group(pipeline, [out, a, b, params])
    recorder = device.record()
    recorder.dispatch(pipeline, group, *element_grid(numel(out_shape)))
    device.submit(recorder)
    return out, out_shape


async def binary(op, a_bytes, a_shape, b_bytes, b_shape, alpha=1.0):
    """Run `a op b` on the GPU; returns (output float32 bytes, output shape)."""
    d = await device()
    a = d.create_buffer_with_data(a_bytes, label="a")
    b = d.create_buffer_with_data(b_bytes, label="b")
    out, shape = await run_binary(d, op, a, tuple(a_shape), b, tuple(b_shape), alpha)
    return [bytes(await d.read_buffer(out)), list(shape)]


async def big_readback(n_bytes):
    """Fill a buffer on the GPU with a known pattern (word i = i * 2654435761) and read
    all of it back; returns the sha256 of what came back."""
    d = await device()
    wgsl = """
    @group(0) @binding(0) var<storage, read_write> out: array<u32>;
    @compute @workgroup_size(256)
    fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
      let i = gid.x + gid.y * n.x * 256u;
      if (i < arrayLength(&out)) { out[i] = i * 2654435761u; }
    }"""
    buffer = d.create_buffer(n_bytes, label="big")
    pipeline = await d.compute_pipeline(wgsl, label="fill_pattern")
    recorder = d.record()
    recorder.dispatch(pipeline, d.bind_group(pipeline, [buffer]), *linear_grid(n_bytes // 4, 256))
    d.submit(recorder)
    data = await d.read_buffer(buffer)
    d.destroy_buffer(buffer)
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


async def gpu_timer():
    """Time on the GPU one fill of a 16 MiB buffer, then eight fills split by a copy (two
    compute passes); each with the wall time from submit to readback. Without the
    timestamp-query feature: the error device.timer() raises."""
    import time

    d = await device()
    if "timestamp-query" not in d.features:
        try:
            d.timer()
        except GPUError as error:
            return {"error": str(error)}
        return {"error": None}
    wgsl = """
    @group(0) @binding(0) var<storage, read_write> out: array<u32>;
    @compute @workgroup_size(256)
    fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
      let i = gid.x + gid.y * n.x * 256u;
      if (i < arrayLength(&out)) { out[i] = out[i] * 1664525u + i; }
    }"""
    n_bytes = 16 * 1024 * 1024
    buffer = d.create_buffer(n_bytes, label="timed")
    spare = d.create_buffer(4096, label="spare")
    pipeline = await d.compute_pipeline(wgsl, label="timed_fill")
    group = d.bind_group(pipeline, [buffer])
    timer = d.timer()
    results = []
    for fills in (1, 8):
        recorder = d.record()
        for index in range(fills):
            if index == fills // 2 and fills > 1:
                recorder.copy(buffer, spare, 4096)
            recorder.dispatch(pipeline, group, *linear_grid(n_bytes // 4, 256))
        started = time.perf_counter()
        d.submit(recorder, timer=timer)
        await d.read_buffer(spare, 0, 4)
        wall = time.perf_counter() - started
        results.append({"fills": fills, "gpu_s": await timer.read_seconds(), "wall_s": wall})
    return {"error": None, "runs": results}


async def invalid_kernel():
    """Build a kernel with a WGSL error; returns the exception's type name and message."""
    d = await device()
    try:
        await d.compute_pipeline("@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }", label="broken_kernel")
    except ShaderError as error:
        return {"type": type(error).__name__, "message": str(error)}
    return {"type": None, "message": ""}


async def concurrent_pipelines():
    """Four requests for pipelines made at once (as a graph's ops build side by side):
    three for one kernel and constant, one for another constant. Returns how many distinct
    pipelines came back for the three and the other one, and what each wrote."""
    d = await device()
    wgsl = """
    override VALUE: f32 = 0.0;
    @group(0) @binding(0) var<storage, read_write> out: array<f32>;
    @compute @workgroup_size(1)
    fn main() { out[0] = VALUE; }"""
    requests = [d.compute_pipeline(wgsl, "fill_value", constants={"VALUE": value}) for value in (1.5, 1.5, 1.5, 2.5)]
    pipelines = await asyncio.gather(*requests)
    written = []
    for pipeline in pipelines:
        buffer = d.create_buffer(4, label="value")
        recorder = d.record()
        recorder.dispatch(pipeline, d.bind_group(pipeline, [buffer]), 1, 1, 1)
        d.submit(recorder)
        written.append(array.array("f", bytes(await d.read_buffer(buffer)))[0])
    return {
        "same_kernel_pipelines": len({id(p) for p in pipelines[:3]}),
        "other_is_distinct": pipelines[3] is not pipelines[0],
        "written": written,
    }


async def write_out_of_range():
    d = await device()
    buffer = d.create_buffer(16, label="small")
    try:
        d.write_buffer(buffer, array.array("f", [0.0] * 8))
    except GPUError as error:
        return str(error)
    return ""


# Device.write_buffer_ranges' ranges (buffer offset, data offset, size) over a 1 KiB
# source, the last overwriting part of the first: applied in order.
WRITE_RANGES = [(0, 400, 64), (128, 4, 32), (64, 512, 16), (256, 0, 0), (0, 800, 8)]
WRITE_RANGES_SOURCE = bytes(range(256)) * 4


async def write_ranges(from_js: bool):
    """WRITE_RANGES written from WRITE_RANGES_SOURCE (Python bytes, or in the page a JS
    ArrayBuffer) into a zeroed 256-byte buffer; returns [its bytes as hex, the error for a
    range outside the source]."""
    d = await device()
    source = WRITE_RANGES_SOURCE
    if from_js:
        from pyodide.ffi import to_js

        source = to_js(memoryview(WRITE_RANGES_SOURCE)).buffer
    buffer = d.create_buffer_with_data(bytes(256), label="ranges")
    d.write_buffer_ranges(buffer, source, WRITE_RANGES)
    written = bytes(await d.read_buffer(buffer)).hex()
    try:
        d.write_buffer_ranges(buffer, source, [(0, 0, 4), (4, 1020, 8)])
    except GPUError as error:
        return [written, str(error)]
    return [written, ""]


def expected_write_ranges() -> str:
    """What write_ranges should read back, applied on the host."""
    expected = bytearray(256)
    for buffer_offset, data_offset, size in WRITE_RANGES:
        expected[buffer_offset : buffer_offset + size] = WRITE_RANGES_SOURCE[data_offset : data_offset + size]
    return bytes(expected).hex()


async def synchronize_after_work():
    """synchronize() returns once submitted work is done; the result is then readable."""
    d = await device()
    a = d.create_buffer_with_data(array.array("f", [1.0, 2.0]), label="a")
    out, _ = await run_binary(d, "add", a, (2,), a, (2,))
    await d.synchronize()
    return array.array("f", bytes(await d.read_buffer(out))).tolist()


async def resubmit_replaced():
    """One recorded copy submitted again and again, replaced in place each time (as a graph
    patches its schedule), the last time after a small write to its source and with the
    destination read back by the same submission."""
    d = await device()
    src = d.create_buffer_with_data(array.array("f", range(8)), label="src")
    dst = d.create_buffer_with_data(array.array("f", [0.0] * 8), label="dst")
    schedule = d.record()
    schedule.copy(src, dst, 4)
    d.submit(schedule)
    for element in (1, 2, 3, 7):
        if element == 7:
            d.write_buffer(src, array.array("f", [100.0]), buffer_offset=28)
        patch = d.record()
        patch.copy(src, dst, 4, src_offset=4 * element, dst_offset=4 * element)
        schedule.replace(0, patch.commands)
        pending = d.submit(schedule, read=(dst, 0, 32) if element == 7 else None)
    return array.array("f", bytes(await pending)).tolist()


async def batched_submits():
    """Three submits of one recorded copy (a → b, b read back) made as one batch, a write to
    a before each (the later ones copied in-stream), a write after the last; inside the
    batch, changing the submitted recorder and reading back are refused. Returns the
    three reads, a read of a after the batch, and what was refused."""
    d = await device()
    a = d.create_buffer(16, label="a")
    b = d.create_buffer(16, label="b")
    copy = d.record()
    copy.copy(a, b, 16)
    reads, refused = [], []
    with d.batched_submits():
        for run in range(3):
            d.write_buffer(a, array.array("f", [10.0 * run + i for i in range(4)]))
            reads.append(d.submit(copy, read=(b, 0, 16)))
        try:
            copy.copy(a, b, 4)
        except GPUError:
            refused.append("changing a submitted recorder")
        try:
            await d.read_buffer(b)
        except GPUError:
            refused.append("reading back")
        d.write_buffer(a, array.array("f", [-1.0, -2.0, -3.0, -4.0]))
    results = [array.array("f", bytes(await pending)).tolist() for pending in reads]
    results.append(array.array("f", bytes(await d.read_buffer(a))).tolist())
    return {"reads": results, "refused": refused}


async def top_k(logits_bytes, k, penalty=1.0, penalized_ids=(), kernel_set="gpu"):
    """The GPU top-k reducer (its kernels for `kernel_set`: "gpu" or "cpu") over a logits
    row; returns [[value, index], ...]."""
    from pywebgpu.ops.topk import TopK

    d = await device()
    logits = d.create_buffer_with_data(logits_bytes, label="logits")
    n = len(logits_bytes) // 4
    reducer = TopK(d, logits, n, kernel_set)
    await reducer.build()
    picks = d.submit(reducer.prepare(n, k, penalty, penalized_ids), read=reducer.result_bytes(k))
    return [list(pair) for pair in await reducer.picks(picks, k)]


async def top_k_draws(logits_bytes, k, temperature, top_p, points, kernel_set="gpu"):
    """Tokens drawn from the top k of a logits row on the GPU (topk/sample.wgsl's sample_pick),
    one per uniform in `points`; returns [[value, index], ...] (None where nothing was
    drawn)."""
    from pywebgpu.ops.topk import Draw, TopK

    d = await device()
    logits = d.create_buffer_with_data(logits_bytes, label="logits")
    n = len(logits_bytes) // 4
    reducer = TopK(d, logits, n, kernel_set)
    await reducer.build()
    draws = []
    for u in points:
        recorder = reducer.prepare(n, k, draw=Draw(temperature, top_p, u))
        drawn = await reducer.picks(d.submit(recorder, read=reducer.result_bytes(k, drawn=True)), 1)
        draws.append(list(drawn[0]) if drawn else None)
    return draws


async def widen_f16(half_bytes, count):
    """`count` float16 values widened to float32 on the GPU (an f16 program's constants);
    returns the float32 bytes."""
    from pywebgpu.ops.widen import HalfWidener

    d = await device()
    halves = d.create_buffer_with_data(half_bytes + bytes(-len(half_bytes) % 4), label="halves")
    widener = HalfWidener(d)
    await widener.build()
    recorder = d.record()
    out = widener.widen(recorder, halves, count, "widened")
    d.submit(recorder)
    return bytes(await d.read_buffer(out, 0, 4 * count))
