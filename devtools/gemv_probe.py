"""The GPU decode GEMVs (wgsl/linear_q4gsw.wgsl's `gemv_coop` and `gemv_coop4`) at the
decode linears' shapes of Llama-3.2-1B and SmolLM2-135M, with the x transforms the runtime
fuses into them (RMSNorm, silu(gate) * up, the residual), natively on wgpu-native's best
adapter: what ops/linear.py's choice of kernel (COOP4_MIN_N) rests on.

    .venv/bin/python -m devtools.gemv_probe

Each shape runs as 16 layers with their own weights (as a step streams them, not from the
GPU's cache), 10 steps in one submit (each dispatch waits for the one before, as in a
decode step); the best of 5 submits, in µs per dispatch, and the weights' and scales'
bytes over that time. Weights are zeros: the kernels' speed does not depend on them.
"""

from __future__ import annotations

import asyncio
from array import array

from pywebgpu.gpu import UNIFORM_USAGE, linear_grid, request_device
from pywebgpu.ops.linear import COOP4_OUTPUTS_PER_WORKGROUP, COOP_ROWS, linear_source, pack_params

from .probe_timing import best_submit_seconds

LAYERS = 16
STEPS = 10
GROUP_SIZE = 32
NORM = {"X_RMS_NORM": True, "RMS_EPS": 1e-5}
SILU = {"X_SILU_MUL": True}
SHAPES = {  # (N, K, constants, adds a residual)
    "1B q/k/v": (3072, 2048, NORM, False),
    "1B o": (2048, 2048, {}, True),
    "1B gate/up": (16384, 2048, NORM, False),
    "1B down": (2048, 8192, SILU, True),
    "SmolLM2 q/k/v": (960, 576, NORM, False),
    "SmolLM2 gate/up": (3072, 576, NORM, False),
    "SmolLM2 down": (576, 1536, SILU, True),
}
KERNELS = {"gemv_coop": COOP_ROWS, "gemv_coop4": COOP4_OUTPUTS_PER_WORKGROUP}  # outputs per workgroup


async def main():
    device = await request_device()
    print(device.adapter.description)
    source = linear_source("subgroups" in device.features)

    for name, (n, k, constants, residual) in SHAPES.items():
        x_values = 2 * k if constants.get("X_SILU_MUL") else k
        x = device.create_buffer_with_data(array("f", [0.01] * x_values), label="x")
        side = device.create_buffer_with_data(array("f", [1.0] * max(n, k)), label="norm weight or residual")
        out = device.create_buffer(n * 4, label="out")
        spares = [device.create_buffer(4, label="spare") for _ in range(2)]
        params = pack_params(1, n, k, k // 8, n, GROUP_SIZE, n, n, residual)
        params = device.create_buffer_with_data(params, UNIFORM_USAGE, label="params")
        layers = [(device.create_buffer(n * k // 2), device.create_buffer(n * k // GROUP_SIZE * 4)) for _ in range(LAYERS)]
        weight_bytes = n * k // 2 + n * k // GROUP_SIZE * 4
        timings = []
        for kernel, per_workgroup in KERNELS.items():
            pipeline = await device.compute_pipeline(source, kernel, entry_point=kernel, constants=constants)
            groups = [
                device.bind_group(pipeline, {0: out, 1: x, 2: w, 3: s, 4: s, 5: params, 6: side, 7: spares[0], 8: spares[1]})
                for w, s in layers
            ]
            recorder = device.record()
            for _ in range(STEPS):
                for group in groups:
                    recorder.dispatch(pipeline, group, *linear_grid(-(-n // per_workgroup), 1), 1)
            us = await best_submit_seconds(device, recorder, tries=5) / (STEPS * LAYERS) * 1e6
            timings.append(f"{kernel} {us:5.1f} µs ({weight_bytes / us / 1e3:5.0f} GB/s)")
        print(f"{name:16} N {n:6} K {k:5}: " + "   ".join(timings), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
