"""llama.cpp's block formats as symmetric 4-bit planes plus a per-group offset, exactly.

A quantized GGUF weight W [N, K] becomes

    W = plane_0 + offset (broadcast over each group) + plane_1 + ...

where each plane is `scales[n, k // group_size] * values[n, k]` with int values in
-8..7 (what `et_vk.linear_q4gsw` and `et_vk.embedding_q4gsw` hold) and the offset is one
f32 per (row, group). Summed in that order in f32, the parts give exactly the values
`gguf.quants.dequantize` gives, zeros up to their sign (checked per tensor by
`exact_weight`):

- Q4_0: d·(q−8).
- Q4_1: d·q + m = d·(q−8) + (m + 8d).
- Q8_0: q = 16·hi + lo, so d·q = 16d·hi + 8d + d·(lo−8).
- Q4_K: (d·sc)·q − dmin·mn = (d·sc)·(q−8) + (8·d·sc − dmin·mn), groups of 32.
- Q5_K: q = 16·h + l, so S·q − dm = 16S·h + (8S − dm) + S·(l−8), groups of 32.
- Q6_K: S·(q−32) with q−32 = 16·h + l: 16S·h + 8S + S·(l−8), groups of 16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .errors import ExportError

# Super-block size of the K-quants.
QK_K = 256


@dataclass
class Plane:
    values: np.ndarray  # int8 [N, K], each in -8..7
    scales: np.ndarray  # float32 [N, K // group_size]


@dataclass
class ExactWeight:
    """One GGUF tensor as planes + offset (see the module docstring)."""

    gguf_type: str
    group_size: int
    planes: list[Plane]
    offset: Optional[np.ndarray]  # float32 [N, K // group_size], or None

    def dequantized(self) -> np.ndarray:
        """The f32 weight [N, K], summed in the graph's order: plane 0, offset, further planes."""

        def part(plane: Plane) -> np.ndarray:
            return np.repeat(plane.scales, self.group_size, axis=1) * plane.values.astype(np.float32)

        weight = part(self.planes[0])
        if self.offset is not None:
            weight = weight + np.repeat(self.offset, self.group_size, axis=1)
        for plane in self.planes[1:]:
            weight = weight + part(plane)
        return weight


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 at byte `start` of each block, widened to f32: [blocks, 1]."""
    return blocks[:, start : start + 2].copy().view(np.float16).astype(np.float32)


def _low_high_nibbles(packed: np.ndarray, per_half: int) -> np.ndarray:
    """ggml's nibble order: each run of `per_half` bytes holds `per_half` values in its low
    nibbles, then `per_half` more in its high nibbles. [blocks, bytes] -> [blocks, 2 * bytes]."""
    runs = packed.reshape(packed.shape[0], -1, 1, per_half)
    return np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(packed.shape[0], -1)


def _exact_sum(what: str, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """first + second in f32, which must equal the real sum (no rounding)."""
    total = (first + second).astype(np.float32)
    inexact = int(np.count_nonzero(total.astype(np.float64) != first.astype(np.float64) + second.astype(np.float64)))
    if inexact:
        raise ExportError(f"{what}: {inexact} group offset(s) are not exact in f32")
    return total


def _split_nibble_pairs(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """q = 16·high + low with low in 0..15: (high, low − 8), both int8."""
    high = q.astype(np.int16) >> 4
    return high.astype(np.int8), ((q.astype(np.int16) & 0x0F) - 8).astype(np.int8)


def _q4_0(blocks: np.ndarray, what: str):
    d = _half(blocks, 0)
    q = _low_high_nibbles(blocks[:, 2:18], 16).astype(np.int8) - 8
    return 32, [(q, d)], None


def _q4_1(blocks: np.ndarray, what: str):
    d, m = _half(blocks, 0), _half(blocks, 2)
    q = _low_high_nibbles(blocks[:, 4:20], 16).astype(np.int8) - 8
    return 32, [(q, d)], _exact_sum(what, m, np.float32(8) * d)


def _q8_0(blocks: np.ndarray, what: str):
    d = _half(blocks, 0)
    high, low = _split_nibble_pairs(blocks[:, 2:34].copy().view(np.int8))
    return 32, [(high, np.float32(16) * d), (low, d)], np.float32(8) * d


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of a Q4_K/Q5_K super-block: ([blocks, 8], [blocks, 8])."""
    d, m, m_d = (packed[:, 4 * i : 4 * i + 4] for i in range(3))
    scales = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mins = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=1)
    return scales.astype(np.float32), mins.astype(np.float32)


