"""bench.ggml_reference's activation quantizers against gguf-py's ggml-exact Q8_0 quantizer
(gguf-py has no Q8_1: its values and d are Q8_0's, its s is checked by hand)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from bench.ggml_reference import quantize_q8_0, quantize_q8_1


def activation_rows() -> np.ndarray:
    """Rows of 8 blocks: random activations at several scales, a block of zeros, one of
    exact halves of the step (where rounding modes part), one with a single nonzero value."""
    generator = np.random.default_rng(7)
    rows = (generator.standard_normal((16, 256)) * generator.choice([1e-3, 0.1, 1.0, 30.0], size=(16, 1))).astype(np.float32)
    rows[0, :32] = 0.0
    rows[1, :31] = (np.arange(31, dtype=np.float32) - 14.5) * 0.5
    rows[1, 31] = 127.0 * 0.5  # amax / 127 = 0.5: the values before it are exact halves of a step
    rows[2, 32:64] = 0.0
    rows[2, 40] = -3.25
    return rows


def gguf_q8_0(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gguf-py's Q8_0 blocks of `rows`: the int8 values [rows, blocks, 32] and the float16 d bytes."""
    blocks = quantize(rows, GGMLQuantizationType.Q8_0).reshape(rows.shape[0], -1, 34)
    return blocks[..., 2:].view(np.int8), blocks[..., :2].copy()


def test_q8_0_is_gguf_py_bit_for_bit():
    rows = activation_rows()
    values, scale = quantize_q8_0(torch.from_numpy(rows))
    expected_values, expected_scale = gguf_q8_0(rows)
    assert np.array_equal(values.numpy().astype(np.int8), expected_values)
    assert np.array_equal(scale.numpy().view(np.uint8).reshape(expected_scale.shape), expected_scale)


def test_q8_1_values_and_d_are_q8_0s_and_s_is_d_times_their_sum():
    rows = activation_rows()
    values, scale, sums = quantize_q8_1(torch.from_numpy(rows))
    expected_values, expected_scale = gguf_q8_0(rows)
    assert np.array_equal(values.numpy().astype(np.int8), expected_values)
    assert np.array_equal(scale.numpy().view(np.uint8).reshape(expected_scale.shape), expected_scale)
    # quantize_row_q8_1_ref: s = GGML_FP32_TO_FP16(sum * d), the int sum times the float32 d (amax / 127).
    d = np.abs(rows.reshape(rows.shape[0], -1, 32)).max(-1) / np.float32(127)
    expected_sums = (expected_values.astype(np.int32).sum(-1).astype(np.float32) * d).astype(np.float16)
    assert np.array_equal(sums.numpy().view(np.uint16), expected_sums.view(np.uint16))


@pytest.mark.parametrize(
    ("rounding", "expected"),
    [
        ("nearest", [3, -3, 3, -3, 1, -1, 2, 127]),  # roundf: halves away from zero
        ("truncate", [2, -2, 2, -2, 0, 0, 2, 127]),  # wasm_i32x4_trunc_sat_f32x4: towards zero
    ],
)
def test_rounding_modes_by_hand(rounding, expected):
    block = np.zeros(32, dtype=np.float32)
    block[:8] = [2.5, -2.5, 2.7, -2.7, 0.5, -0.5, 2.25, 127.0]  # amax 127: d = 1, the values themselves are scaled
    values, scale = quantize_q8_0(torch.from_numpy(block[None]), rounding)
    assert values[0, 0, :8].tolist() == expected
    assert float(scale[0, 0]) == 1.0
