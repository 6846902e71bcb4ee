"""The GPU prefill GEMMs (wgsl/linear_q4gsw.wgsl's `gemm` and `gemm_wide`, each with K split
over 1 to 8 workgroups per tile and then `gemm_reduce`) at the prefill linears' shapes of
Llama-3.2-1B and SmolLM2-135M, natively on wgpu-native's best adapter: what
ops/linear.py's choice (gemm_plan) rests on.

    .venv/bin/python -m devtools.gemm_probe [ROWS ...]   (default: 128 512)

Each shape runs as 3 layers with their own weights, 4 rounds of them in one submit (each
dispatch waits for the one before, as in a prefill); the best of 5 submits, in µs per
linear (a split GEMM and its reduce together), and the speed-up over `gemm` unsplit. `*`
marks what linear.py runs. Weights are random words: the kernels' speed does not depend
on their values.
"""

from __future__ import annotations

import asyncio
import random
import sys
from array import array

from pywebgpu.gpu import UNIFORM_USAGE, linear_grid, request_device
from pywebgpu.ops.linear import (
    GEMM_TILE,
    GEMM_WIDE_TILE,
    REDUCE_THREADS,
    gemm_plan,
    gemm_tiles,
    linear_source,
    pack_params,
)

from .probe_timing import best_submit_seconds

LAYERS = 3
ROUNDS = 4
GROUP_SIZE = 32
SHAPES = {  # (N, K, x is a gate and an up projection)
    "1B q/k/v": (3072, 2048, False),
    "1B o": (2048, 2048, False),
    "1B gate/up": (16384, 2048, False),
    "1B down": (2048, 8192, True),
    "SmolLM2 q/k/v": (960, 576, False),
    "SmolLM2 o": (576, 576, False),
    "SmolLM2 gate/up": (3072, 576, False),
    "SmolLM2 down": (576, 1536, True),
}
SPLITS = (1, 2, 4, 8)


async def main(row_counts):
    device = await request_device()
    print(device.adapter.description)
    source = linear_source("subgroups" in device.features)
    words = random.Random(0)
    for name, (n, k, silu) in SHAPES.items():
        constants = {"X_SILU_MUL": silu}
        gemm = await device.compute_pipeline(source, "gemm", entry_point="gemm", constants=constants)
        reduce = await device.compute_pipeline(source, "gemm_reduce", entry_point="gemm_reduce", constants=constants)
        wide = await device.compute_pipeline(source, "gemm_wide", entry_point="gemm_wide", constants=constants)
        layers = [
            (
                device.create_buffer_with_data(array("I", (words.getrandbits(32) for _ in range(n * k // 8))), label="weights"),
                device.create_buffer_with_data(array("f", [0.01] * (k // GROUP_SIZE * n)), label="scales"),
            )
            for _ in range(LAYERS)
        ]
        for m in row_counts:
            x = device.create_buffer_with_data(array("f", [0.01] * (m * k * (2 if silu else 1))), label="x")
            out = device.create_buffer(m * n * 4, label="out")
            scratch = device.create_buffer(max(SPLITS) * m * n * 4, label="scratch")
            spares = [device.create_buffer(4, label="spare") for _ in range(2)]
            timings = {}
            for kernel, splits in [(kernel, s) for kernel in ("gemm", "gemm_wide") for s in SPLITS]:
                params = pack_params(m, n, k, k // 8, n, GROUP_SIZE, n, n, False, k_splits=splits)
                params = device.create_buffer_with_data(params, UNIFORM_USAGE, label="params")
                pipeline, tile = (wide, GEMM_WIDE_TILE) if kernel == "gemm_wide" else (gemm, GEMM_TILE)
                recorder = device.record()
                for _ in range(ROUNDS):
                    for weights, scales in layers:
                        bindings = {0: scratch if splits > 1 else out, 1: x, 2: weights, 3: scales, 4: scales}
                        bindings.update({5: params, 6: scales, 7: spares[0], 8: spares[1]})
                        recorder.dispatch(pipeline, device.bind_group(pipeline, bindings), -(-n // tile), -(-m // tile), splits)
                        if splits > 1:
                            bindings = {0: out, 1: scratch, 4: scales, 5: params, 6: scales, 7: spares[0], 8: spares[1]}
                            recorder.dispatch(reduce, device.bind_group(reduce, bindings), *linear_grid(m * n, REDUCE_THREADS))
                seconds = await best_submit_seconds(device, recorder, tries=5)
                timings[(kernel, splits)] = seconds / (ROUNDS * LAYERS) * 1e6
            tiles = gemm_tiles(m, n)
            chosen = gemm_plan(m, n, k)
            base = timings[("gemm", 1)]
            cells = [
                f"{'*' if key == chosen else ' '}{kernel}{'' if splits == 1 else f'/{splits}'} {us:7.1f} µs ({base / us:4.2f}x)"
                for key in timings
                for kernel, splits, us in [(*key, timings[key])]
            ]
            print(f"{name:16} M {m:4} N {n:6} K {k:5} ({tiles:5} tiles): " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    asyncio.run(main([int(rows) for rows in sys.argv[1:]] or [128, 512]))
