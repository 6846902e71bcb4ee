"""The timing the kernel probes share (devtools/*_probe.py)."""

from __future__ import annotations

import math
import time


async def best_submit_seconds(device, recorder, tries: int = 3) -> float:
    """Wall seconds of submitting `recorder` and waiting for the GPU to finish: the best
    of `tries`, after one untimed submit (first-run costs: pipelines, driver caches)."""
    device.submit(recorder)
    await device.synchronize()
    best = math.inf
    for _ in range(tries):
        started = time.perf_counter()
        device.submit(recorder)
        await device.synchronize()
        best = min(best, time.perf_counter() - started)
    return best
