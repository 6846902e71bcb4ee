"""What every weight source returns, and the checks and helpers the sources share."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from ..errors import ExportError
from ..params import LlamaParams

StateDict = dict[str, torch.Tensor]
PathLike = Union[str, Path]


@dataclass(frozen=True)
class SpecialToken:
    id: int
    text: Optional[str]  # None when no tokenizer vocabulary names the id

    def manifest_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text}


@dataclass
class TokenizerInfo:
    """What a runtime needs to turn text into tokens and back, as far as the source has it."""

    tokenizer_json: Optional[str]  # a Hugging Face `tokenizers` JSON document
    bos: Optional[SpecialToken]
    eos: list[SpecialToken]
    chat_template: Optional[str]


@dataclass(frozen=True, eq=False)
class GGUFTensor:
    """One GGUF tensor as stored: its name, type name (`Q4_1`, `F32`, ...), raw bytes and
    PyTorch shape (slowest dimension first)."""

    name: str
    gguf_type: str
    data: Any  # numpy uint8 (or float) array of the file's bytes
    shape: tuple[int, ...]


@dataclass
class LoadedModel:
    """A source's model: geometry, Meta-style fp32 weights, tokenizer, and where it came from."""

    params: LlamaParams
    state_dict: StateDict  # Meta-style keys, fp32, exactly params.expected_shapes()
    tokenizer: Optional[TokenizerInfo]
    origin: dict[str, Any] = field(default_factory=dict)  # for the manifest
    # A GGUF source's tensors as stored, by Meta-style key (a tied output.weight is the
    # embedding's), for the exact export; None for other sources.
    gguf_tensors: Optional[dict[str, GGUFTensor]] = None


class ModelSource:
    """Base of all sources; `load` does the (possibly slow) reading and converting."""

    def load(self, *, progress: bool = False) -> LoadedModel:
        raise NotImplementedError


def checked_state_dict(params: LlamaParams, tensors: dict[str, torch.Tensor], *, what: str) -> StateDict:
    """The tensors as fp32, checked key by key and shape by shape against the geometry;
    a missing output.weight is the embedding (tied embeddings)."""
    if "output.weight" not in tensors and "tok_embeddings.weight" in tensors:
        tensors["output.weight"] = tensors["tok_embeddings.weight"]
    expected = params.expected_shapes()
    missing = [key for key in expected if key not in tensors]
    if missing:
        raise ExportError(f"{what} lacks {len(missing)} tensor(s), e.g. {', '.join(missing[:3])}")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise ExportError(
            f"{what} has tensor(s) a plain Llama model does not: {', '.join(unexpected[:3])}"
        )
    state_dict = {}
    for key, shape in expected.items():
        tensor = tensors[key]
        if tuple(tensor.shape) != shape:
            raise ExportError(
                f"{what}: {key} has shape {tuple(tensor.shape)}, the geometry needs {shape}"
            )
        state_dict[key] = tensor.to(torch.float32).contiguous()
    return state_dict


def meta_key(
    name: str, global_keys: Mapping[str, str], layer_name: re.Pattern, layer_keys: Mapping[str, str]
) -> Optional[str]:
    """The Meta-style key of a source's tensor `name`, or None if a plain Llama has no such tensor.

    `global_keys` maps whole names, `layer_name` matches a layer's tensor name as
    (layer index, part) and `layer_keys` maps that part.
    """
    if name in global_keys:
        return global_keys[name]
    match = layer_name.fullmatch(name)
    if match and match.group(2) in layer_keys:
        return f"layers.{match.group(1)}.{layer_keys[match.group(2)]}.weight"
    return None


def read_json(path: Path, what: str) -> Any:
    """The JSON document at `path`; ExportError naming `what` if it is missing or bad."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportError(f"cannot read {what} {path}: {error}") from None

