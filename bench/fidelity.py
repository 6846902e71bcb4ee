"""Fidelity against llama.cpp itself: pywebgpu (the bundled .pte, in the browser) and
wllama (llama.cpp in wasm, CPU) on the GGUF it was exported from, in one headless Chromium
run, both given the same token ids (bench/web/fidelity.html).

    .venv/bin/python -m bench.fidelity [--max-tokens 48] [--forced-tokens 400] [--out PATH]

1. Greedy replies to ten chat prompts (the model's chat template, ChatTemplate): identical
   ids or not; for a reply that differs, its first differing position, each side's token
   there and each side's logit margin between the two tokens (a near-tie is what a
   different float summation order can flip).
2. Teacher-forced top-1 over the first tokens of export_tools/data/quality_text.txt: each
   side's most likely next token after every prefix; the share where they agree.
Writes bench-results/fidelity-<machine>-<commit>.json unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from devtools.bundle import ROOT

from .__main__ import PageWatch
from .options import MANIFEST, PAGE_FOLDER, PROMPT_TEXT, WLLAMA_MIN_N_CTX, model_tokenizer
from .report import machine, usable_cores

CHAT_PROMPTS = (
    "What is the capital of France?",
    "What is 17 plus 25? Answer with the number.",
    "Write a Python function that returns the square of a number.",
    "List three colours of the rainbow.",
    "Translate to French: Good morning, my friend.",
    "Begin a story about a lighthouse keeper who finds a message in a bottle.",
    "Why is the sky blue? Explain in two sentences.",
    "Give me a haiku about autumn leaves.",
    "What are the health benefits of drinking water?",
    "Name the largest planet in the solar system and one fact about it.",
)
# Candidates each side reports per step: enough to find the other side's token among them.
TOP_K = 8


def chat_prompts(tokenizer, template) -> tuple[list[list[int]], list[str]]:
    """Each prompt as one user turn: its ids (special tokens as their ids) and its text,
    checked to tokenize to exactly those ids (wllama reads the text)."""
    prompts, texts = [], []
    for text in CHAT_PROMPTS:
        rendered = template.render([{"role": "user", "content": text}])
        ids = tokenizer.encode(rendered, add_special_tokens=False)
        if tokenizer.decode(ids[:1]) != "<|im_start|>":
            raise SystemExit(f"the chat prompt {text!r} does not start with <|im_start|>'s id: the tokenizer read its special tokens as text")
        prompts.append(ids)
        texts.append(rendered)
    return prompts, texts


def canonical_prefixes(tokenizer, ids: list[int]) -> list[list]:
    """[length, text] for each prefix ids[:length] (1 <= length < len(ids)) whose text
    tokenizes back to exactly it; a prefix that ends inside what the tokenizer would
    merge otherwise is left out (wllama could only read it as other tokens)."""
    prefixes = []
    for length in range(1, len(ids)):
        text = tokenizer.decode(ids[:length])
        if tokenizer.encode(text, add_special_tokens=False) == ids[:length]:
            prefixes.append([length, text])
    return prefixes


def margin(top: list[list], first: int, second: int) -> float | None:
    """Logit of `first` less that of `second` among one step's [id, logit] candidates
    (None where `second` is not among them)."""
    scores = dict((token, score) for token, score in top)
    return scores[first] - scores[second] if first in scores and second in scores else None


def _without_end(reply: dict, eos_ids: set[int]) -> dict:
    """The reply less a final end-of-sequence token (one side may report it, the other not)."""
    ended = bool(reply["ids"]) and reply["ids"][-1] in eos_ids
    return {"ids": reply["ids"][:-1] if ended else reply["ids"], "top": reply["top"], "ended": ended}


def compare_replies(tokenizer, ours: list[dict], theirs: list[dict], eos_ids: set[int]) -> list[dict]:
    rows = []
    for text, mine, peer in zip(CHAT_PROMPTS, ours, theirs):
        mine, peer = _without_end(mine, eos_ids), _without_end(peer, eos_ids)
        row = {"prompt": text, "pywebgpu_text": tokenizer.decode(mine["ids"]), "wllama_text": tokenizer.decode(peer["ids"]), "pywebgpu_ids": mine["ids"], "wllama_ids": peer["ids"], "pywebgpu_ended": mine["ended"], "wllama_ended": peer["ended"]}
        parted = next((i for i, (a, b) in enumerate(zip(mine["ids"], peer["ids"])) if a != b), None)
        if parted is None and len(mine["ids"]) != len(peer["ids"]):
            parted = min(len(mine["ids"]), len(peer["ids"]))
        row["identical"] = parted is None
        if parted is not None and parted < min(len(mine["ids"]), len(peer["ids"])):
            a, b = mine["ids"][parted], peer["ids"][parted]
            row["first_difference"] = {
                "position": parted,
                "pywebgpu_token": [a, tokenizer.decode([a])],
                "wllama_token": [b, tokenizer.decode([b])],
                "pywebgpu_margin": margin(mine["top"][parted], a, b),
                "wllama_margin": margin(peer["top"][parted], b, a),
            }
        elif parted is not None:
            row["first_difference"] = {"position": parted, "lengths": [len(mine["ids"]), len(peer["ids"])]}
        rows.append(row)
    return rows


def compare_forced(tokenizer, ours: list[list], theirs: list[list]) -> dict:
    """`ours[i]`: pywebgpu's candidates after the first i + 1 tokens; `theirs`: [length,
    candidates] for the prefixes wllama read."""
    disagreements = []
    for length, peer in theirs:
        mine = ours[length - 1]
        a, b = mine[0][0], peer[0][0]
        if a != b:
            disagreements.append({
                "prefix_tokens": length,
                "pywebgpu_token": [a, tokenizer.decode([a])],
                "wllama_token": [b, tokenizer.decode([b])],
                "pywebgpu_margin": margin(mine, a, b),
                "wllama_margin": margin(peer, b, a),
            })  # fmt: skip
    compared = len(theirs)
    return {"positions": compared, "agree": compared - len(disagreements), "agreement": (compared - len(disagreements)) / compared, "disagreements": disagreements}


def add_eager_margins(replies: list[dict], prompt_ids: list[list[int]], forced_ids: list[int], forced: dict):
    """At each difference, the logit margin of pywebgpu's token over wllama's in eager
    PyTorch (float32) on the same exact GGUF weights (export_tools.bundled's eager module):
    which side computes what the weights say, and how close to a tie it is there."""
    import torch

    from export_tools.bundled import build_bundled_eager

    model = build_bundled_eager()

    def eager_margin(context: list[int], ours: int, theirs: int) -> float:
        model.reset()
        with torch.no_grad():
            logits = model.forward(context, 0).reshape(-1)
        return float(logits[ours] - logits[theirs])

    for row, ids in zip(replies, prompt_ids):
        found = row.get("first_difference")
        if found and "pywebgpu_token" in found:
            context = ids + row["pywebgpu_ids"][: found["position"]]
            found["eager_fp32_margin"] = eager_margin(context, found["pywebgpu_token"][0], found["wllama_token"][0])
    for found in forced["disagreements"]:
        found["eager_fp32_margin"] = eager_margin(forced_ids[: found["prefix_tokens"]], found["pywebgpu_token"][0], found["wllama_token"][0])


def run_page(config: dict, gguf: Path, timeout_s: float) -> dict:
    from playwright.sync_api import sync_playwright

    from devtools.browser import launch_chromium
    from devtools.bundle import WEB, build_web_bundle
    from devtools.server import WebServer

    build_web_bundle()
    with WebServer(WEB, mounts={"/bench/": PAGE_FOLDER, "/gguf/": gguf.parent}) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_context().new_page()
        page.set_default_timeout(timeout_s * 1000)
        watch = PageWatch(page)
        page.goto(f"{server.url}/bench/fidelity.html")
        page.wait_for_selector("body[data-ready='1']")
        result = page.evaluate("config => window.runFidelity(config)", {**config, "ggufUrl": f"/gguf/{gguf.name}"})
        result["browser"] = {"name": "Chromium (headless)", "version": browser.version}
        browser.close()
    result["page_problems"] = watch.problems
    return result


def _margin_text(value) -> str:
    return "not in its top %d" % TOP_K if value is None else f"{value:.4f}"


def _eager_text(found: dict) -> str:
    return f", eager fp32 {found['eager_fp32_margin']:.4f} for pywebgpu's" if "eager_fp32_margin" in found else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fidelity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=48, help="greedy tokens per reply at most (default 48; a reply ends at end-of-sequence)")
    parser.add_argument("--forced-tokens", type=int, default=400, help="tokens of the teacher-forced text (default 400)")
    parser.add_argument("--out", type=Path, help="the JSON report (default bench-results/fidelity-<machine>-<commit>.json)")
    parser.add_argument("--no-eager", action="store_true", help="skip the eager PyTorch margins at each difference")
    parser.add_argument("--timeout", type=float, default=3600, help="browser run time limit, seconds")
    args = parser.parse_args(argv)

    from export_tools.bundled import gguf_path
    from pywebgpu.llm.chat_template import ChatTemplate

    manifest = json.loads(MANIFEST.read_text())
    tokenizer = model_tokenizer(MANIFEST)
    forced_ids = tokenizer.encode(PROMPT_TEXT.read_text(), add_special_tokens=False)[: args.forced_tokens]
    prompt_ids, prompt_texts = chat_prompts(tokenizer, ChatTemplate.from_template_string(manifest.get("chat_template")))
    prefixes = canonical_prefixes(tokenizer, forced_ids)
    work = {
        "prompts": prompt_ids,
        "max_tokens": args.max_tokens,
        "top_k": TOP_K,
        "forced_ids": forced_ids,
    }
    gguf = Path(gguf_path())
    started = time.perf_counter()
    page = run_page(
        {"manifestUrl": f"/models/{MANIFEST.name}", "pythonSource": (PAGE_FOLDER / "fidelity_model.py").read_text(), "work": work, "wllama_prompts": prompt_texts, "wllama_prefixes": prefixes, "threads": usable_cores(), "nCtx": WLLAMA_MIN_N_CTX},
        gguf,
        args.timeout,
    )
    eos_ids = {token["id"] for token in manifest["special_tokens"]["eos"]}
    replies = compare_replies(tokenizer, page["pywebgpu"]["replies"], page["wllama"]["replies"], eos_ids)
    forced = compare_forced(tokenizer, page["pywebgpu"]["forced"], page["wllama"]["forced"])
    if not args.no_eager:
        add_eager_margins(replies, prompt_ids, forced_ids, forced)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    host = machine()
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench.fidelity", *(sys.argv[1:] if argv is None else argv)]),
        "duration_s": time.perf_counter() - started,
        "machine": host,
        "browser": {**page["browser"], "user_agent": page["userAgent"]},
        "pywebgpu": {"pte": manifest["pte"], "adapter": page["pywebgpu"]["adapter"], "load_s": page["pywebgpu"]["load_s"], "forced_s": page["pywebgpu"]["forced_s"]},
        "wllama": {"gguf": gguf.name, "version": page["wllama"]["version"], "threads": page["wllama"]["threads"], "forced_s": page["wllama"]["forced_s"]},
        "settings": {"max_tokens": args.max_tokens, "top_k": TOP_K, "forced_tokens": len(forced_ids), "forced_prefixes_compared": len(prefixes), "forced_source": str(PROMPT_TEXT.relative_to(ROOT))},
        "identical_replies": sum(row["identical"] for row in replies),
        "replies": replies,
        "teacher_forced": forced,
        "page_problems": page["page_problems"],
    }
    adapter = "swiftshader" if "swiftshader" in page["pywebgpu"]["adapter"].lower() else "gpu"
    out = args.out or ROOT / "bench-results" / f"fidelity-{adapter}-{host['cores']}core-{commit}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for number, row in enumerate(replies, 1):
        found = row.get("first_difference")
        if row["identical"]:
            status = f"identical ({len(row['pywebgpu_ids'])} tokens{', then end-of-sequence' if row['pywebgpu_ended'] else ''})"
        elif "lengths" in found:
            status = f"one reply ends first, at {found['position']} (lengths {found['lengths']})"
        else:
            status = (
                f"differ at {found['position']}: pywebgpu {found['pywebgpu_token'][1]!r} (margin {_margin_text(found['pywebgpu_margin'])}), "
                f"wllama {found['wllama_token'][1]!r} (margin {_margin_text(found['wllama_margin'])}){_eager_text(found)}"
            )
        print(f"{number:2}. {row['prompt'][:48]:48} {status}")
    print(f"greedy replies identical: {report['identical_replies']} of {len(replies)}")
    print(f"teacher-forced top-1 agreement: {forced['agree']}/{forced['positions']} = {100 * forced['agreement']:.2f} % (prefixes of {len(forced_ids)} tokens whose text tokenizes back to them)")
    for found in forced["disagreements"]:
        print(f"  after {found['prefix_tokens']} tokens: pywebgpu {found['pywebgpu_token'][1]!r} margin {_margin_text(found['pywebgpu_margin'])}, wllama {found['wllama_token'][1]!r} margin {_margin_text(found['wllama_margin'])}{_eager_text(found)}")
    print(f"wrote {out}")
    for problem in report["page_problems"]:
        print(f"page problem: {problem}", file=sys.stderr)
    return 1 if report["page_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
