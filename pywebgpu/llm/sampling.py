"""Choosing the next token from the few candidates the GPU hands back (its top k logits)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ..ops.topk import K_MAX


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
    def __init__(self, params: SamplingParams):
        self.params = params
        self.rng = random.Random(params.seed)

    def pick(self, candidates: list[tuple[float, int]]) -> int:
        """A token id from (logit, id) pairs sorted by logit, largest first."""
        if not candidates:
            raise ValueError("no candidate tokens (all logits were NaN?)")
        if self.params.greedy:
            return candidates[0][1]
        top = candidates[: self.params.top_k]
        scaled = [logit / self.params.temperature for logit, _ in top]
        largest = scaled[0]
        weights = [math.exp(s - largest) for s in scaled]
        total = sum(weights)
        probabilities = [w / total for w in weights]
        kept, cumulative = 0, 0.0
        for p in probabilities:  # the smallest prefix whose mass reaches top_p
            kept += 1
            cumulative += p
            if cumulative >= self.params.top_p:
                break
        return self.rng.choices([token for _, token in top[:kept]], weights=probabilities[:kept])[0]
