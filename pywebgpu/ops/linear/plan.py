"""Which linear kernel runs where: the kernels each kernel set builds, the one a linear
runs for its live shape, and the GPUs' GEMM tiling and K splits. The measurements behind
the thresholds are in docs/design.md.

The kernels for CPU adapters (SwiftShader, lavapipe, which run a workgroup's invocations
one SIMD batch after another) are threads walking their own weight rows: `gemv` for one
row of x where the adapter has subgroups and the groups hold whole steps, `gemv_rows`
(8 rows a thread) or, once built after the graph, `gemv_rows16` (16) for the rest. The
kernels for GPUs read weights coalesced: a team of threads per output (`gemv_coop`) or
per 4 outputs (`gemv_coop4`) for up to GPU_GEMV_MAX_ROWS rows, above that a tiled GEMM
(`gemm` or `gemm_wide`, K split over workgroups where the tiles are few).
"""

from __future__ import annotations

from .params import GEMM_TILE, GEMM_TILE_K, GEMM_WIDE_TILE, GEMM_WIDE_TILE_K, STEP_VALUES

# The decode kernels each kernel set builds at load (a GPU's GEMMs are added per shape):
# only those, since every pipeline costs load time.
KERNELS_BY_SET = {"cpu": ("gemv", "gemv_rows"), "gpu": ("gemv_coop", "gemv_coop4")}
# Up to this many rows of x, reading the weights once per row (GEMV) beats the tiled GEMM.
GPU_GEMV_MAX_ROWS = 4
# From this many outputs on, gemv_coop4 fills a GPU and beats gemv_coop (the LM heads,
# gate/up, and q/k/v from the 3B's on).
COOP4_MIN_N = 5120
# From this many rows on, gemv_rows16 beats gemv_rows (with fewer, its half as many
# workgroups leave a core idle).
UPGRADE_MIN_M = 64
# The kernels that can apply an RMSNorm to x themselves (X_RMS_NORM).
NORM_KERNELS = ("gemv_coop", "gemv_coop4", "gemv")
# gemv applies a norm only up to this many outputs: each of its threads normalizes the
# whole row of x, a cost growing with N, where the norm's own dispatch costs a fixed one.
GEMV_NORM_MAX_N = 1024
# The GEMMs split K while their tiles alone make fewer workgroups than this (a tile's
# workgroup mostly waits on each step's loads, and few tiles leave a large GPU idle).
GEMM_TARGET_WORKGROUPS = 256
GEMM_MAX_SPLITS = 8
# The fewest steps a split keeps: gemm's (128 values), gemm_wide's (512 values).
GEMM_MIN_SPLIT_STEPS = 4
GEMM_WIDE_MIN_SPLIT_STEPS = 32
# gemm_wide (twice the products per staged value) runs where its tiles and splits make
# at least this many workgroups.
GEMM_WIDE_MIN_WORKGROUPS = 128


def decode_kernels(kernel_set: str, subgroups: bool, group_size: int) -> tuple[str, ...]:
    """The kernels a linear of `kernel_set` builds at load: gemv needs subgroups and groups
    of whole steps of STEP_VALUES."""
    kernels = KERNELS_BY_SET[kernel_set]
    if not subgroups or group_size % STEP_VALUES:
        kernels = tuple(kernel for kernel in kernels if kernel != "gemv")
    return kernels


def builds_upgrade(kernel_set: str, max_rows: int) -> bool:
    """Whether a linear builds gemv_rows16 after the graph (see UPGRADE_MIN_M)."""
    return kernel_set == "cpu" and max_rows >= UPGRADE_MIN_M


def norm_kernels(built, n: int) -> list[str]:
    """Those of the built kernels that apply an RMSNorm for a linear of N outputs."""
    return [kernel for kernel in NORM_KERNELS if kernel in built and not (kernel == "gemv" and n > GEMV_NORM_MAX_N)]


def choose_kernel(kernel_set: str, m: int, n: int, k: int, built) -> tuple[str, int]:
    """(kernel, workgroups along K per tile: 1 but for a split GEMM) for M rows of x times
    the [K, N] weights, among the `built` kernels (a GPU's GEMMs always are)."""
    if kernel_set == "cpu":
        if m == 1 and "gemv" in built:
            return "gemv", 1
        return ("gemv_rows16" if m >= UPGRADE_MIN_M and "gemv_rows16" in built else "gemv_rows"), 1
    if m > GPU_GEMV_MAX_ROWS:
        return gemm_plan(m, n, k)
    return ("gemv_coop4" if n >= COOP4_MIN_N else "gemv_coop"), 1


def gemm_tiles(m: int, n: int, tile: int = GEMM_TILE) -> int:
    """The tiles of side `tile` of an [M, N] output."""
    return -(-n // tile) * -(-m // tile)


def k_splits(tiles: int, k: int, step: int, min_split_steps: int) -> int:
    """How many workgroups share the K of each of `tiles` tiles (a power of two; see
    GEMM_TARGET_WORKGROUPS), each keeping at least `min_split_steps` steps of `step`."""
    steps = -(-k // step)
    splits = 1
    while splits < GEMM_MAX_SPLITS and tiles * splits < GEMM_TARGET_WORKGROUPS and steps >= 2 * splits * min_split_steps:
        splits *= 2
    return splits


def gemm_plan(m: int, n: int, k: int) -> tuple[str, int]:
    """The GPUs' prefill GEMM for an [M, K] x [K, N] product: (kernel, workgroups along K
    per tile); see GEMM_WIDE_MIN_WORKGROUPS. Up to 64 rows, gemm: gemm_wide's tiles would
    compute twice the rows."""
    wide_tiles = gemm_tiles(m, n, GEMM_WIDE_TILE)
    wide_splits = k_splits(wide_tiles, k, GEMM_WIDE_TILE_K, GEMM_WIDE_MIN_SPLIT_STEPS)
    if m > GEMM_TILE and wide_tiles * wide_splits >= GEMM_WIDE_MIN_WORKGROUPS:
        return "gemm_wide", wide_splits
    return "gemm", k_splits(gemm_tiles(m, n), k, GEMM_TILE_K, GEMM_MIN_SPLIT_STEPS)


def gemm_plans(kernel_set: str, max_rows: int, n: int, k: int):
    """(M, gemm_plan) for the row counts of x that stand for all those a GPU runs a GEMM
    for: M changes the plan only through its rows of tiles, so the most rows of each row
    of 64x64 tiles (two make a row of 128x128 ones) stand for the rest, and need the most
    scratch of them."""
    if kernel_set != "gpu":
        return
    for end in range(GEMM_TILE, max_rows + GEMM_TILE, GEMM_TILE):
        m = min(end, max_rows)
        if m > GPU_GEMV_MAX_ROWS:
            yield m, gemm_plan(m, n, k)
