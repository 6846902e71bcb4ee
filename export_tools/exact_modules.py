"""Eager modules that hold GGUF weights exactly (`gguf_blocks`) in ExecuTorch's op vocabulary.

A linear is `F.linear` over each 4-bit plane (torchao's `dequantize_affine` with zero
zero-points and range -8..7, which the VulkanPartitioner turns into
`et_vk.linear_q4gsw`) plus the offset term `F.linear(group sums of x, offset)`, added
straight to plane 0's output; an embedding is `F.embedding` over each plane (which becomes
`et_vk.embedding_q4gsw`) plus the offset table's row broadcast over each group.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import torch
import torch.nn.functional as F

from .errors import ExportError
from .gguf_blocks import ExactWeight, exact_weight
from .sources.base import GGUFTensor

# GGUF types that stay (or widen to) fp32 in the module: norms, and unquantized matrices.
FLOAT_TYPES = ("F32", "F16", "BF16")


class _Planes(torch.nn.Module):
    """The 4-bit planes of one GGUF weight, scales and offset, as buffers of their own."""

    def __init__(self, weight: ExactWeight):
        super().__init__()
        self.group_size = weight.group_size
        self.n_planes = len(weight.planes)
        for index, plane in enumerate(weight.planes):
            self.register_buffer(f"values_{index}", torch.from_numpy(plane.values.copy()))
            self.register_buffer(f"scales_{index}", torch.from_numpy(plane.scales.copy()))
            self.register_buffer(f"zeros_{index}", torch.zeros(plane.scales.shape, dtype=torch.int8))
        self.register_buffer("offset", None if weight.offset is None else torch.from_numpy(weight.offset.copy()))

    def plane(self, index: int) -> torch.Tensor:
        """Plane `index` dequantized to f32 [N, K]."""
        from torchao.quantization.quant_primitives import dequantize_affine

        return dequantize_affine(
            getattr(self, f"values_{index}"),
            [1, self.group_size],
            getattr(self, f"scales_{index}"),
            getattr(self, f"zeros_{index}"),
            torch.int8,
            -8,
            7,
        )


class ExactLinear(_Planes):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.plane(0))
        if self.offset is not None:
            groups = self.offset.shape[1]
            y = y + F.linear(x.view(*x.shape[:-1], groups, self.group_size).sum(-1), self.offset)
        for index in range(1, self.n_planes):
            y = y + F.linear(x, self.plane(index))
        return y


class ExactEmbedding(_Planes):
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(tokens, self.plane(0))
        for index in range(1, self.n_planes):
            rows = rows + F.embedding(tokens, self.plane(index))
        if self.offset is None:
            return rows
        groups = self.offset.shape[1]
        grouped = rows.view(*tokens.shape, groups, self.group_size)
        return (grouped + F.embedding(tokens, self.offset).view(*tokens.shape, groups, 1)).view(rows.shape)


def install_exact_weights(
    model: torch.nn.Module, gguf_tensors: dict[str, GGUFTensor], state_dict: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """Replace `model`'s nn.Linear / nn.Embedding modules whose GGUF tensors are quantized
    by exact modules, in place; keys are Meta-style (`layers.0.attention.wq.weight`) and
    `state_dict` holds each tensor's `gguf.quants.dequantize` values, the exactness
    reference. A GGUF tensor that feeds two modules (tied embedding and LM head) is
    decoded once but stored twice: the VulkanPartitioner repacks an embedding's weight in
    place, which breaks a linear that shares it. Returns the manifest's `quantization`
    entry."""
    decoded: dict[int, ExactWeight] = {}
    float_linears: set[str] = set()
    counted: set[int] = set()
    type_counts: Counter = Counter()
    group_sizes: set[int] = set()
    for key, tensor in gguf_tensors.items():
        if id(tensor) not in counted:
            counted.add(id(tensor))
            type_counts[tensor.gguf_type] += 1
        if tensor.gguf_type in FLOAT_TYPES:
            if isinstance(model.get_submodule(key.removesuffix(".weight")), torch.nn.Linear):
                float_linears.add(linear_role(key))
            continue
        if id(tensor) not in decoded:
            weight = exact_weight(tensor.name, tensor.gguf_type, tensor.data, tensor.shape, state_dict[key].numpy())
            decoded[id(tensor)] = weight
        weight = decoded[id(tensor)]
        group_sizes.add(weight.group_size)
        _replace(model, key, weight)
    return {
        "mode": "gguf",
        "exact": True,
        "gguf_types": dict(sorted(type_counts.items())),
        "group_size": group_sizes.pop() if len(group_sizes) == 1 else sorted(group_sizes) or None,
        "float_linears": sorted(float_linears),
    }


def linear_role(key: str) -> str:
    """A linear's role in the model, its Meta-style key without layer and suffix:
    `layers.0.attention.wo.weight` -> `attention.wo`, `output.weight` -> `output`."""
    path = key.removesuffix(".weight")
    if path.startswith("layers."):
        path = path.split(".", 2)[2]
    return path


def _replace(model: torch.nn.Module, key: str, weight: ExactWeight) -> None:
    path = key.removesuffix(".weight")
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path)
    current = getattr(parent, name)
    rows, columns = weight.planes[0].values.shape
    if isinstance(current, torch.nn.Linear) and current.bias is None:
        exact: Optional[_Planes] = ExactLinear(weight)
    elif isinstance(current, torch.nn.Embedding):
        exact = ExactEmbedding(weight)
    else:
        raise ExportError(f"{key}: expected a bias-free nn.Linear or an nn.Embedding, found {type(current).__name__}")
    if tuple(current.weight.shape) != (rows, columns):
        raise ExportError(f"{key}: the model holds {tuple(current.weight.shape)}, the GGUF tensor {(rows, columns)}")
    setattr(parent, name, exact)

