"""Speed benchmark: pywebgpu against its peers wllama (llama.cpp in wasm) and
onnxruntime-web's WebGPU execution provider, the bundled SmolLM2-135M-Instruct on every
side, in the same headless Chromium run; plus pywebgpu natively (wgpu-native). Writes a
JSON report and prints a table (see BENCHMARKS.md).

    .venv/bin/python -m bench [--reps N] [--out bench-results/NAME.json]

pywebgpu runs the 4-bit .pte from web/models/, wllama the Q4_1 GGUF it was exported from,
ort-webgpu a 4-bit ONNX model built from that GGUF (`python -m bench.ort_model`).
All get the same prompt token ids (a prefix of export_tools/data/quality_text.txt,
tokenized with the model's tokenizer). Decoding is greedy and ignores end-of-sequence.
The sides run in rounds (a repetition of everything on each side, then the next round;
bench/web/bench.mjs). Figures are medians over the rounds; ratios are pywebgpu / peer from
the same run: of speeds and times, the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import shlex
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from devtools.browser import launch_chromium
from devtools.bundle import ROOT, WEB, build_web_bundle
from devtools.server import WebServer

from . import model_bench, ort_model
from .options import MANIFEST, PAGE_FOLDER, PROMPT_TEXT, wllama_n_ctx, add_measure_options, measure_config, model_tokenizer
from .report import compare, format_table, greedy_agreement, machine, page_sides, table_rows, usable_cores

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
ORT_MODEL_URL = "/ort-model/"
SIDES = ("pywebgpu-browser", "wllama-cpu", "wllama-webgpu", "ort-webgpu", "pywebgpu-native")
# ort-webgpu only when asked for: on SwiftShader its steps take tens of seconds each.
DEFAULT_SIDES = tuple(side for side in SIDES if side != "ort-webgpu")


class PageWatch:
    """Echoes the page's progress; collects console errors, page errors and any request
    to a non-local address (aborted), which make the run fail."""

    def __init__(self, page):
        self.problems = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.context.route("**/*", self._route)

    def _console(self, message):
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")
        elif message.type in ("log", "warning"):
            print(f"  [page] {message.text}", file=sys.stderr, flush=True)

    def _route(self, route):
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlparse(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.problems.append(f"request to a non-local address: {url}")
            route.abort()


def run_browser(config: dict, gguf: Path, ort_folder: Path, timeout_s: float) -> dict:
    """pywebgpu, wllama and onnxruntime-web in one headless Chromium page (bench/web/bench.html)."""
    from playwright.sync_api import sync_playwright

    build_web_bundle()
    mounts = {"/bench/": PAGE_FOLDER, "/gguf/": gguf.parent, ORT_MODEL_URL: ort_folder}
    with WebServer(WEB, mounts=mounts) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_context().new_page()
        page.set_default_timeout(timeout_s * 1000)
        watch = PageWatch(page)
        page.goto(f"{server.url}/bench/bench.html")
        page.wait_for_selector("body[data-ready='1']")
        result = page.evaluate("config => window.runBench(config)", {**config, "ggufUrl": f"/gguf/{gguf.name}"})
        result["browser"] = {"name": "Chromium (headless)", "version": browser.version}
        browser.close()
    result["page_problems"] = watch.problems
    return result


def greedy_texts(tokenizer, sides: dict[str, dict]) -> dict:
    """Each side's greedy continuation after each decode prompt: a cross-check that both
    run the same model (small numeric differences may still part them late on)."""
    texts = {}
    for name, result in sides.items():
        for context, run in result["decode"].items():
            if "greedy_continuation" in run:
                text = tokenizer.decode(run["greedy_continuation"])
            else:
                text = run["greedy_text"]
            texts.setdefault(context, {})[name] = text
    return texts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_measure_options(parser)
    parser.add_argument("--sides", default=",".join(DEFAULT_SIDES), help=f"what to run, comma-separated, of {','.join(SIDES)} (default: all but ort-webgpu)")
    parser.add_argument("--model", type=Path, default=MANIFEST, help="manifest of the model pywebgpu-native runs (default: the bundled SmolLM2)")
    parser.add_argument("--ort-model", type=Path, default=ort_model.BUILD / "smollm2", help="the ort-webgpu side's ONNX model folder (default: SmolLM2 as `python -m bench.ort_model` builds it)")
    parser.add_argument("--out", type=Path, help="write the JSON report here (e.g. bench-results/NAME.json)")
    parser.add_argument("--timeout", type=float, default=7200, help="browser run time limit, seconds")
    args = parser.parse_args(argv)

    sides_wanted = args.sides.split(",")
    if unknown := set(sides_wanted) - set(SIDES):
        parser.error(f"unknown sides {sorted(unknown)}; choose from {','.join(SIDES)}")
    in_browser = [side for side in sides_wanted if side != "pywebgpu-native"]
    if args.model != MANIFEST and in_browser:
        parser.error("--model is for --sides pywebgpu-native (the browser page serves the bundled model)")
    tokenizer = model_tokenizer(args.model)
    measure, prompt_texts = measure_config(args, args.model)
    prefill_lengths, decode_contexts = measure["prefill_lengths"], measure["decode_contexts"]
    started = time.perf_counter()
    sides, browser, gguf = {}, None, None
    if in_browser:
        from export_tools.bundled import gguf_path

        gguf = Path(gguf_path())
        browser = run_browser(
            {
                "manifestUrl": f"/models/{MANIFEST.name}",
                "pythonSource": Path(model_bench.__file__).read_text(),
                "measure": measure,
                "promptTexts": prompt_texts,
                "pywebgpu": "pywebgpu-browser" in sides_wanted,
                "wllamaModes": [side.removeprefix("wllama-") for side in SIDES if side.startswith("wllama-") and side in sides_wanted],
                "ort": ort_model.page_config(args.ort_model, ORT_MODEL_URL) if "ort-webgpu" in sides_wanted else None,
                "threads": usable_cores(),
                "nCtx": wllama_n_ctx(measure),
            },
            gguf,
            args.ort_model,
            args.timeout,
        )
        sides.update(page_sides(browser))
    if "pywebgpu-native" in sides_wanted:
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # lavapipe warns without it
        sides["pywebgpu-native"] = asyncio.run(
            model_bench.load_and_measure(str(args.model), measure, log=lambda text: print(f"  [native] {text}", file=sys.stderr, flush=True))
        )
    table = compare(sides, table_rows(prefill_lengths, decode_contexts))
    greedy = greedy_texts(tokenizer, sides)
    agreement = greedy_agreement(sides)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - started,
        "machine": machine(),
        "browser": browser and {**browser["browser"], "user_agent": browser["userAgent"], "cross_origin_isolated": browser["crossOriginIsolated"]},
        "browser_adapter": browser and browser["adapter"],
        "model": {
            "pywebgpu": json.loads(args.model.read_text())["pte"],
            "wllama": gguf and {"file": gguf.name, "bytes": gguf.stat().st_size},
            "ort-webgpu": ort_model.model_entry(args.ort_model) if "ort-webgpu" in sides else None,
        },
        "settings": {k: v for k, v in measure.items() if k != "prompt_tokens"} | {"prompt_source": str(PROMPT_TEXT.relative_to(ROOT))},
        "page_problems": browser["page_problems"] if browser else [],
        "table": table,
        "greedy_texts": greedy,
        "greedy_ids_agreement": agreement,
        "results": sides,
    }
    print(format_table(table))
    for mode in browser["wllama"] if browser else ():
        result = sides[f"wllama-{mode}"]
        lengths = sorted({r["tokens"] for r in result["prefill"].values()} | {r["context"] for r in result["decode"].values()})
        print(f"wllama-{mode}: weights on {', '.join(result['weights_on']) or '?'}; prompt lengths it saw: {lengths}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")
    for context, by_side in greedy.items():
        print(f"greedy after {context} tokens:")
        for name, text in by_side.items():
            print(f"  {name:18} {text!r}")
    for context, by_side in agreement.items():
        for name, found in by_side.items():
            same = "the same ids" if found["same_ids"] else f"other ids from position {found['first_difference']}"
            print(f"greedy ids after {context} tokens, {name} against pywebgpu-browser: {same} (of {found['compared']})")
    for problem in report["page_problems"]:
        print(f"page problem: {problem}", file=sys.stderr)
    return 1 if report["page_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
