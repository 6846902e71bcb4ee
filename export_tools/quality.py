"""The quality cost of re-quantizing a model to 4 bits: top-1 next-token agreement.

Over a fixed English text (`data/quality_text.txt`, ~1,100 tokens), every position's most
likely next token is compared between

- the exported 4-bit `.pte`, run by pywebgpu on wgpu-native (`PteLlama`), and
- the fp32 model: the same source weights dequantized to fp32, no re-quantization
  (`build_eager(..., qmode="fp32", embedding_4bit=False)`),

and, to tell quantization from kernel error apart, both against the eager 4-bit module
that was lowered. An exact GGUF export has no such module to compare: its weights equal
the fp32 model's (the exporter checks every tensor), so the .pte is compared with fp32
alone. Every model reads the text one token per call (teacher forcing), as decode does,
from position 0.

    python -m export_tools.quality [OUT_DIR]   # the bundled SmolLM2 (default web/models)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from tqdm import tqdm

TEXT_FILE = Path(__file__).resolve().parent / "data" / "quality_text.txt"


class PteLlama:
    """A `.pte` on wgpu-native with EagerLlama's calling convention."""

    def __init__(self, pte_path):
        from pywebgpu.gpu import request_device
        from pywebgpu.llm.logits_top_k import LogitsTopK
        from pywebgpu.runtime import load

        self._loop = asyncio.new_event_loop()
        device = self._loop.run_until_complete(request_device())
        self.graph = self._loop.run_until_complete(load(device, Path(pte_path).read_bytes()))
        self.top_k = LogitsTopK(self.graph)

    def _inputs(self, tokens: Sequence[int], start_pos: int):
        from pywebgpu.runtime import HostTensor

        return HostTensor((1, len(tokens)), list(tokens), "int64"), HostTensor((1,), [start_pos], "int64")

    def forward(self, tokens: Sequence[int], start_pos: int) -> torch.Tensor:
        """fp32 logits [1, vocab] of the last token."""
        (logits,) = self._loop.run_until_complete(self.graph.execute(*self._inputs(tokens, start_pos)))
        return torch.tensor(logits.values, dtype=torch.float32).reshape(1, -1)

    def next_token(self, tokens: Sequence[int], start_pos: int) -> int:
        """The argmax after `tokens`, reduced on the GPU (one value read back)."""
        ((_, token),) = self._loop.run_until_complete(self.top_k.execute(*self._inputs(tokens, start_pos), k=1))
        return token

    def reset(self) -> None:
        """Nothing to clear: attention is causal, so a run from position 0 never reads the
        cache entries an earlier run left beyond its own positions."""

    def close(self) -> None:
        self._loop.close()

    def __enter__(self) -> "PteLlama":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def teacher_forced_predictions(next_token: Callable[[list[int], int], int], ids: Sequence[int], label: str) -> list[int]:
    """The predicted next token after each prefix ids[:i+1], feeding one token per call."""
    return [next_token([token], position) for position, token in enumerate(tqdm(ids, desc=label, unit="tok"))]


def _eager_next_token(model):
    model.reset()
    return lambda tokens, position: int(model(tokens, position).argmax())


@dataclass
class Agreement:
    """Top-1 matches per pair of models; the .pte pairs over its first `pte_tokens`."""

    tokens: int
    pte_tokens: int
    pte_vs_fp32: int
    eager4_vs_fp32: Optional[int]
    pte_vs_eager4: Optional[int]

    def as_dict(self) -> dict:
        def rate(matches, tokens):
            return None if matches is None else {"matches": matches, "tokens": tokens, "rate": round(matches / tokens, 4)}

        return {
            "top1_agreement": {
                "pte_4bit_vs_fp32": rate(self.pte_vs_fp32, self.pte_tokens),
                "eager_4bit_vs_fp32": rate(self.eager4_vs_fp32, self.tokens),
                "pte_4bit_vs_eager_4bit": rate(self.pte_vs_eager4, self.pte_tokens),
            },
        }


def measure(
    pte_path: Path, source, export_options: dict, max_tokens: Optional[int] = None, pte_tokens: Optional[int] = None
) -> Agreement:
    """Top-1 agreement over the quality text for the .pte exported from `source` with
    `export_options` (the same options rebuild its eager 4-bit module). The .pte reads
    only the first `pte_tokens` (all by default): on a CPU adapter a decode step takes
    seconds, where the eager models take milliseconds."""
    from tokenizers import Tokenizer

    from .exporter import build_eager

    manifest = json.loads(pte_path.with_suffix(".json").read_text(encoding="utf-8"))
    tokenizer = Tokenizer.from_file(str(pte_path.parent / manifest["tokenizer"]["file"]))
    ids = tokenizer.encode(TEXT_FILE.read_text(encoding="utf-8")).ids
    limit = min(len(ids), manifest["model"]["max_context_len"], max_tokens or len(ids))
    ids = ids[:limit]
    pte_ids = ids[: min(len(ids), pte_tokens or len(ids))]

    with PteLlama(pte_path) as pte:
        pte_top1 = teacher_forced_predictions(pte.next_token, pte_ids, "4-bit .pte (wgpu-native)")
    eager4_top1 = None
    if not manifest.get("quantization", {}).get("exact"):
        eager4 = build_eager(source, **export_options)
        eager4_top1 = teacher_forced_predictions(_eager_next_token(eager4), ids, "eager 4-bit")
        del eager4
    fp32_options = dict(export_options, qmode="fp32", embedding_4bit=False)
    fp32_top1 = teacher_forced_predictions(_eager_next_token(build_eager(source, **fp32_options)), ids, "eager fp32")

    def matches(a, b):
        return None if a is None or b is None else sum(x == y for x, y in zip(a, b))

    return Agreement(len(ids), len(pte_ids), matches(pte_top1, fp32_top1), matches(eager4_top1, fp32_top1), matches(pte_top1, eager4_top1))


def main(argv: Optional[list[str]] = None) -> int:
    from . import bundled
    from .sources import GGUFSource

    parser = argparse.ArgumentParser(prog="python -m export_tools.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=bundled.DEFAULT_OUT_DIR, help="where the bundled model is (default web/models)")
    parser.add_argument("--max-tokens", type=int, help="measure over the first N tokens only")
    parser.add_argument("--pte-tokens", type=int, help="run the .pte over the first N tokens only (slow on CPU adapters)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)

    pte = bundled.ensure_bundled_model(args.out_dir, progress=True)
    started = time.monotonic()
    result = measure(pte, GGUFSource(bundled.gguf_path()), dict(bundled.EXPORT_OPTIONS), args.max_tokens, args.pte_tokens)
    report = {"model": pte.name, "text": TEXT_FILE.name, **result.as_dict(), "seconds": round(time.monotonic() - started)}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
