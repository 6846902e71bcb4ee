"""Speed benchmark: pywebgpu against its peer wllama (llama.cpp in wasm), the bundled
SmolLM2-135M-Instruct on both sides, in the same headless Chromium run; plus pywebgpu
natively (wgpu-native). Writes a JSON report and prints a table (see BENCHMARKS.md).

    .venv/bin/python -m devtools.bench [--reps N] [--out bench-results/NAME.json]

pywebgpu runs the 4-bit .pte from web/models/, wllama the Q4_1 GGUF it was exported from.
Both get the same prompt token ids (a prefix of export_tools/data/quality_text.txt,
tokenized with the model's tokenizer). Decoding is greedy and ignores end-of-sequence.
The sides run in rounds (a repetition of everything on each side, then the next round;
web/bench.mjs). Figures are medians over the rounds; ratios are pywebgpu / peer from the
same run: of speeds and times, the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path
from statistics import median
from urllib.parse import urlparse

from . import model_bench
from .browser import launch_chromium
from .bundle import ROOT, WEB, build_web_bundle
from .server import WebServer

MODEL_NAME = "smollm2-135m-instruct-4w"
MANIFEST = WEB / "models" / f"{MODEL_NAME}.json"
PROMPT_TEXT = ROOT / "export_tools" / "data" / "quality_text.txt"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
SIDES = ("pywebgpu-browser", "wllama-cpu", "wllama-webgpu", "pywebgpu-native")
# wllama's context: room for the longest prompt plus its decoded tokens.
WLLAMA_N_CTX = 2048


def model_tokenizer(manifest_path: Path):
    from pywebgpu.llm.tokenizer import Tokenizer

    manifest = json.loads(manifest_path.read_text())
    return Tokenizer.from_json((manifest_path.parent / manifest["tokenizer"]["file"]).read_text())


def prompts(tokenizer, lengths: list[int]) -> tuple[list[int], dict[int, str]]:
    """The benchmark text's first max(lengths) token ids (pywebgpu's prompts are their
    prefixes), and for each length the text of that prefix (wllama's prompt), checked to
    tokenize back to exactly those tokens."""
    tokens = tokenizer.encode(PROMPT_TEXT.read_text(), add_special_tokens=False)
    if len(tokens) < max(lengths):
        raise SystemExit(f"{PROMPT_TEXT} has {len(tokens)} tokens; the benchmark needs {max(lengths)}")
    texts = {}
    for length in lengths:
        texts[length] = tokenizer.decode(tokens[:length])
        if tokenizer.encode(texts[length], add_special_tokens=False) != tokens[:length]:
            raise SystemExit(f"the text of the first {length} tokens does not tokenize back to them")
    return tokens[: max(lengths)], texts


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


def run_browser(config: dict, gguf: Path, timeout_s: float) -> dict:
    """pywebgpu and wllama in one headless Chromium page (web/bench.html)."""
    from playwright.sync_api import sync_playwright

    build_web_bundle()
    with WebServer(WEB, mounts={"/gguf/": gguf.parent}) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_context().new_page()
        page.set_default_timeout(timeout_s * 1000)
        watch = PageWatch(page)
        page.goto(f"{server.url}/bench.html")
        page.wait_for_selector("body[data-ready='1']")
        result = page.evaluate("config => window.runBench(config)", {**config, "ggufUrl": f"/gguf/{gguf.name}"})
        result["browser"] = {"name": "Chromium (headless)", "version": browser.version}
        browser.close()
    result["page_problems"] = watch.problems
    return result


def page_sides(page: dict) -> dict[str, dict]:
    """The sides web/bench.html ran, by name, from its result; each wllama side notes the
    devices its weights went to."""
    sides = {"pywebgpu-browser": page["pywebgpu"]} if "pywebgpu" in page else {}
    for mode, result in page["wllama"].items():
        result["weights_on"] = wllama_weights_on(result)
        sides[f"wllama-{mode}"] = result
    return sides


def wllama_weights_on(report: dict) -> list[str]:
    """The devices llama.cpp put the model's weights on, from its own load log
    ("load_tensors: CPU model buffer size = ..."): shows the WebGPU backend's silent
    fallback to the CPU (it needs shader-f16)."""
    return sorted({found.group(1) for line in report["log"] if (found := re.search(r"load_tensors:\s+(\S+) model buffer size", line))})


# --- the report --------------------------------------------------------------------

def table_rows(prefill_lengths: list[int], decode_contexts: list[int]) -> list[tuple]:
    """(label, path into a side's result, scale, higher is better, path to the figure's
    value in each round or None) per metric."""
    shortest = str(min(prefill_lengths))
    rows = [
        (f"prefill {n} tok (tok/s)", ("prefill", str(n), "tokens_per_s"), 1, True, ("prefill", str(n), "runs_tokens_per_s"))
        for n in prefill_lengths
    ]
    rows.append((f"time to first token, {shortest}-tok prompt (s)", ("prefill", shortest, "time_to_first_token_s"), 1, False, ("prefill", shortest, "runs_s")))
    rows += [(f"decode @{n} (tok/s)", ("decode", str(n), "tokens_per_s"), 1, True, ("decode", str(n), "runs_tokens_per_s")) for n in decode_contexts]
    rows += [(f"host time per decode token @{n} (ms)", ("decode", str(n), "host_ms_per_token"), 1, False, None) for n in decode_contexts]
    rows += [(f"of which in device.submit @{n} (ms)", ("decode", str(n), "submit_ms_per_token"), 1, False, None) for n in decode_contexts]
    rows += [(f"of which in its JS call @{n} (ms)", ("decode", str(n), "js_call_ms_per_token"), 1, False, None) for n in decode_contexts]
    rows += [(f"of which the JS function's own run @{n} (ms)", ("decode", str(n), "js_body_ms_per_token"), 1, False, None) for n in decode_contexts]
    rows += [(f"GPU time per decode token @{n} (ms)", ("decode", str(n), "gpu_ms_per_token"), 1, False, None) for n in decode_contexts]
    rows += [(f"dispatches per decode token @{n}", ("decode", str(n), "dispatches_per_token"), 1, False, None) for n in decode_contexts]
    rows += [
        ("GPU memory (MiB)", ("gpu_memory_bytes",), 2**-20, False, None),
        ("model load (s)", ("load_s",), 1, False, None),
        ("upgrades built after the load (s; measured from then on)", ("upgrades_s",), 1, False, None),
        ("Python reference loop (ms; model_bench.python_loop_ms)", ("python_loop_ms",), 1, False, None),
    ]
    return rows


def _dig(result: dict, path: tuple):
    for key in path:
        if not isinstance(result, dict) or key not in result:
            return None
        result = result[key]
    return result


def ratio(ours: dict, theirs: dict, path: tuple, runs_path: tuple | None):
    """ours / theirs of a metric: the median of the rounds' ratios where both sides have
    the same number of rounds of it, else the ratio of the figures; None where either
    lacks it."""
    our_runs, their_runs = (_dig(ours, runs_path), _dig(theirs, runs_path)) if runs_path else (None, None)
    if our_runs and their_runs and len(our_runs) == len(their_runs) and all(their_runs):
        return median(a / b for a, b in zip(our_runs, their_runs))
    a, b = _dig(ours, path), _dig(theirs, path)
    return a / b if a is not None and b else None


def compare(sides: dict[str, dict], rows: list[tuple], peers=("wllama-cpu", "wllama-webgpu")) -> list[dict]:
    """One row per metric: each side's figure, and pywebgpu-in-the-browser / each peer."""
    table = []
    for label, path, scale, higher_is_better, runs_path in rows:
        row = {"metric": label, "higher_is_better": higher_is_better}
        for name, result in sides.items():
            value = _dig(result, path)
            row[name] = None if value is None else value * scale
        ours = sides.get("pywebgpu-browser")
        for peer in peers:
            both = ours is not None and peer in sides
            row[f"pywebgpu-browser / {peer}"] = ratio(ours, sides[peer], path, runs_path) if both else None
        table.append(row)
    return table


def format_table(table: list[dict]) -> str:
    columns = [c for c in table[0] if c not in ("metric", "higher_is_better")]

    def cell(value):
        if value is None:
            return "–"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"

    lines = ["| metric | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for row in table:
        lines.append(f"| {row['metric']} | " + " | ".join(cell(row[c]) for c in columns) + " |")
    return "\n".join(lines)


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


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cores": usable_cores(), "python": platform.python_version()}


def usable_cores() -> int:
    """The cores this run may use: all of the machine's, or those `taskset` left it (the
    browser inherits them; wllama gets as many threads)."""
    return len(os.sched_getaffinity(0))


def add_measure_options(parser: argparse.ArgumentParser):
    """The options of what model_bench.measure does (shared with devtools.bench_unattended)."""
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (default 3); medians are reported")
    parser.add_argument("--decode-tokens", type=int, default=32, help="greedy tokens decoded per measurement (default 32)")
    parser.add_argument("--prefill", default="128,512", help="prompt lengths timed for prefill (default 128,512)")
    parser.add_argument("--contexts", default="128,1024", help="prompt lengths decoded after (default 128,1024)")
    parser.add_argument("--kernel-set", choices=["cpu", "gpu"], help="force pywebgpu's kernels for CPU adapters or for GPUs (default: by adapter)")
    parser.add_argument("--run-ahead", type=int, help="decode steps pywebgpu submits ahead of the host (default: as ChatSession, RUN_AHEAD_STEPS)")
    parser.add_argument("--decode-block", type=int, help="decode steps pywebgpu submits as one (default: as ChatSession, the model's decode_block_steps once tokens come faster than chat.BLOCK_MAX_TOKEN_S each, else 1)")
    parser.add_argument("--host-sections", action="store_true", help="also time the big sections of the calls that submit decode steps (each wrapped, which adds a little to the host time)")
    parser.add_argument("--temperature", type=float, default=0.0, help="pywebgpu decodes sampling at this temperature as the chat demo does (top-k 40, top-p 0.95; default 0: greedy)")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="pywebgpu decodes with this repetition penalty (default 1: none)")
    parser.add_argument(
        "--prompt-shapes", choices=["new", "kept"], default="new",
        help="new: each timed prompt has a shape pywebgpu's graph kept no state for, as a chat's prompts of new lengths (default); "
        "kept: the graph keeps it from round to round, as for prompts of one length",
    )  # fmt: skip


def measure_config(args, manifest: Path) -> tuple[dict, dict[int, str]]:
    """model_bench.measure's settings from `add_measure_options`' options, and the text
    of each prompt (for wllama)."""
    prefill_lengths = [int(n) for n in args.prefill.split(",")]
    decode_contexts = [int(n) for n in args.contexts.split(",")]
    tokens, prompt_texts = prompts(model_tokenizer(manifest), prefill_lengths + decode_contexts)
    measure = {
        "prompt_tokens": tokens,
        "prefill_lengths": prefill_lengths,
        "decode_contexts": decode_contexts,
        "decode_tokens": args.decode_tokens,
        "reps": args.reps,
        "kernel_set": args.kernel_set,
        "run_ahead": args.run_ahead,
        "decode_block": args.decode_block,
        "host_sections": args.host_sections,
        "temperature": args.temperature,
        "repetition_penalty": args.repetition_penalty,
        "prompt_shapes": args.prompt_shapes,
    }
    return measure, prompt_texts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_measure_options(parser)
    parser.add_argument("--sides", default=",".join(SIDES), help=f"what to run, comma-separated (default: all of {','.join(SIDES)})")
    parser.add_argument("--model", type=Path, default=MANIFEST, help="manifest of the model pywebgpu-native runs (default: the bundled SmolLM2)")
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
                "manifestUrl": f"models/{MANIFEST.name}",
                "pythonSource": Path(model_bench.__file__).read_text(),
                "measure": measure,
                "promptTexts": prompt_texts,
                "pywebgpu": "pywebgpu-browser" in sides_wanted,
                "wllamaModes": [side.removeprefix("wllama-") for side in SIDES if side.startswith("wllama-") and side in sides_wanted],
                "threads": usable_cores(),
                "nCtx": WLLAMA_N_CTX,
            },
            gguf,
            args.timeout,
        )
        sides.update(page_sides(browser))
    if "pywebgpu-native" in sides_wanted:
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # lavapipe warns without it
        sides["pywebgpu-native"] = asyncio.run(
            model_bench.load_and_measure(str(args.model), measure, log=lambda text: print(f"  [native] {text}", file=sys.stderr, flush=True))
        )
    table = compare(sides, table_rows(prefill_lengths, decode_contexts), peers=[side for side in SIDES if side.startswith("wllama-") and side in sides])
    greedy = greedy_texts(tokenizer, sides)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "devtools.bench", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - started,
        "machine": machine(),
        "browser": browser and {**browser["browser"], "user_agent": browser["userAgent"], "cross_origin_isolated": browser["crossOriginIsolated"]},
        "browser_adapter": browser and browser["adapter"],
        "model": {
            "pywebgpu": json.loads(args.model.read_text())["pte"],
            "wllama": gguf and {"file": gguf.name, "bytes": gguf.stat().st_size},
        },
        "settings": {k: v for k, v in measure.items() if k != "prompt_tokens"} | {"prompt_source": str(PROMPT_TEXT.relative_to(ROOT))},
        "page_problems": browser["page_problems"] if browser else [],
        "table": table,
        "greedy_texts": greedy,
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
    for problem in report["page_problems"]:
        print(f"page problem: {problem}", file=sys.stderr)
    return 1 if report["page_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
