"""The speed benchmark (`python -m bench`) in the browser where no Playwright drives it:
a GPU machine with only a bare Chromium build (see BENCHMARKS.md). Serves web/ (and the
benchmark's page under /bench/) on 127.0.0.1, starts Chromium on bench.html?unattended,
which fetches its config from this server and POSTs back the result; writes the same JSON
report as `python -m bench`, with the peak resident memory of Chromium's processes.

    python -m bench.unattended --chromium PATH --model MANIFEST --out REPORT.json \\
        [--gguf GGUF --sides pywebgpu-browser,wllama-cpu,wllama-webgpu] \\
        [--ort-model DIR --sides pywebgpu-browser,ort-webgpu] \\
        [--chromium-flag=--use-angle=vulkan ...] [--reps N] [--decode-tokens N] ...

The peers run in the same page, in rounds with pywebgpu: wllama the GGUF given (e.g. one
of the same geometry written by bench.random_gguf), onnxruntime-web the ONNX model folder
given (a pack of bench.ort_model --weightless, its data file unpacked). Needs the web
bundle (web/vendor/pyodide, web/vendor/wheels, and web/vendor/wllama or
web/vendor/onnxruntime-web for the peers) built beforehand; the standard library and
pywebgpu only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from devtools.bundle import ROOT, WEB
from devtools.server import WebServer

from . import model_bench, ort_model
from .options import PAGE_FOLDER, PROMPT_TEXT, wllama_n_ctx, add_measure_options, measure_config
from .report import compare, format_table, greedy_agreement, machine, page_sides, table_rows, usable_cores

ORT_MODEL_URL = "/bench-ort-model/"
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# Beyond the flags the caller gives (those that pick the GPU): no network, no first-run UI.
BASE_FLAGS = ["--headless", "--disable-background-networking", "--disable-component-update", "--no-first-run"]


def _tree_rss(root: int) -> int:
    """Resident bytes of process `root` and all its descendants (Linux /proc)."""
    parents, rss = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    tree, grown = {root}, True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grown = True
    return sum(rss.get(pid, 0) for pid in tree)


class PeakMemory(threading.Thread):
    """Samples the resident bytes of a process tree (the browser's) until stopped: `peak`
    and the seconds since the start at which it was reached."""

    def __init__(self, pid: int, period_s: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.period_s, self.peak, self.peak_at_s = pid, period_s, 0, 0.0
        self._stop_event = threading.Event()

    def run(self):
        started = time.perf_counter()
        while not self._stop_event.wait(self.period_s):
            rss = _tree_rss(self.pid)
            if rss > self.peak:
                self.peak, self.peak_at_s = rss, time.perf_counter() - started

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        return {"peak_rss_bytes": self.peak, "peak_at_s": round(self.peak_at_s, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.unattended", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chromium", required=True, help="the Chromium (or chromium-headless-shell) binary")
    parser.add_argument("--chromium-flag", action="append", default=[], help="a flag for Chromium (repeat)")
    parser.add_argument("--model", type=Path, required=True, help="the manifest of the model to run")
    parser.add_argument("--gguf", type=Path, help="the GGUF the peer (wllama) runs")
    parser.add_argument("--ort-model", type=Path, help="the ONNX model folder the peer onnxruntime-web runs")
    parser.add_argument("--sides", default="pywebgpu-browser", help="comma-separated, of pywebgpu-browser,wllama-cpu,wllama-webgpu,ort-webgpu (default: pywebgpu-browser)")
    add_measure_options(parser)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=500, help="seconds to wait for the page's report")
    args = parser.parse_args(argv)

    sides_wanted = args.sides.split(",")
    if unknown := set(sides_wanted) - {"pywebgpu-browser", "wllama-cpu", "wllama-webgpu", "ort-webgpu"}:
        parser.error(f"unknown sides {sorted(unknown)}")
    wllama_modes = [side.removeprefix("wllama-") for side in sides_wanted if side.startswith("wllama-")]
    if wllama_modes and args.gguf is None:
        parser.error("the wllama sides need --gguf")
    if "ort-webgpu" in sides_wanted and args.ort_model is None:
        parser.error("the ort-webgpu side needs --ort-model")
    measure, prompt_texts = measure_config(args, args.model)
    config = {
        "manifestUrl": f"/bench-model/{args.model.name}",
        "pythonSource": Path(model_bench.__file__).read_text(),
        "measure": measure,
        "pywebgpu": "pywebgpu-browser" in sides_wanted,
        "wllamaModes": wllama_modes,
        "promptTexts": prompt_texts,
        "ggufUrl": args.gguf and f"/bench-gguf/{args.gguf.name}",
        "ort": ort_model.page_config(args.ort_model, ORT_MODEL_URL) if "ort-webgpu" in sides_wanted else None,
        "threads": usable_cores(),
        "nCtx": wllama_n_ctx(measure),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    reports: queue.Queue = queue.Queue()
    started = time.perf_counter()
    # Chromium's helper processes may still write its profile as it goes.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
        (Path(scratch) / "config.json").write_text(json.dumps(config))
        mounts = {"/bench/": PAGE_FOLDER, "/bench-model/": args.model.parent, "/unattended/": Path(scratch)}
        if args.gguf is not None:
            mounts["/bench-gguf/"] = args.gguf.parent
        if args.ort_model is not None:
            mounts[ORT_MODEL_URL] = args.ort_model
        with WebServer(WEB, mounts=mounts, post_handlers={"/unattended/report": reports.put}) as server:
            command = [args.chromium, *BASE_FLAGS, *args.chromium_flag, f"--user-data-dir={scratch}/profile", f"{server.url}/bench/bench.html?unattended"]
            with open(args.out.with_suffix(".chromium.log"), "w") as chromium_log:
                browser = subprocess.Popen(command, stdout=chromium_log, stderr=subprocess.STDOUT)
                memory = PeakMemory(browser.pid)
                memory.start()
                try:
                    body = reports.get(timeout=args.timeout)
                except queue.Empty:
                    raise SystemExit(f"no report from the page in {args.timeout:.0f} s (see {chromium_log.name})") from None
                finally:
                    browser_memory = memory.stop()
                    browser.kill()
                    browser.wait()
    answer = json.loads(body)
    if "error" in answer:
        raise SystemExit(f"the page failed: {answer['error']}")
    page = answer["result"]
    sides = page_sides(page)
    table = compare(sides, table_rows(measure["prefill_lengths"], measure["decode_contexts"]))
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, "-m", "bench.unattended", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - started,
        "machine": machine(),
        "browser": {"name": "Chromium (headless, unattended)", "user_agent": page["userAgent"], "cross_origin_isolated": page["crossOriginIsolated"]},
        "browser_adapter": page["adapter"],
        "browser_memory": browser_memory,
        "model": {
            "pywebgpu": json.loads(args.model.read_text())["pte"],
            "wllama": args.gguf and {"file": args.gguf.name, "bytes": args.gguf.stat().st_size},
            "ort-webgpu": ort_model.model_entry(args.ort_model) if "ort-webgpu" in sides else None,
        },
        "settings": {k: v for k, v in measure.items() if k != "prompt_tokens"} | {"prompt_source": str(PROMPT_TEXT.relative_to(ROOT))},
        "table": table,
        "greedy_ids_agreement": greedy_agreement(sides),
        "results": sides,
    }
    print(format_table(table))
    for mode in page["wllama"]:
        print(f"wllama-{mode}: weights on {', '.join(sides[f'wllama-{mode}']['weights_on']) or '?'}")
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
