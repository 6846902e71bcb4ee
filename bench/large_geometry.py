"""Export a large preset's geometry (Llama-3.2-3B, Llama-3.1-8B) with random weights on a
machine that cannot hold its fp32 weights: each matrix is one random row repeated (a
broadcast view, never materialized), so only the 4-bit module the exporter quantizes from
it takes memory. For benchmarks only: bench.weightless then overwrites every constant
anyway, since kernel speed does not depend on weight values.

    python -m bench.large_geometry --preset llama3.2-3b OUT.pte
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from export_tools import PRESETS, RandomSource, export_llama
from export_tools.sources.base import LoadedModel


class RepeatedRowSource(RandomSource):
    """RandomSource whose matrices repeat one random row (norm weights as RandomSource's)."""

    def load(self, *, progress: bool = False) -> LoadedModel:
        generator = torch.Generator().manual_seed(self.seed)
        state_dict = {}
        for key, shape in self.params.expected_shapes().items():
            if key == "output.weight" and self.params.tied_embeddings:
                state_dict[key] = state_dict["tok_embeddings.weight"]
            elif len(shape) == 1:
                state_dict[key] = 1 + 0.1 * torch.randn(shape, generator=generator)
            else:
                state_dict[key] = (torch.randn(shape[1], generator=generator) / shape[1] ** 0.5).expand(shape)
        origin = {"kind": "random-repeated-rows", "seed": self.seed, "params": self.raw_params}
        return LoadedModel(self.params, state_dict, tokenizer=None, origin=origin)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_geometry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--max-seq-len", type=int, default=512)
    parser.add_argument("--max-context-len", type=int, default=2048)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    export_llama(
        RepeatedRowSource(args.preset), args.out, max_seq_len=args.max_seq_len, max_context_len=args.max_context_len,
        qmode="4w", hqq_scales=False, progress=True,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
