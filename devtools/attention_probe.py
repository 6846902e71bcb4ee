"""Decode attention as one `whole_row` dispatch or as the split pass plus its combine
(wgsl/sdpa.wgsl, wgsl/sdpa_combine.wgsl), by number of keys: where
ops/attention.py's WHOLE_ROW_MAX_KEYS should lie; and a prefill's attention from
position 0 by those kernels and by `tiled` (wgsl/sdpa_tiled.wgsl), by number of rows:
where TILED_MIN_ROWS should lie. Natively on wgpu-native's best adapter:

    .venv/bin/python -m devtools.attention_probe

One decode row of the Llama-3.2-1B geometry (32 query heads over 8 kv heads, head dim
64), of SmolLM2-135M's (9 over 3, head dim 64) and of Llama-3.2-3B's (24 over 8, head dim
128), 16 layers each with its own caches (as a step reads
them: not all of them fit in the GPU's cache at long contexts), 10 steps in one submit
(each dispatch waits for the one before, as in a decode step); the best of 3 submits, in
µs per layer.
"""

from __future__ import annotations

import asyncio
import struct

from pywebgpu.gpu import UNIFORM_USAGE, request_device
from pywebgpu.kernels import QUAD_DIRECTIVES, load_wgsl
from pywebgpu.ops.attention import TILED_PAIRS, split_grid

from .probe_timing import best_submit_seconds

LAYERS = 16
STEPS = 10
KEYS = (64, 128, 256, 512, 1024, 1536, 2048, 4096)
GEOMETRIES = {"Llama-3.2-1B": (32, 8, 64), "SmolLM2-135M": (9, 3, 64), "Llama-3.2-3B": (24, 8, 128)}
PREFILL_ROWS = (4, 8, 16, 32, 64, 128, 511)
PREFILL_CALLS = 2


async def pipelines(device, head_dim: int) -> dict:
    """The attention kernels for `head_dim`: "split" (main), "whole_row", "combine", and
    "tiled" where the device has subgroups."""
    constants = {"HEAD_DIM": head_dim, "UPDATE_CACHE": 1, "ROPE": 0}
    source = load_wgsl("sdpa")
    kernels = {
        "split": await device.compute_pipeline(source, "sdpa", "main", constants),
        "whole_row": await device.compute_pipeline(source, "sdpa.whole_row", "whole_row", constants),
        "combine": await device.compute_pipeline(load_wgsl("sdpa_combine"), "sdpa_combine", constants={"HEAD_DIM": head_dim}),
    }
    if "subgroups" in device.features:
        source = QUAD_DIRECTIVES + load_wgsl("sdpa") + load_wgsl("sdpa_tiled")
        kernels["tiled"] = await device.compute_pipeline(source, "sdpa.tiled", "tiled", constants)
    return kernels


async def main():
    device = await request_device()
    print(device.adapter.description)
    kernels = {head_dim: await pipelines(device, head_dim) for head_dim in {g[2] for g in GEOMETRIES.values()}}
    context = max(KEYS)

    for geometry, (q_heads, kv_heads, head_dim) in GEOMETRIES.items():
        split_pipeline, whole_row_pipeline, combine_pipeline = (kernels[head_dim][k] for k in ("split", "whole_row", "combine"))
        row_bytes = kv_heads * head_dim * 4
        q = device.create_buffer(q_heads * head_dim * 4, label="q")
        new = device.create_buffer(row_bytes, label="k, v")
        out = device.create_buffer(q_heads * head_dim * 4, label="out")
        partials = device.create_buffer(q_heads * 256 * (head_dim + 2) * 4, label="partials")
        table = device.create_buffer(16, label="no rope table")
        caches = [device.create_buffer(context * row_bytes, label=f"cache {i}") for i in range(2 * LAYERS)]
        position = device.create_buffer(16, UNIFORM_USAGE, label="position")
        params = device.create_buffer(32, UNIFORM_USAGE, label="params")
        print(f"{geometry}: µs per layer (whole_row; split + combine)")
        for keys in KEYS:
            device.write_buffer(position, struct.pack("<4I", keys - 1, 0, 0, 0))
            chunk, splits, _ = split_grid(keys, q_heads, context)
            times = []
            for whole_row in (True, False):
                pipeline = whole_row_pipeline if whole_row else split_pipeline
                layer_params = struct.pack("<5If", 1, q_heads, kv_heads, chunk, 1 if whole_row else splits, head_dim**-0.5)
                device.write_buffer(params, layer_params)
                recorder = device.record()
                for _ in range(STEPS):
                    for layer in range(LAYERS):
                        k_cache, v_cache = caches[2 * layer], caches[2 * layer + 1]
                        buffers = [out, partials, q, new, new, k_cache, v_cache, params, position, table, position]
                        recorder.dispatch(pipeline, device.bind_group(pipeline, buffers), q_heads, 1, 1 if whole_row else splits)
                        if not whole_row and splits > 1:
                            combine = device.bind_group(combine_pipeline, [out, partials, params, position])
                            recorder.dispatch(combine_pipeline, combine, q_heads)
                times.append(await best_submit_seconds(device, recorder) / (STEPS * LAYERS) * 1e6)
            print(f"  {keys:5} keys: {times[0]:6.1f}; {times[1]:6.1f} ({splits} splits)")
    if "subgroups" in device.features:
        await prefill(device, kernels)