def _sub_block(values: np.ndarray, group_size: int) -> np.ndarray:
    """[blocks, 256] -> [blocks, 256 / group_size, group_size]."""
    return values.reshape(values.shape[0], -1, group_size)


def _q4_k(blocks: np.ndarray, what: str):
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, mn = _k_scales_mins(blocks[:, 4:16])
    scale, minimum = d * sc, dmin * mn  # [blocks, 8], exact products
    q = _low_high_nibbles(blocks[:, 16:144], 32).astype(np.int8) - 8
    return 32, [(q, scale)], _exact_sum(what, np.float32(8) * scale, -minimum)


def _q5_k(blocks: np.ndarray, what: str):
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, mn = _k_scales_mins(blocks[:, 4:16])
    scale, minimum = d * sc, dmin * mn
    low = _low_high_nibbles(blocks[:, 48:176], 32).astype(np.int8) - 8
    high_bits = blocks[:, 16:48]  # bit j of byte i: the high bit of sub-block j's value i
    high = np.concatenate([(high_bits >> j) & 1 for j in range(8)], axis=1).astype(np.int8)
    return 32, [(high, np.float32(16) * scale), (low, scale)], _exact_sum(what, np.float32(8) * scale, -minimum)


def _q6_k(blocks: np.ndarray, what: str):
    low = _low_high_nibbles(blocks[:, 0:128], 64)  # [blocks, 256], ql
    high_bits = blocks[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    q = (low | ((high_bits & 0x03).reshape(-1, QK_K) << 4)).astype(np.int8) - 32
    scale = _half(blocks, 208) * blocks[:, 192:208].copy().view(np.int8).astype(np.float32)  # [blocks, 16]
    high, low = _split_nibble_pairs(q)
    return 16, [(high, np.float32(16) * scale), (low, scale)], np.float32(8) * scale


# GGUF type name -> (bytes per block, values per block, decoder).
_DECODERS: dict[str, tuple[int, int, Callable]] = {
    "Q4_0": (18, 32, _q4_0),
    "Q4_1": (20, 32, _q4_1),
    "Q8_0": (34, 32, _q8_0),
    "Q4_K": (144, QK_K, _q4_k),
    "Q5_K": (176, QK_K, _q5_k),
    "Q6_K": (210, QK_K, _q6_k),
}
SUPPORTED_TYPES = tuple(_DECODERS)


def exact_weight(name: str, gguf_type: str, data: np.ndarray, shape: tuple[int, int], reference: np.ndarray) -> ExactWeight:
    """The GGUF tensor `name` of `gguf_type` (raw block bytes `data`, PyTorch `shape`
    [N, K]) as planes + offset, checked bit-exactly against `reference` (its
    `gguf.quants.dequantize` values)."""
    if gguf_type not in _DECODERS:
        raise ExportError(
            f"GGUF tensor '{name}' has type {gguf_type}, which has no exact export (supported: "
            f"{', '.join(SUPPORTED_TYPES)}, and F32/F16/BF16); pass --requantize to re-quantize the model to 4 bits"
        )
    block_bytes, block_values, decode = _DECODERS[gguf_type]
    rows, columns = shape
    blocks = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, block_bytes)
    if blocks.shape[0] * block_values != rows * columns:
        raise ExportError(f"GGUF tensor '{name}': {blocks.shape[0]} {gguf_type} blocks do not hold {rows}x{columns} values")
    group_size, planes, offset = decode(blocks, f"GGUF tensor '{name}' ({gguf_type})")
    groups = columns // group_size
    weight = ExactWeight(
        gguf_type,
        group_size,
        [Plane(values.reshape(rows, columns), scales.reshape(rows, groups)) for values, scales in planes],
        None if offset is None else offset.reshape(rows, groups),
    )
    expected = np.asarray(reference, dtype=np.float32).reshape(rows, columns)
    # Equal as f32 values, bit for bit but for the sign of zero: llama.cpp's d·0 is -0
    # where d < 0, a sum of planes x + (-x) is +0, which no sum or product tells apart.
    mismatched = int(np.count_nonzero(weight.dequantized() != expected))
    if mismatched:
        raise ExportError(f"GGUF tensor '{name}' ({gguf_type}): {mismatched} weight(s) do not split exactly into 4-bit planes")
    return weight
