"""A Meta-style checkpoint (`consolidated.00.pth`) and its `params.json`."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import ExportError
from ..params import LlamaParams
from .base import LoadedModel, ModelSource, PathLike, checked_state_dict, read_json


class MetaCheckpointSource(ModelSource):
    """A Meta-style checkpoint (`consolidated.00.pth`) and its `params.json`.

    A checkpoint without `output.weight` has tied embeddings (Llama 3.2 1B/3B).
    """

    def __init__(self, checkpoint: PathLike, params_json: PathLike):
        self.checkpoint = Path(checkpoint)
        self.params_json = Path(params_json)

    def load(self, *, progress: bool = False) -> LoadedModel:
        raw_params = read_json(self.params_json, "params file")
        if not isinstance(raw_params, dict):
            raise ExportError(f"params file {self.params_json} does not hold a JSON object")
        if not self.checkpoint.is_file():
            raise ExportError(f"checkpoint not found: {self.checkpoint}")
        try:
            tensors = torch.load(self.checkpoint, map_location="cpu", mmap=True, weights_only=True)
        except Exception as error:  # torch raises many types for a file that is not a checkpoint
            raise ExportError(f"cannot read checkpoint {self.checkpoint}: {error}") from None
        if isinstance(tensors, dict) and isinstance(tensors.get("model"), dict):
            tensors = tensors["model"]
        if not isinstance(tensors, dict) or "tok_embeddings.weight" not in tensors:
            raise ExportError(
                f"{self.checkpoint} is not a Meta-style Llama checkpoint (no tok_embeddings.weight)"
            )
        # Llama 2 checkpoints carry their RoPE table; ExecuTorch computes its own.
        tensors.pop("rope.freqs", None)
        tied = "output.weight" not in tensors
        if tied:
            tensors["output.weight"] = tensors["tok_embeddings.weight"]
        params = LlamaParams.from_meta_params(
            {**raw_params, "tied_embeddings": tied},
            vocab_size=tensors["tok_embeddings.weight"].shape[0],
        )
        state_dict = checked_state_dict(params, tensors, what=str(self.checkpoint))
        origin = {"kind": "meta", "checkpoint": self.checkpoint.name, "params": self.params_json.name}
        return LoadedModel(params, state_dict, tokenizer=None, origin=origin)
