"""Which attention kernel runs a call, and how it splits the keys: every threshold in one
place, each with its reason (the measurements behind them: docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass

# --- the kernels for GPUs (wgsl/attention/split, whole_row, combine, tiled) -------------
MAX_HEAD_DIM = 256  # 64 threads of 4 dims each
MAX_CHUNK = 1024  # keys per workgroup: their scores are held in workgroup memory
MIN_CHUNK = 64  # keys per split at least; chunks are multiples of it
MAX_SPLITS = 256  # combine.wgsl keeps one rescale factor per split in workgroup memory
MAX_KEYS = MAX_CHUNK * MAX_SPLITS
# Workgroups to aim for when splitting keys: enough to occupy a large GPU; beyond it splits
# only add merging work.
TARGET_WORKGROUPS = 1024
# Rows that would be split run whole_row up to this many keys (at most MAX_CHUNK): one
# dispatch instead of the split pass and the combine, faster while the row is short.
WHOLE_ROW_MAX_KEYS = 1024
# A prefill of at least this many rows runs the tiled kernel where it can: its pairs share
# each staged block of keys, which pays once there are rows enough to share them.
TILED_MIN_ROWS = 64
TILED_PAIRS = 32  # (row, head) pairs per tiled workgroup, at most the heads of a kv head
TILED_MAX_HEAD_DIM = 128  # its staged blocks: 32 keys up to head dim 64, 16 past it

# --- the kernel for CPU adapters (wgsl/attention/cpu, cpu_combine) ----------------------
CPU_MAX_HEAD_DIM = 64  # a quad of threads x 16 dims each
CPU_QUAD_THREADS = 4  # a quad per query row and cpu_quad_heads heads
CPU_MAX_QUAD_HEADS = 4
CPU_WORKGROUP_SIZE = 4  # one quad, so that decode's few quads spread over the cores
CPU_COMBINE_WORKGROUP_SIZE = 64
# Query rows per quad in calls of several rows: each key and value a quad loads serves
# that many times the (row, head) pairs. The graph builds the 2-row kernel with the graph
# and the 4-row one, faster but slower to compile, after it (build_upgrades).
CPU_QUAD_ROWS = 2
CPU_UPGRADE_QUAD_ROWS = 4
# A decode row of at least CPU_SPLIT_MIN_KEYS keys is split into CPU_DECODE_SPLITS even
# shares, a quad's each, then merged: a decode step has a quad per kv head only, too few
# for the cores to share out evenly; at fewer keys the merge costs what the balance saves.
CPU_DECODE_SPLITS = 2
CPU_SPLIT_MIN_KEYS = 512

# The kernels (KernelChoice.kernel): for CPU adapters, and for GPUs.
CPU = "cpu"
TILED = "tiled"
WHOLE_ROW = "whole_row"
SPLIT = "split"


@dataclass(frozen=True)
class KernelChoice:
    """How one call runs: its kernel, keys per workgroup (0: the kernel shares them out
    itself), splits per row, and the input positions its recording serves (the kernels
    read the position on the GPU; None: none but this call's)."""

    kernel: str
    chunk: int
    splits: int
    positions: tuple[int, int] | None


def choose_kernel(seq_len: int, keys: int, q_heads: int, max_context: int, *, on_cpu: bool, tiled: bool) -> KernelChoice:
    """The kernel for `seq_len` query rows of `q_heads` heads attending up to `keys` keys;
    `on_cpu` and `tiled`: whether the op runs the CPU kernel, and has a tiled one."""
    if on_cpu:
        splits = CPU_DECODE_SPLITS if seq_len == 1 and keys >= CPU_SPLIT_MIN_KEYS else 1
        return KernelChoice(CPU, 0, splits, None)
    if tiled and seq_len >= TILED_MIN_ROWS:
        # The kernel walks the keys up to the position it reads: every position serves.
        return KernelChoice(TILED, 0, 1, (0, max_context - seq_len))
    rows = seq_len * q_heads
    few_rows = split_keys(WHOLE_ROW_MAX_KEYS, rows)[1] > 1  # rows the split grid would spread out
    if few_rows and keys <= WHOLE_ROW_MAX_KEYS:
        # Positions whose keys fit the cache too: past it, a resize refuses them.
        return KernelChoice(WHOLE_ROW, MAX_CHUNK, 1, (0, min(WHOLE_ROW_MAX_KEYS, max_context) - seq_len))
    chunk, splits, most_keys = split_grid(keys, rows, max_context)
    # Few rows go back to whole_row when their keys fall to WHOLE_ROW_MAX_KEYS.
    lowest = WHOLE_ROW_MAX_KEYS - seq_len + 1 if few_rows else 0
    return KernelChoice(SPLIT, chunk, splits, (lowest, most_keys - seq_len))


def runs_cpu_kernel(kernel_set: str, features, head_dim: int) -> bool:
    """Whether an op runs the CPU kernel (CPU adapters, where it can); fixed at load."""
    return kernel_set == "cpu" and head_dim % 4 == 0 and head_dim <= CPU_MAX_HEAD_DIM and "subgroups" in features


def can_tile(kernel_set: str, features, head_dim: int, heads_per_kv_head: int, max_rows: int) -> bool:
    """Whether an op's prefills can run the tiled kernel (fixed at load)."""
    return (
        kernel_set == "gpu"
        and "subgroups" in features
        and head_dim % 4 == 0
        and head_dim <= TILED_MAX_HEAD_DIM
        and heads_per_kv_head <= TILED_PAIRS
        and max_rows >= TILED_MIN_ROWS
    )


def cpu_quad_heads(q_heads: int, kv_heads: int) -> int:
    """Query heads each quad of the CPU kernel takes: the most, up to CPU_MAX_QUAD_HEADS,
    that divide the heads sharing a kv head (every key a quad loads serves them all)."""
    group = q_heads // kv_heads
    return max(n for n in range(1, CPU_MAX_QUAD_HEADS + 1) if group % n == 0)


def cpu_rows_kernel_name(quad_rows: int) -> str:
    """The name the CPU kernel of `quad_rows` rows a quad is reported by."""
    return f"sdpa_cpu_rows{quad_rows}"


def cpu_quad_rows(kernel: str) -> int:
    """The query rows a quad of the CPU kernel named `kernel` (cpu_rows_kernel_name's)."""
    return int(kernel.removeprefix("sdpa_cpu_rows"))


def cpu_decode_positions(splits: int, max_context: int) -> tuple[int, int]:
    """The positions a decode step's CPU kernel recording with `splits` key splits serves:
    those with as many splits."""
    if splits > 1:
        return CPU_SPLIT_MIN_KEYS - 1, max_context - 1
    return 0, min(CPU_SPLIT_MIN_KEYS - 2, max_context - 1)


def split_keys(keys: int, rows: int) -> tuple[int, int]:
    """(chunk, splits): keys per workgroup and workgroups per row, for `rows` (query rows
    x heads) attending up to `keys` keys."""
    wanted = min(MAX_SPLITS, max(1, TARGET_WORKGROUPS // max(rows, 1)))
    chunk = -(-keys // wanted)
    chunk = min(MAX_CHUNK, max(MIN_CHUNK, -(-chunk // MIN_CHUNK) * MIN_CHUNK))
    return chunk, max(1, -(-keys // chunk))


def split_grid(keys: int, rows: int, max_keys: int) -> tuple[int, int, int]:
    """(chunk, splits, most keys): split_keys(keys, rows)'s chunk, and a grid of splits
    rounded up to a power of two (at most most_splits(max_keys, rows)), which serves
    every count of keys up to `most keys` with that chunk: later workgroups find no keys
    and return. The grid thus changes a few times over a context, not every chunk keys."""
    chunk, splits = split_keys(keys, rows)
    splits = min(1 << (splits - 1).bit_length(), most_splits(max_keys, rows))
    return chunk, splits, min(max_keys, chunk * splits)


def most_splits(max_keys: int, rows: int) -> int:
    """An upper bound of split_keys(keys, rows)[1] over keys <= max_keys: a chunk below
    MAX_CHUNK holds at least keys / wanted keys, so splits <= wanted; at MAX_CHUNK,
    splits <= max_keys / MAX_CHUNK."""
    wanted = min(MAX_SPLITS, max(1, TARGET_WORKGROUPS // max(rows, 1)))
    return min(max(wanted, -(-max_keys // MAX_CHUNK)), -(-max_keys // MIN_CHUNK))


def scratch_slots(max_rows: int, q_heads: int, max_context: int) -> int:
    """The most (row, head, split) merge slots any call up to `max_rows` rows needs."""
    slots = 0
    for seq_len in range(1, max_rows + 1):
        rows = seq_len * q_heads
        splits = most_splits(max_context, rows)
        if splits > 1:
            slots = max(slots, rows * splits)
    if max_context >= CPU_SPLIT_MIN_KEYS:  # the CPU kernel's decode splits
        slots = max(slots, q_heads * CPU_DECODE_SPLITS)
    return slots
