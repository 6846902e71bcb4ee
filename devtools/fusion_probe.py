"""What one dispatch instead of several would save, before writing the fused op: times
the Llama-3.2-1B decode linears that read one x — q/k/v (2,048 + 512 + 512 outputs) and
gate/up (8,192 + 8,192) — as separate `gemv_coop` dispatches and as one dispatch of
their summed outputs (the same bytes read), natively on wgpu-native's best adapter.

    .venv/bin/python -m devtools.fusion_probe

Each pattern is dispatched 100 times in one submit (each dispatch waits for the one
before, as in a decode step); the best of 3 submits, in µs per pattern. Weights are
zeros: the kernel's speed does not depend on their values.
"""

from __future__ import annotations

import asyncio
from array import array

from pywebgpu.gpu import UNIFORM_USAGE, request_device
from pywebgpu.ops.linear import linear_source, pack_params

from .probe_timing import best_submit_seconds

K = 2048  # the 1B geometry's model dim
GROUP_SIZE = 32
COOP_ROWS = 8  # outputs per gemv_coop workgroup (ops/linear.py)
REPS = 100


async def main():
    device = await request_device()
    print(device.adapter.description)
    pipeline = await device.compute_pipeline(
        linear_source("subgroups" in device.features), "gemv_coop", entry_point="gemv_coop", constants={"HAS_BIAS": False}
    )
    x = device.create_buffer_with_data(array("f", [1.0] * K), label="x")

    def linear(n):
        weights = device.create_buffer(n * K // 2, label="weights")
        scales = device.create_buffer(n * K // GROUP_SIZE * 4, label="scales")
        out = device.create_buffer(n * 4, label="out")
        params = pack_params(1, n, K, K // 8, n, GROUP_SIZE, n, n, residual=False)  # all n outputs to `out`
        params = device.create_buffer_with_data(params, UNIFORM_USAGE, label="params")
        spares = [device.create_buffer(4, label="spare output") for _ in range(2)]
        return device.bind_group(pipeline, [out, x, weights, scales, scales, params, scales, *spares]), -(-n // COOP_ROWS)

    async def microseconds(dispatches):
        recorder = device.record()
        for _ in range(REPS):
            for group, workgroups in dispatches:
                recorder.dispatch(pipeline, group, workgroups)
        return await best_submit_seconds(device, recorder) / REPS * 1e6

    q, k, v, qkv = linear(2048), linear(512), linear(512), linear(3072)
    gate, up, gate_up = linear(8192), linear(8192), linear(16384)
    print(f"q, k, v: 3 dispatches {await microseconds([q, k, v]):.1f} µs, one of 3,072 outputs {await microseconds([qkv]):.1f} µs")
    print(f"gate, up: 2 dispatches {await microseconds([gate, up]):.1f} µs, one of 16,384 outputs {await microseconds([gate_up]):.1f} µs")


if __name__ == "__main__":
    asyncio.run(main())
