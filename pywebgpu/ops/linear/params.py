"""The linears' Params blocks and dispatch grids: the host's mirrors of constants in the
kernels of wgsl/linear/."""

from __future__ import annotations

import struct

from ...gpu import linear_grid
from ..registry import pack_u32

PARAMS_BYTES = 48  # common.wgsl's Params (12 u32), in whole 16-byte rows
QPARAMS_BYTES = 32  # int8_quant.wgsl's Params
ELEMENT_THREADS = 256  # threads per workgroup of gemm_reduce and quantize_dequantize

GEMV_THREADS = 8  # threads per gemv workgroup
GEMV_OUTPUTS = 16  # outputs per gemv thread
ROWS_THREADS = 64  # threads per gemv_rows workgroup
ROWS_OUTPUTS = 16  # outputs of each row per gemv_rows thread
GEMV_ROWS = 8  # rows of x per gemv_rows thread (its ROW_QUADS 2)
UPGRADE_ROWS = 16  # rows of x per gemv_rows16 thread (ROW_QUADS 4)
COOP_ROWS = 8  # outputs per gemv_coop workgroup, a team of threads each
COOP4_OUTPUTS_PER_WORKGROUP = 32  # gemv_coop4: 8 teams of threads, 4 outputs each
GEMM_TILE = 64  # output tile side of gemm
GEMM_TILE_K = 32  # input features per step of gemm
GEMM_WIDE_TILE = 128  # of gemm_wide
GEMM_WIDE_TILE_K = 16
QPARAMS_ROWS = 4  # rows per choose_qparams workgroup
# Values per u32 word of weights: a word never straddles a group.
WORD_VALUES = 8
# Values per gemv chunk and per step of 4 words of gemv_rows (STEP_WORDS 4), whose groups
# must hold whole ones (else gemv_rows steps one word at a time).
STEP_VALUES = 32


def pack_params(
    m, n, k, weight_row_words, scale_stride, group_size, split0, split1, residual: bool, silu_mul_out: bool = False,
    k_splits: int = 1, offsets_start: int = 0,
) -> bytes:
    """The linear kernels' Params, padded to PARAMS_BYTES."""
    values = pack_u32(
        m, n, k, weight_row_words, scale_stride, group_size, split0, split1, int(residual), int(silu_mul_out), k_splits,
        offsets_start,
    )
    return values.ljust(PARAMS_BYTES, b"\0")


def pack_qparams(rows: int, row_len: int, qmin: int, qmax: int, eps: float) -> bytes:
    """The Params of choose_qparams and quantize_dequantize."""
    return struct.pack("<IIiif3I", rows, row_len, qmin, qmax, eps, 0, 0, 0)


def dispatch_grid(kernel: str, m: int, n: int, k_splits: int = 1) -> tuple[int, int, int]:
    """The workgroup grid of `kernel` for an [M, K] x [K, N] product."""
    if kernel == "gemv":
        return (*linear_grid(-(-n // (GEMV_THREADS * GEMV_OUTPUTS)), 1), m)
    if kernel in ("gemv_rows", "gemv_rows16"):
        rows = UPGRADE_ROWS if kernel == "gemv_rows16" else GEMV_ROWS
        return (*linear_grid(-(-n // (ROWS_THREADS * ROWS_OUTPUTS)), 1), -(-m // rows))
    if kernel == "gemv_coop":
        return (*linear_grid(-(-n // COOP_ROWS), 1), m)
    if kernel == "gemv_coop4":
        return (*linear_grid(-(-n // COOP4_OUTPUTS_PER_WORKGROUP), 1), m)
    tile = GEMM_WIDE_TILE if kernel == "gemm_wide" else GEMM_TILE
    return (-(-n // tile), -(-m // tile), k_splits)


def reduce_grid(m: int, n: int) -> tuple[int, int]:
    """The workgroup grid of gemm_reduce over an [M, N] output."""
    return linear_grid(m * n, ELEMENT_THREADS)