async def prefill(device, kernels):
    """A prefill's attention at position 0, µs per layer: whole_row, main split by
    split_grid (+ combine), and tiled, over LAYERS layers' caches, PREFILL_CALLS calls."""
    rows_most = max(PREFILL_ROWS)
    for geometry, (q_heads, kv_heads, head_dim) in GEOMETRIES.items():
        combine_pipeline = kernels[head_dim]["combine"]
        row_bytes = kv_heads * head_dim * 4
        q = device.create_buffer(rows_most * q_heads * head_dim * 4, label="q")
        new = device.create_buffer(rows_most * row_bytes, label="k, v")
        out = device.create_buffer(rows_most * q_heads * head_dim * 4, label="out")
        partials = device.create_buffer(rows_most * q_heads * 8 * (head_dim + 2) * 4, label="partials")
        table = device.create_buffer(16, label="no rope table")
        caches = [device.create_buffer(rows_most * row_bytes, label=f"cache {i}") for i in range(2 * LAYERS)]
        position = device.create_buffer_with_data(struct.pack("<4I", 0, 0, 0, 0), UNIFORM_USAGE, label="position")
        params = device.create_buffer(32, UNIFORM_USAGE, label="params")
        print(f"{geometry} prefill: µs per layer (whole_row; split + combine; tiled)")
        for rows in PREFILL_ROWS:
            chunk, splits, _ = split_grid(rows, rows * q_heads, rows_most)
            times = []
            for kernel in ("whole_row", "split", "tiled"):
                pipeline = kernels[head_dim][kernel]
                used_splits = splits if kernel == "split" else 1
                device.write_buffer(params, struct.pack("<5If", rows, q_heads, kv_heads, chunk, used_splits, head_dim**-0.5))
                if kernel == "tiled":
                    grid = (kv_heads, -(-rows // (TILED_PAIRS // (q_heads // kv_heads))), 1)
                else:
                    grid = (q_heads, rows, used_splits)
                recorder = device.record()
                for _ in range(PREFILL_CALLS):
                    for layer in range(LAYERS):
                        k_cache, v_cache = caches[2 * layer], caches[2 * layer + 1]
                        buffers = {0: out, 1: partials, 2: q, 3: new, 4: new, 5: k_cache, 6: v_cache, 7: params, 8: position, 9: table, 10: position}
                        if kernel == "tiled":
                            del buffers[1]
                        recorder.dispatch(pipeline, device.bind_group(pipeline, buffers), *grid)
                        if used_splits > 1:
                            combine = device.bind_group(combine_pipeline, [out, partials, params, position])
                            recorder.dispatch(combine_pipeline, combine, q_heads, rows)
                times.append(await best_submit_seconds(device, recorder) / (PREFILL_CALLS * LAYERS) * 1e6)
            print(f"  {rows:5} rows: {times[0]:8.1f}; {times[1]:8.1f} ({splits} splits); {times[2]:8.1f}")


if __name__ == "__main__":
    asyncio.run(main())
