"""`python -m export_tools`: export a Llama model to a Vulkan-delegated ExecuTorch .pte."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

from .errors import ExportError, ExportWarning
from .params import PRESETS

EXAMPLES = """\
examples:
  python -m export_tools random --preset tiny -o out/tiny.pte
  python -m export_tools random --preset tiny --params '{"n_layers": 4}' --qmode 8da4w -o out/tiny4.pte
  python -m export_tools random --preset llama3.2-1b --max-seq-len 128 --max-context-len 2048 -o /tmp/llama1b/model.pte
  python -m export_tools meta --checkpoint consolidated.00.pth --params params.json -o llama.pte
  python -m export_tools gguf SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.pte
  python -m export_tools gguf SmolLM2-135M-Instruct.Q4_1.gguf --requantize --qmode 4w -o smollm2-4w.pte
  python -m export_tools hf ./Llama-3.2-1B-Instruct -o llama1b.pte

Next to OUT.pte it writes OUT.json (manifest: geometry, quantization, tokenizer, special
tokens, chat template, sha256) and, when the source has one, OUT.tokenizer.json.
A GGUF's quantized weights are kept exactly (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K as 4-bit
planes plus per-group offsets); --requantize re-quantizes it to 4 bits instead, as the
other sources are. Bad input stops with a one-line error and exit status 2.
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m export_tools",
        description="Export a Llama-family model to an ExecuTorch .pte through the VulkanPartitioner "
        "(ExecuTorch 1.5.1's Llama export: KV cache, custom SDPA, dynamic sequence length).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-o", "--output", required=True, type=Path, help="the .pte to write")
    common.add_argument("--max-seq-len", type=int, default=128,
                        help="ExecuTorch max_seq_len: one forward call takes up to max_seq_len - 1 tokens (default 128)")
    common.add_argument("--max-context-len", type=int, default=2048, help="KV cache length in tokens (default 2048)")
    common.add_argument("--qmode", choices=["4w", "8da4w", "fp32"],
                        help="linear layers: 4-bit weights (4w), 4-bit weights with dynamic 8-bit "
                        "activations (8da4w), or unquantized (fp32); default 4w")
    common.add_argument("--group-size", type=int, help="quantization group size (default 32)")
    common.add_argument("--embedding-4bit", action=argparse.BooleanOptionalAction,
                        help="4-bit grouped embedding, et_vk.embedding_q4gsw (default on)")
    common.add_argument("--hqq-scales", action=argparse.BooleanOptionalAction,
                        help="choose 4-bit scales with HQQ, ExecuTorch's default (default on); "
                        "--no-hqq-scales uses min/max scales, much faster for big models")
    common.add_argument("--force-fp16", action="store_true",
                        help="store every float tensor as float16, the Vulkan partitioner's force_fp16 "
                        "(half the constants' bytes; pywebgpu still computes in f32)")
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    common.add_argument("--verbose", action="store_true", help="show ExecuTorch's logs and PyTorch's warnings")

    sources = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    random = sources.add_parser("random", parents=[common], help="random weights for a preset or given geometry")
    random.add_argument("--preset", choices=sorted(PRESETS), help="starting geometry")
    random.add_argument("--params", help="Meta-style params as a JSON object or a path to a JSON file; "
                        "overrides the preset's keys (e.g. '{\"n_layers\": 4}')")
    random.add_argument("--seed", type=int, default=0, help="random seed (default 0)")

    meta = sources.add_parser("meta", parents=[common], help="a Meta-style checkpoint (.pth + params.json)")
    meta.add_argument("--checkpoint", required=True, type=Path, help="consolidated.00.pth")
    meta.add_argument("--params", required=True, type=Path, help="params.json")

    gguf = sources.add_parser("gguf", parents=[common], help="a llama.cpp GGUF file (architecture llama)")
    gguf.add_argument("path", type=Path, help="the .gguf file")
    gguf.add_argument("--requantize", action="store_true",
                      help="dequantize the GGUF and re-quantize it with --qmode etc. (default: its weights exactly)")

    hf = sources.add_parser("hf", parents=[common], help="a Hugging Face folder (config.json, *.safetensors, tokenizer.json)")
    hf.add_argument("folder", type=Path, help="the model folder")
    return parser


def _random_params(preset: Optional[str], params: Optional[str]) -> dict[str, Any]:
    merged = dict(PRESETS[preset]) if preset else {}
    if params is not None:
        if params.lstrip().startswith("{"):
            text = params
        else:
            try:
                text = Path(params).read_text(encoding="utf-8")
            except OSError as error:
                raise ExportError(f"cannot read --params file {params}: {error.strerror}") from None
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as error:
            raise ExportError(f"--params is not valid JSON: {error}") from None
        if not isinstance(overrides, dict):
            raise ExportError("--params must be a JSON object")
        merged.update(overrides)
    if not merged:
        raise ExportError("give --preset and/or --params")
    return merged


def _source(args: argparse.Namespace):
    from .sources import GGUFSource, HFSource, MetaCheckpointSource, RandomSource

    if args.source == "random":
        return RandomSource(_random_params(args.preset, args.params), seed=args.seed)
    if args.source == "meta":
        return MetaCheckpointSource(args.checkpoint, args.params)
    if args.source == "gguf":
        return GGUFSource(args.path)
    return HFSource(args.folder)


def _refuse_requantizing_options(args: argparse.Namespace) -> None:
    """An exact GGUF export takes no re-quantizing flag: name the ones given."""
    given = [flag for flag, value in (("--qmode", args.qmode), ("--group-size", args.group_size),
             ("--embedding-4bit", args.embedding_4bit), ("--hqq-scales", args.hqq_scales)) if value is not None]  # fmt: skip
    if given:
        raise ExportError(f"{', '.join(given)} re-quantize a GGUF's weights: add --requantize (without it they are kept exactly)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    warnings.formatwarning = lambda message, category, *_: f"warning: {message}\n"
    if not args.verbose:
        warnings.simplefilter("ignore")
        warnings.simplefilter("default", ExportWarning)

    from .exporter import export_llama

    started = time.monotonic()
    requantize = getattr(args, "requantize", False)
    try:
        if args.source == "gguf" and not requantize:
            _refuse_requantizing_options(args)
        result = export_llama(
            _source(args),
            args.output,
            max_seq_len=args.max_seq_len,
            max_context_len=args.max_context_len,
            qmode=args.qmode,
            group_size=args.group_size,
            embedding_4bit=args.embedding_4bit,
            hqq_scales=args.hqq_scales,
            requantize=requantize,
            force_fp16=args.force_fp16,
            progress=not args.no_progress,
            verbose=args.verbose,
        )
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    pte = result.manifest["pte"]
    print(f"wrote {result.pte_path} ({pte['bytes']:,} bytes, sha256 {pte['sha256'][:16]}...) "
          f"in {time.monotonic() - started:.0f} s")
    print(f"wrote {result.manifest_path}")
    if result.manifest["tokenizer"]:
        print(f"wrote {result.pte_path.with_name(result.manifest['tokenizer']['file'])}")
    return 0
