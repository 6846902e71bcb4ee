"""Seeded random weights for any Llama geometry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

import torch
from tqdm import tqdm

from ..errors import ExportError
from ..params import PRESETS, LlamaParams
from .base import LoadedModel, ModelSource, StateDict


class RandomSource(ModelSource):
    """Seeded random weights for any geometry: a preset name or a Meta-style params dict.

    Matrices are N(0, 1/fan_in) (so activations and logits stay O(1)), norm weights
    1 + N(0, 0.1^2) (so a runtime that ignores them is caught). With `tied_embeddings`
    the output layer is the embedding matrix.
    """

    def __init__(self, params: Union[str, Mapping[str, Any]], seed: int = 0):
        if isinstance(params, str):
            if params not in PRESETS:
                raise ExportError(f"unknown preset '{params}' (known: {', '.join(PRESETS)})")
            params = PRESETS[params]
        self.raw_params = dict(params)
        self.params = LlamaParams.from_meta_params(self.raw_params)
        self.seed = seed

    def load(self, *, progress: bool = False) -> LoadedModel:
        generator = torch.Generator().manual_seed(self.seed)
        state_dict: StateDict = {}
        shapes = self.params.expected_shapes()
        for key, shape in tqdm(shapes.items(), desc="random weights", disable=not progress):
            if key == "output.weight" and self.params.tied_embeddings:
                state_dict[key] = state_dict["tok_embeddings.weight"]
            elif len(shape) == 1:
                state_dict[key] = 1 + 0.1 * torch.randn(shape, generator=generator)
            else:
                state_dict[key] = torch.randn(shape, generator=generator) / shape[1] ** 0.5
        origin = {"kind": "random", "seed": self.seed, "params": self.raw_params}
        return LoadedModel(self.params, state_dict, tokenizer=None, origin=origin)
