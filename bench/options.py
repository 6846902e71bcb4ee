"""What a benchmark run measures: the bundled model, the prompt text and the command-line
options of model_bench's measurement (shared by `python -m bench` and bench.unattended)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from devtools.bundle import ROOT, WEB

MODEL_NAME = "smollm2-135m-instruct-4w"
MANIFEST = WEB / "models" / f"{MODEL_NAME}.json"
PROMPT_TEXT = ROOT / "export_tools" / "data" / "quality_text.txt"
# The benchmark's page, served under /bench/ beside the web bundle.
PAGE_FOLDER = Path(__file__).resolve().parent / "web"
# wllama's context, at least: room for the default longest prompt plus its decoded tokens.
WLLAMA_MIN_N_CTX = 2048


def model_tokenizer(manifest_path: Path):
    from pywebgpu.llm.tokenizer import Tokenizer

    manifest = json.loads(manifest_path.read_text())
    return Tokenizer.from_json((manifest_path.parent / manifest["tokenizer"]["file"]).read_text())


def prompts(tokenizer, lengths: list[int]) -> tuple[list[int], dict[int, str]]:
    """The benchmark text's first max(lengths) token ids (pywebgpu's prompts are their
    prefixes), and for each length the text of that prefix (wllama's prompt), checked to
    tokenize back to exactly those tokens. Prompts longer than the text read it again
    from its start, after a blank line, as often as they need."""
    text = PROMPT_TEXT.read_text().strip()
    tokens = tokenizer.encode(text, add_special_tokens=False)
    copies = -(-max(lengths) // len(tokens))
    if copies > 1:
        tokens = tokenizer.encode("\n\n".join([text] * copies), add_special_tokens=False)
    texts = {}
    for length in lengths:
        texts[length] = tokenizer.decode(tokens[:length])
        if tokenizer.encode(texts[length], add_special_tokens=False) != tokens[:length]:
            raise SystemExit(f"the text of the first {length} tokens does not tokenize back to them")
    return tokens[: max(lengths)], texts


def wllama_n_ctx(measure: dict) -> int:
    """wllama's context for `measure_config`'s measurement: its longest prompt and the
    tokens decoded after it, in whole blocks of 256 (llama.cpp pads its cache so)."""
    longest = max(measure["prefill_lengths"] + measure["decode_contexts"]) + measure["decode_tokens"]
    return max(WLLAMA_MIN_N_CTX, -(-longest // 256) * 256)


def add_measure_options(parser: argparse.ArgumentParser):
    """The options of what model_bench measures."""
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
        "--pte-by-pieces", choices=["yes", "no"],
        help="in the browser, download the .pte by Range requests as the build goes (yes) or whole (no); default: by size (LanguageModel.load's by_pieces)",
    )  # fmt: skip
    parser.add_argument(
        "--prompt-shapes", choices=["new", "kept"], default="new",
        help="new: each timed prompt has a shape pywebgpu's graph kept no state for, as a chat's prompts of new lengths (default); "
        "kept: the graph keeps it from round to round, as for prompts of one length",
    )  # fmt: skip


def measure_config(args, manifest: Path) -> tuple[dict, dict[int, str]]:
    """model_bench.load's config from `add_measure_options`' options, and the text of
    each prompt (for wllama)."""
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
        "pte_by_pieces": None if args.pte_by_pieces is None else args.pte_by_pieces == "yes",
    }
    return measure, prompt_texts
