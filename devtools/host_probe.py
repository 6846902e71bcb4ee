"""The Python half of a call's host time, in Pyodide in headless Chromium, with the GPU out
of the way: the one JS call that encodes and submits a call is replaced by a JS no-op, so
what is timed is pywebgpu's Python (inputs, resizes, recording, the submit's arguments) on
this machine's CPU, not SwiftShader running the calls on the same cores.

    .venv/bin/python -m devtools.host_probe [--steps N] [--block N] [--kernel-set gpu|cpu]
    .venv/bin/python -m devtools.host_probe --shape-changes [--rounds N] [--prompt TOKENS]

Decode steps (the default) are reported in ms per step (means: `time.perf_counter` ticks
in 5 µs steps in a page): back to back (warm caches), and after a 1 ms sleep, as a decode
step always follows an await (cold caches), with the share of the big sections then (each
wrapped, which adds a little). With --block N, the steps are submitted N at a time as one
(LanguageModel.start_next_steps, as ChatSession does on GPUs), and a block's time is
shared out over its steps.

With --shape-changes, the calls of a chat whose input shape changes, in rounds: a prompt
of --prompt tokens after a decode step, a decode step after it, a decode step after that
one, a prompt of a length whose shape no state keeps (a length new to the round), and a
decode step after it. Each call follows a 1 ms sleep; the report gives each kind's median
over the rounds with its sections' medians, with the graph keeping the states of recent
input shapes (runtime/graph.py's KEPT_SHAPES) and keeping none (resizing at every change
of shape): the two take turns, a round each.

The bundled model, by default with the kernels for GPUs (the step a GPU runs: fewer ops to
resize and dispatches to list than the kernels for CPU adapters). The benchmark
(devtools/bench.py) measures the whole call, JS included, on a real GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import model_bench
from .browser import PythonPage, launch_chromium
from .bundle import WEB, build_web_bundle
from .server import WebServer

ROOT = Path(__file__).resolve().parent.parent
MODEL_URL = "/models/smollm2-135m-instruct-4w.json"

# Runs in the page (PythonPage.load_module): pywebgpu from the page's wheel.
PAGE_SOURCE = r'''
import asyncio, time
from pyodide.code import run_js
from _model_bench import HostSections, python_loop_ms
from pywebgpu.llm import LanguageModel
from pywebgpu.ops import registry
from pywebgpu.runtime import graph as graph_module


def stub_gpu(model):
    """From here no call reaches the GPU: the JS call does nothing, the top-1's readback
    (never awaited) keeps one staging buffer."""
    graph, device = model.graph, model.graph.device
    device._encode_and_submit = run_js("(...args) => null")
    staging = device._take_staging(8, lambda: None)
    device._take_staging = lambda size, create: staging
    device._finish_read = lambda finish: None
    graph._top_k.picks = lambda pending, k: None


async def measure(model_url, steps, kernel_set, block):
    registry.FORCE_KERNEL_SET = kernel_set
    model = await LanguageModel.load(model_url)
    position = 16
    await model.next_token_candidates(list(range(1, position + 1)), 0, k=1)
    for _ in range(4):
        await model.start_next_step(position)
        position += 1
    stub_gpu(model)  # the positions cycle in the cache

    def step(i):
        started = time.perf_counter()
        model.start_next_steps(position + (i * block) % 256, 1, [None] * block)
        return (time.perf_counter() - started) / block

    result = {"python_loop_ms": python_loop_ms(), "back_to_back": sum(step(i) for i in range(steps)) / steps}
    total = 0.0
    for i in range(steps):
        await asyncio.sleep(0.001)
        total += step(i)
    result["after_await"] = total / steps
    sections = HostSections(model)
    for i in range(steps):
        await asyncio.sleep(0.001)
        step(i)
    result["sections_after_await"] = {label: seconds / (steps * block) for label, seconds in sections.take().items()}
    return result


async def measure_shape_changes(model_url, rounds, kernel_set, prompt_tokens):
    registry.FORCE_KERNEL_SET = kernel_set
    model = await LanguageModel.load(model_url)
    await model.next_token_candidates(list(range(1, prompt_tokens + 1)), 0, k=1)
    await model.start_next_step(prompt_tokens)
    stub_gpu(model)
    sections = HostSections(model)

    def median(values):
        return sorted(values)[len(values) // 2]

    async def timed_call(kind, call, times):
        await asyncio.sleep(0.001)
        sections.take()
        started = time.perf_counter()
        call()
        times.setdefault(kind, []).append({"total": time.perf_counter() - started, **sections.take()})

    prompt = list(range(1, prompt_tokens + 1))
    settings = {graph_module.KEPT_SHAPES: {}, 0: {}}  # kept shapes → kind → timings
    for r in range(rounds):
        new_length = prompt[: prompt_tokens - 1 - r]  # a length no earlier round had
        # The settings take turns, in either order, each from no kept state: its prompt
        # and a decode step first, untimed (with shapes kept, their states are kept).
        for kept_shapes in sorted(settings, reverse=r % 2 == 0):
            graph_module.KEPT_SHAPES = kept_shapes
            model.graph._shape_states.clear()
            model.start_next_token_candidates(prompt, 0, k=1)
            model.start_next_step(prompt_tokens)
            times = settings[kept_shapes]
            await timed_call("prompt after a decode step", lambda: model.start_next_token_candidates(prompt, 0, k=1), times)
            await timed_call("decode step after a prompt", lambda: model.start_next_step(prompt_tokens), times)
            await timed_call("decode step after a decode step", lambda: model.start_next_step(prompt_tokens + 1), times)
            await timed_call("prompt of a new length after a decode step", lambda: model.start_next_token_candidates(new_length, 0, k=1), times)
            await timed_call("decode step after that prompt", lambda: model.start_next_step(len(new_length)), times)
    return {
        f"kept shapes {kept_shapes}": {
            kind: {label: median([t.get(label, 0.0) for t in entries]) for label in entries[0]} for kind, entries in times.items()
        }
        for kept_shapes, times in settings.items()
    }
'''


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.host_probe", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="decode steps timed per measurement (default 400)")
    parser.add_argument("--block", type=int, default=1, help="decode steps submitted as one (default 1)")
    parser.add_argument("--kernel-set", choices=["cpu", "gpu"], default="gpu", help="the kernels whose calls are timed (default gpu)")
    parser.add_argument("--shape-changes", action="store_true", help="time the calls of a chat whose input shape changes")
    parser.add_argument("--rounds", type=int, default=15, help="with --shape-changes: rounds of calls (default 15)")
    parser.add_argument("--prompt", type=int, default=128, help="with --shape-changes: the prompt's tokens (default 128)")
    args = parser.parse_args(argv)
    if args.shape_changes and not args.rounds < args.prompt <= 511:
        parser.error("--prompt must be more than --rounds and at most the bundled model's 511 tokens of a call")
    from playwright.sync_api import sync_playwright

    build_web_bundle()
    with WebServer(WEB, mounts={"/e2e/": ROOT / "e2e_tests"}) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_context().new_page()
            page.goto(server.url + "/e2e/harness.html")
            python = PythonPage(page)
            python.load_module("_model_bench", Path(model_bench.__file__).read_text())
            python.load_module("_host_probe", PAGE_SOURCE)
            if args.shape_changes:
                result = python.call("_host_probe", "measure_shape_changes", MODEL_URL, args.rounds, args.kernel_set, args.prompt)
            else:
                result = python.call("_host_probe", "measure", MODEL_URL, args.steps, args.kernel_set, args.block)
        finally:
            browser.close()
    if args.shape_changes:
        print(f"Python host time of calls whose input shape changes, in Pyodide, JS call stubbed ({args.kernel_set} kernels,")
        print(f"prompts of {args.prompt} tokens, medians of {args.rounds} rounds), ms:")
        for setting, kinds in result.items():
            print(f"  {setting}:")
            for kind, medians in kinds.items():
                parts = ", ".join(f"{label} {1000 * seconds:.2f}" for label, seconds in medians.items() if label != "total")
                print(f"    {kind}: {1000 * medians['total']:.2f} ({parts})")
    else:
        print(f"Python host time of a decode step in Pyodide, JS call stubbed ({args.kernel_set} kernels, {args.steps} steps, blocks of {args.block}):")
        print(f"  (the Python reference loop, model_bench.python_loop_ms: {result['python_loop_ms']:.2f} ms)")
        print(f"  back to back: {1000 * result['back_to_back']:.3f} ms")
        print(f"  after a 1 ms sleep: {1000 * result['after_await']:.3f} ms, of which (wrapped):")
        for label, seconds in result["sections_after_await"].items():
            print(f"    {label}: {1000 * seconds:.3f} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
