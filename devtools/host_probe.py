"""The Python half of a decode step's host time, in Pyodide in headless Chromium, with the
GPU out of the way: the one JS call that encodes and submits a step is replaced by a JS
no-op, so what is timed is pywebgpu's Python (inputs, resizes, recording, the submit's
arguments) on this machine's CPU, not SwiftShader running the steps on the same cores.

    .venv/bin/python -m devtools.host_probe [--steps N] [--kernel-set gpu|cpu]

Reports, in ms per step (means: `time.perf_counter` ticks in 5 µs steps in a page):
back to back (warm caches), and after a 1 ms sleep, as a decode step always follows an
await (cold caches), with the share of the big sections then (each wrapped, which adds a
little). The bundled model, by default with the kernels for GPUs (the step a GPU runs:
fewer ops to resize and dispatches to list than the kernels for CPU adapters).
The benchmark (devtools/bench.py) measures the whole call, JS included, on a real GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .browser import PythonPage, launch_chromium
from .bundle import WEB, build_web_bundle
from .server import WebServer

ROOT = Path(__file__).resolve().parent.parent
MODEL_URL = "/models/smollm2-135m-instruct-4w.json"

# Runs in the page (PythonPage.load_module): pywebgpu from the page's wheel.
PAGE_SOURCE = r'''
import asyncio, time
from pyodide.code import run_js
from pywebgpu.llm import LanguageModel
from pywebgpu.ops import registry


async def measure(model_url, steps, kernel_set):
    registry.FORCE_KERNEL_SET = kernel_set
    model = await LanguageModel.load(model_url)
    graph, device = model.graph, model.graph.device
    position = 16
    await model.next_token_candidates(list(range(1, position + 1)), 0, k=1)
    for _ in range(4):
        await model.start_next_step(position)
        position += 1
    # From here no step reaches the GPU: the JS call does nothing, the top-1's readback
    # (never awaited) keeps one staging buffer, and the positions cycle in the cache.
    device._encode_and_submit = run_js("(...args) => null")
    staging = device._take_staging(8, lambda: None)
    device._take_staging = lambda size, create: staging
    device._finish_read = lambda finish: None
    graph._top_k.picks = lambda pending, k: None

    def step(i):
        started = time.perf_counter()
        model.start_next_step(position + i % 256)
        return time.perf_counter() - started

    result = {"back_to_back": sum(step(i) for i in range(steps)) / steps}
    total = 0.0
    for i in range(steps):
        await asyncio.sleep(0.001)
        total += step(i)
    result["after_await"] = total / steps
    sections = {}

    def timed(owner, name, label):
        call = getattr(owner, name)

        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                sections[label] = sections.get(label, 0.0) + time.perf_counter() - started

        setattr(owner, name, wrapper)

    timed(graph, "set_inputs", "set inputs")
    timed(graph, "propagate_resize", "resize")
    timed(graph, "record", "record")
    timed(device, "submit", "device.submit (Python)")
    for i in range(steps):
        await asyncio.sleep(0.001)
        step(i)
    result["sections_after_await"] = {label: seconds / steps for label, seconds in sections.items()}
    return result
'''


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.host_probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="steps timed per measurement (default 400)")
    parser.add_argument("--kernel-set", choices=["cpu", "gpu"], default="gpu", help="the kernels whose step is timed (default gpu)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    build_web_bundle()
    with WebServer(WEB, mounts={"/e2e/": ROOT / "e2e_tests"}) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_context().new_page()
            page.goto(server.url + "/e2e/harness.html")
            python = PythonPage(page)
            python.load_module("_host_probe", PAGE_SOURCE)
            result = python.call("_host_probe", "measure", MODEL_URL, args.steps, args.kernel_set)
        finally:
            browser.close()
    print(f"Python host time of a decode step in Pyodide, JS call stubbed ({args.kernel_set} kernels, {args.steps} steps):")
    print(f"  back to back: {1000 * result['back_to_back']:.3f} ms")
    print(f"  after a 1 ms sleep: {1000 * result['after_await']:.3f} ms, of which (wrapped):")
    for label, seconds in result["sections_after_await"].items():
        print(f"    {label}: {1000 * seconds:.3f} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
