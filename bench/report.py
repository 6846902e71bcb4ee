"""The benchmark's report: the table of metrics with each side's figure and pywebgpu's
ratios to its peers (wllama, onnxruntime-web), the agreement of greedy token ids, and the
machine it ran on."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from statistics import median

# The sides pywebgpu-in-the-browser is compared with, in the page's order.
PEERS = ("wllama-cpu", "wllama-webgpu", "ort-webgpu")


def page_sides(page: dict) -> dict[str, dict]:
    """The sides bench/web/bench.html ran, by name, from its result; each wllama side
    notes the devices its weights went to."""
    sides = {"pywebgpu-browser": page["pywebgpu"]} if "pywebgpu" in page else {}
    for mode, result in page["wllama"].items():
        result["weights_on"] = wllama_weights_on(result)
        sides[f"wllama-{mode}"] = result
    if "ort" in page:
        sides["ort-webgpu"] = page["ort"]
    return sides


def greedy_agreement(sides: dict[str, dict]) -> dict:
    """Per decode context, for each side that reports token ids beside pywebgpu-browser:
    whether its greedy ids equal pywebgpu's, and the first position where they part."""
    ours = sides.get("pywebgpu-browser")
    agreement = {}
    for name, result in sides.items():
        if ours is None or name in ("pywebgpu-browser", "pywebgpu-native"):
            continue
        for context, run in result["decode"].items():
            theirs, mine = run.get("greedy_continuation"), ours["decode"].get(context, {}).get("greedy_continuation")
            if theirs is None or mine is None:
                continue
            parted = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if parted is None and len(mine) != len(theirs):
                parted = min(len(mine), len(theirs))
            agreement.setdefault(context, {})[name] = {"same_ids": parted is None, "first_difference": parted, "compared": min(len(mine), len(theirs))}
    return agreement


def wllama_weights_on(report: dict) -> list[str]:
    """The devices llama.cpp put the model's weights on, from its own load log
    ("load_tensors: CPU model buffer size = ..."): shows the WebGPU backend's silent
    fallback to the CPU (it needs shader-f16)."""
    return sorted({found.group(1) for line in report["log"] if (found := re.search(r"load_tensors:\s+(\S+) model buffer size", line))})


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


def compare(sides: dict[str, dict], rows: list[tuple]) -> list[dict]:
    """One row per metric: each side's figure, and pywebgpu-in-the-browser / each peer that ran."""
    peers = [peer for peer in PEERS if peer in sides]
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
