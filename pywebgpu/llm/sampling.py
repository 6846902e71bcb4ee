"""Choosing the next token from the few candidates the GPU hands back (its top k logits)."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass

from ..ops.topk import K_MAX, Draw


@dataclass
class SamplingParams:
    """temperature 0 is greedy. top_k is capped at the GPU reducer's K_MAX (64): logits
    below the 64th largest never matter for sampling at sane temperatures."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 1 <= self.top_k <= K_MAX:
            raise ValueError(f"top_k must be between 1 and {K_MAX}, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def candidates_needed(self) -> int:
        return 1 if self.greedy else self.top_k


class Sampler:
    """Draws a reply's tokens: on the host from the candidates the GPU hands back (pick),
    or on the GPU (draw: the uniform to draw the next token at), one uniform from the
    seeded generator per token either way."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = random.Random(params.seed)

    def pick(self, candidates: list[tuple[float, int]]) -> int:
        """A token id from (logit, id) pairs sorted by logit, largest first."""
        if not candidates:
            raise ValueError("no candidate tokens (all logits were NaN?)")
        if self.params.greedy:
            return candidates[0][1]
        return draw_token(candidates[: self.params.top_k], self.params.temperature, self.params.top_p, self.rng.random())

    def drawn(self, result: list[tuple[float, int]]) -> int:
        """The token id of a draw made on the GPU, from its result ([(logit, id)])."""
        if not result:
            raise ValueError("no candidate tokens (all logits were NaN?)")
        return result[0][1]

    def draw(self) -> Draw:
        """The next token's draw, made on the GPU from its top k (sampled decoding run
        ahead of the host): what pick would do with the same uniform."""
        return Draw(self.params.temperature, self.params.top_p, self.rng.random())


def draw_token(candidates: list[tuple[float, int]], temperature: float, top_p: float, u: float) -> int:
    """The token at the uniform `u` in [0, 1) of the softmax at `temperature` over
    `candidates` ((logit, id), largest first) cut to its top_p nucleus: weights
    exp((logit - largest) / temperature); kept, the shortest prefix whose share of their
    total reaches top_p; the first kept one whose running sum of weights exceeds u times
    the kept ones' total. (A `Draw` makes the same draw on the GPU.)"""
    largest = candidates[0][0]
    weights = [math.exp((logit - largest) / temperature) for logit, _ in candidates]
    total = sum(weights)
    kept, share = 0, 0.0
    for weight in weights:
        kept += 1
        share += weight / total
        if share >= top_p:
            break
    running = list(itertools.accumulate(weights[:kept]))
    return candidates[min(bisect.bisect_right(running, u * running[-1]), kept - 1)][1]
