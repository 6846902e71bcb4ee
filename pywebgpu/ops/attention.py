"""Attention over a KV cache, from ExecuTorch's Llama export (kernels: wgsl/sdpa.wgsl,
wgsl/sdpa_tiled.wgsl and wgsl/sdpa_combine.wgsl for GPUs, wgsl/sdpa_cpu.wgsl for CPU
adapters).

- `sdpa_with_kv_cache`: what the Vulkan partitioner fuses update_cache + custom_sdpa
  into. Writes this call's k/v into the caches at rows [input_pos, input_pos + S), then
  attends causally over [0, input_pos + S), in the same dispatch.
- `update_cache` (alone): a buffer copy of the new rows into the cache.
- `llama.custom_sdpa` (when left unfused): the attention alone, over the caches.

The KV caches are constants of the graph (zero-initialised module buffers) that these
ops update in place, so they keep their contents from one execution to the next.
Tensors are [1, S, heads, head_dim] and caches [1, max_context, kv_heads, head_dim];
query head h reads kv head h // (q_heads / kv_heads) (grouped-query attention).

On GPUs a prefill of TILED_MIN_ROWS rows or more runs sdpa_tiled.wgsl where it can: a
workgroup per block of rows and kv head, whose pairs of (row, head) share each block of
keys and values staged in workgroup memory. Otherwise (decode, short chunks), when there
are too few rows and heads to fill the GPU, a row of up to WHOLE_ROW_MAX_KEYS keys is one
larger workgroup that walks them all (`whole_row`); past that its keys are split over
several workgroups and a second, small dispatch merges the splits. The kernels read the
position on the GPU (the SymInt's buffer), and the grid has room for more keys than the
present ones: a decode step whose keys still fit it changes nothing here, so the runtime
does not resize the op (`gpu_int_ranges`). On CPU
adapters with subgroups (head dims up to 64, multiples of 4), a quad of threads per row
(two or four rows in calls of several rows: four once the graph's upgrades are built)
and up to four heads of one kv head walks all the row's keys with no barriers (which
cost more than the arithmetic there), after buffer
copies have put this call's keys and values into the caches (in a decode step, the quad
itself stores the new ones); a decode row of many keys is split over two quads per kv
head and merged.

A decode step's attention also applies the rotary embedding to q and the new key, which
it reads before their RoPE op (fused into it: `RopeSdpaWithKvCache`).

Where the kernels for GPUs run, an f16 program's caches (ExecuTorch's force_fp16) stay
float16 if sdpa_with_kv_cache alone writes them and rows are whole vec4s
(`float16_constants`): half the memory and the reads of f32 caches. sdpa.wgsl (CACHE_F16)
then attends every key and value as the cache holds it, this call's new ones rounded to
float16 too, as the program's own f16 tensors would be. Elsewhere they are widened to
float32: on CPU adapters unpacking float16 costs more than the reads it saves
(SwiftShader, SmolLM2 at 1,000 keys: 126-129 against 120-123 ms per token).
"""

from __future__ import annotations

import array
import math
import struct
from functools import cache
from weakref import WeakKeyDictionary

from ..gpu import STORAGE_USAGE, linear_grid
from ..kernels import QUAD_DIRECTIVES, load_wgsl
from .registry import OpHandler, register

MAX_HEAD_DIM = 256  # sdpa.wgsl: 64 threads x 4 dims each
CPU_MAX_HEAD_DIM = 64  # sdpa_cpu.wgsl: a quad of threads x 16 dims each
CPU_QUAD_THREADS = 4  # sdpa_cpu.wgsl: a quad per query row and cpu_quad_heads heads
CPU_MAX_QUAD_HEADS = 4
CPU_WORKGROUP_SIZE = 4  # sdpa_cpu.wgsl: one quad, so that decode's few quads spread over the cores
# Query rows per quad in calls of several rows (sdpa_cpu.wgsl's QUAD_ROWS): each key and
# value a quad loads (a gather, lane by lane) serves QUAD_ROWS times the (row, head)
# pairs. Natively on SwiftShader, SmolLM2, the attention of a 511-token prefill: 2 rows
# 1.3x faster than 1, 4 rows 1.35-1.5x faster again (49.5 -> 34-36 ms a layer; in the
# page a 512-token prefill 1.07-1.10x faster, a 128-token one 1.04x). But its pipeline
# compiles in ~1.1 s against ~0.6 for 2 rows, and Chromium compiles ~1.5 pipelines at a
# time on 2 cores: built with the graph, it made a model's load ~0.3 s longer there. So
# the graph builds the 2-row kernel and the 4-row one after it (build_upgrades). An
# earlier 4-row kernel, which gave the last rows' own keys steps of their own, took ~5 s
# to compile.
CPU_QUAD_ROWS = 2
CPU_UPGRADE_QUAD_ROWS = 4
# A decode row of at least CPU_SPLIT_MIN_KEYS keys is split into CPU_DECODE_SPLITS even
# shares, each a quad's, merged by sdpa_cpu.wgsl's `combine`: a decode step has a quad
# per kv head only, too few for the cores to share out evenly (SmolLM2's 3 on 2 cores).
# SwiftShader, SmolLM2, per layer at 1,024 keys: 0.61 ms, split 0.50 (3 splits 0.56, 4
# 0.54) and 0.036 for the merge (its dispatch, mostly): a decode step at 1,000 keys 1.02-
# 1.03x faster. At fewer keys the merge costs about what the balance saves.
CPU_DECODE_SPLITS = 2
CPU_SPLIT_MIN_KEYS = 512
CPU_COMBINE_WORKGROUP_SIZE = 64  # sdpa_cpu.wgsl's combine
MAX_CHUNK = 1024  # keys per workgroup: their scores are held in workgroup memory
MIN_CHUNK = 64  # one key per thread
MAX_SPLITS = 256  # sdpa_combine.wgsl: one rescale factor per split in workgroup memory
MAX_KEYS = MAX_CHUNK * MAX_SPLITS
# Workgroups to aim for when splitting keys: enough to occupy a large GPU (an H100 has
# 132 multiprocessors); beyond it splits only add merging work.
TARGET_WORKGROUPS = 1024
# Rows that would be split run sdpa.wgsl's whole_row up to this many keys (at most
# MAX_CHUNK): one dispatch instead of the split pass and the combine. Natively on an H200
# (`python -m devtools.attention_probe`), µs per layer, whole_row vs split + combine, the
# 1B's 32 heads: 21 vs 35 at 128 keys, 29 vs 37 at 512, 39 vs 39 at 1,024, 60 vs 48 at
# 2,048; SmolLM2's 9: 22 vs 34, 26 vs 34, 33 vs 36, 53 vs 29.
WHOLE_ROW_MAX_KEYS = 1024
# A prefill of at least TILED_MIN_ROWS rows runs sdpa_tiled.wgsl where it can (GPUs with
# subgroups, head dims that are multiples of 4 up to TILED_MAX_HEAD_DIM, at most
# TILED_PAIRS query heads per kv head): TILED_PAIRS (row, head) pairs per workgroup share
# each block of keys and values they stage, where `main` and `whole_row` read every key
# once per row and head. H200 natively (`python -m devtools.attention_probe`), µs per
# layer from position 0, the best of those two against tiled, the 1B's heads: 28.6 / 23.8
# at 32 rows, 51 / 28 at 64, 127 / 36 at 128, 1,350 / 139 at 511; SmolLM2's: 20.2 / 25.4,
# 38.4 / 31.9, 63 / 40, 419 / 90; Llama-3.2-3B's (24 over 8, head dim 128: blocks of 16
# keys): 41 / 36, 65-70 / 43-49, 171-177 / 53-58, 1,921-1,958 / 245-249.
TILED_PAIRS = 32
TILED_MAX_HEAD_DIM = 128  # sdpa_tiled.wgsl's staged blocks: 32 keys up to head dim 64, 16 past it
TILED_MIN_ROWS = 64


@cache
def tiled_source() -> str:
    """sdpa_tiled.wgsl's module (one string object: Device.compute_pipeline keys its cache
    by the source)."""
    return QUAD_DIRECTIVES + load_wgsl("sdpa") + load_wgsl("sdpa_tiled")


def cpu_quad_heads(q_heads: int, kv_heads: int) -> int:
    """Query heads sdpa_cpu.wgsl's quads each take: the most, up to CPU_MAX_QUAD_HEADS,
    that divide the heads sharing a kv head (every key a quad loads serves them all)."""
    group = q_heads // kv_heads
    return max(n for n in range(1, CPU_MAX_QUAD_HEADS + 1) if group % n == 0)


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


# Per graph: the RoPE tables packed as (cos, sin) pairs for the kernel (made once, shared
# by every layer's attention), and the small buffer standing in for them where the
# kernel applies no RoPE (its binding must be filled all the same).
_rope_tables: WeakKeyDictionary = WeakKeyDictionary()


def _rope_table(graph, cos, sin):
    """The buffer of constants `cos` and `sin` ([rows, D/2] each) interleaved as pairs;
    with cos None, the stand-in."""
    tables = _rope_tables.setdefault(graph, {})
    key = None if cos is None else (cos.id, sin.id)
    if key not in tables:
        if cos is None:
            tables[key] = graph.device.create_buffer(16, STORAGE_USAGE, label="sdpa.no_rope_table")
        else:
            halves = []
            for table in (cos, sin):
                values = array.array("f")
                values.frombytes(graph.constant_bytes(table))
                halves.append(values)
            pairs = array.array("f", bytes(8 * len(halves[0])))
            pairs[0::2], pairs[1::2] = halves
            tables[key] = graph.device.create_buffer_with_data(pairs, label="sdpa.rope_table")
    return tables[key]


def cpu_quad_rows(kernel: str) -> int:
    """The query rows a quad of one of CausalAttention.cpu_rows_kernels (by its name)."""
    return int(kernel.removeprefix("sdpa_cpu_rows"))


class CausalAttention(OpHandler):
    """The attention shared by sdpa_with_kv_cache and custom_sdpa: q, caches, input_pos
    and the options (attn_mask, dropout_p, is_causal, scale) at the given arg positions."""

    RESIZED = ("input_pos", "kernel", "rows", "splits", "tiled", "whole_row")

    update_cache = False
    # Whether a decode step may run sdpa_cpu.wgsl's one-row kernel (not where RoPE is fused
    # in: RopeSdpaWithKvCache's steps run the rotating kernel).
    decodes_unrotated = True

    def setup_attention(self, q, k_cache, v_cache, input_pos, attn_mask, dropout_p, is_causal, scale, out):
        self.q, self.k_cache, self.v_cache, self.out = (self.tensor(i) for i in (q, k_cache, v_cache, out))
        self.input_pos_arg = input_pos
        self.int_arg(input_pos)  # an Int or SymInt, checked now rather than at run time
        if self.value(attn_mask) is not None:
            self.fail("an explicit attn_mask is not supported (only causal attention)")
        if self.value(dropout_p) is not None and self.float_arg(dropout_p) != 0.0:
            self.fail("dropout_p must be 0")
        if self.value(is_causal) is not None and self.value(is_causal) is not True:
            self.fail("only causal attention (is_causal=True) is supported")
        for tensor in (self.q, self.k_cache, self.v_cache, self.out):
            if tensor.dtype != "float32":
                self.fail(f"{tensor.label} is {tensor.dtype}; only float32 is supported")
        if len(self.q.max_sizes) != 4 or self.q.max_sizes[0] != 1:
            self.fail(f"q is {list(self.q.max_sizes)}; expected [1, S, heads, head_dim]")
        cache_sizes = self.k_cache.max_sizes
        if len(cache_sizes) != 4 or cache_sizes[0] != 1 or self.v_cache.max_sizes != cache_sizes:
            self.fail(f"caches {list(cache_sizes)} / {list(self.v_cache.max_sizes)}: expected equal [1, context, kv_heads, head_dim]")
        _, self.max_context, self.kv_heads, self.head_dim = cache_sizes
        self.q_heads = self.q.max_sizes[2]
        if self.q.max_sizes[3] != self.head_dim:
            self.fail(f"q's head dim {self.q.max_sizes[3]} differs from the caches' {self.head_dim}")
        if not 0 < self.head_dim <= MAX_HEAD_DIM:
            self.fail(f"head dim {self.head_dim} is outside the supported 1..{MAX_HEAD_DIM}")
        if self.max_context > MAX_KEYS:
            self.fail(f"a context of {self.max_context} is above the supported {MAX_KEYS}")
        if self.kv_heads == 0 or self.q_heads % self.kv_heads:
            self.fail(f"{self.q_heads} query heads do not divide into {self.kv_heads} kv heads")
        self.scale = 1.0 / math.sqrt(self.head_dim) if self.value(scale) is None else self.float_arg(scale)

    def float16_constants(self):
        caches = (self.k_cache, self.v_cache)
        if self.kernel_set != "gpu" or not self.update_cache or self.head_dim % 4:
            return set()
        return {c.id for c in caches} if all(c.constant_dtype == "float16" for c in caches) else set()

    def scratch_bytes(self) -> int:
        """The largest merge scratch any live size can need: (max, sum, head_dim weighted
        sums) per (row, head, split)."""
        slots = 0
        for seq_len in range(1, self.q.max_sizes[1] + 1):
            rows = seq_len * self.q_heads
            splits = most_splits(self.max_context, rows)
            if splits > 1:
                slots = max(slots, rows * splits)
        if self.max_context >= CPU_SPLIT_MIN_KEYS:  # sdpa_cpu.wgsl's decode splits
            slots = max(slots, self.q_heads * CPU_DECODE_SPLITS)
        return 4 * slots * (self.head_dim + 2)

    def check_new_rows(self, new, label):
        """`new` (this call's k or v) must be [1, S, kv_heads, head_dim] like the caches."""
        sizes = new.max_sizes
        if new.dtype != "float32" or len(sizes) != 4 or sizes[0] != 1 or sizes[2:] != (self.kv_heads, self.head_dim):
            self.fail(f"{label} is {new.dtype}{list(sizes)}; expected float32[1, S, {self.kv_heads}, {self.head_dim}]")

    def rope_bindings(self) -> tuple:
        """(the RoPE table's buffer, its first row's uniform) for sdpa.wgsl with ROPE."""
        raise NotImplementedError

    async def sdpa_kernels(self, q, k, v, rope: bool = False):
        """sdpa.wgsl's (pipeline, bind group) pairs of `main` and `whole_row` over these q,
        k and v (with `rope`, before their rotary embedding, which the kernels apply)."""
        table, first_row = self.rope_bindings() if rope else (_rope_table(self.graph, None, None), self.position)
        constants = {
            "HEAD_DIM": self.head_dim, "UPDATE_CACHE": int(self.update_cache), "ROPE": int(rope), "CACHE_F16": int(self.cache_f16),
        }  # fmt: skip
        buffers = [self.out, self.partials, q, k, v, self.k_cache, self.v_cache, self.params, self.position, table, first_row]
        buffers = [getattr(b, "buffer", b) for b in buffers]
        kernels = []
        for entry_point in ("main", "whole_row"):
            pipeline = await self.make_pipeline("sdpa", constants, entry_point)
            kernels.append((pipeline, self.graph.device.bind_group(pipeline, buffers)))
        return tuple(kernels)

    def runs_cpu_kernel(self) -> bool:
        """Whether this op runs sdpa_cpu.wgsl (CPU adapters, where it can); else sdpa.wgsl.
        Fixed at load, as the kernel set is: only that kernel's pipelines are built."""
        usable = self.head_dim % 4 == 0 and self.head_dim <= CPU_MAX_HEAD_DIM
        return self.kernel_set == "cpu" and usable and "subgroups" in self.graph.device.features

    def can_tile(self) -> bool:
        """Whether this op's prefills can run sdpa_tiled.wgsl (fixed at load)."""
        return (
            self.kernel_set == "gpu"
            and "subgroups" in self.graph.device.features
            and self.head_dim % 4 == 0
            and self.head_dim <= TILED_MAX_HEAD_DIM
            and self.q_heads // self.kv_heads <= TILED_PAIRS
            and self.q.max_sizes[1] >= TILED_MIN_ROWS
        )

    async def make_tiled_kernel(self, q, k, v):
        """sdpa_tiled.wgsl's (pipeline, bind group) over q, k and v (no RoPE)."""
        constants = {"HEAD_DIM": self.head_dim, "UPDATE_CACHE": int(self.update_cache), "CACHE_F16": int(self.cache_f16)}
        table = _rope_table(self.graph, None, None)
        # sdpa.wgsl's bindings but for the partials (the kernel merges nothing).
        buffers = {
            0: self.out, 2: q, 3: k, 4: v, 5: self.k_cache, 6: self.v_cache, 7: self.params, 8: self.position, 9: table,
            10: self.position,
        }  # fmt: skip
        device = self.graph.device
        pipeline = await device.compute_pipeline(tiled_source(), label=f"sdpa_tiled#{self.index}", entry_point="tiled", constants=constants)
        return pipeline, device.bind_group(pipeline, {i: getattr(b, "buffer", b) for i, b in buffers.items()})

    async def build_attention(self, q, k, v):
        device = self.graph.device
        self.position = self.graph.int_on_gpu(self.args[self.input_pos_arg])
        self.params = self.params_buffer(32)
        self.cache_f16 = self.k_cache.dtype == "float16"  # kept so by the runtime (float16_constants)
        self.on_cpu = self.runs_cpu_kernel()
        self.partials = self.graph.scratch
        if self.on_cpu:
            self.quad_heads = cpu_quad_heads(self.q_heads, self.kv_heads)
            self.cpu_kernel = await self.sdpa_cpu_kernel(q) if self.decodes_unrotated else None
            # Calls of several rows: sdpa_cpu.wgsl's kernels by rows a quad, named
            # "sdpa_cpu_rows{QUAD_ROWS}", over `q` (rows_q: the upgrade's reads it too).
            self.rows_q = q
            self.cpu_rows_kernels = {f"sdpa_cpu_rows{CPU_QUAD_ROWS}": await self.sdpa_cpu_kernel(q, quad_rows=CPU_QUAD_ROWS)}
            self.combine_pipeline = await self.make_pipeline("sdpa_cpu", {"HEAD_DIM": self.head_dim}, "combine")
            buffers = {0: self.out.buffer, 1: self.partials, 7: self.params}
            self.combine_group = device.bind_group(self.combine_pipeline, buffers)
            return
        self.kernels = await self.sdpa_kernels(q, k, v)
        self.tiled_kernel = await self.make_tiled_kernel(q, k, v) if self.can_tile() else None
        self.combine_pipeline = await self.make_pipeline("sdpa_combine", {"HEAD_DIM": self.head_dim})
        self.combine_group = device.bind_group(self.combine_pipeline, [self.out.buffer, self.partials, self.params, self.position])

    async def build_upgrades(self) -> bool:
        if not self.on_cpu or self.q.max_sizes[1] == 1:
            return False
        kernel = await self.sdpa_cpu_kernel(self.rows_q, quad_rows=CPU_UPGRADE_QUAD_ROWS)
        self.cpu_rows_kernels[f"sdpa_cpu_rows{CPU_UPGRADE_QUAD_ROWS}"] = kernel
        return True

    async def sdpa_cpu_kernel(self, q, rope: bool = False, quad_rows: int = 1):
        """sdpa_cpu.wgsl's (pipeline, bind group) over `q`, `quad_rows` query rows per
        quad; with `rope`, the ROPE_DECODE variant (RopeSdpaWithKvCache's decode step),
        which also reads this call's k and v."""
        table, first_row = self.rope_bindings() if rope else (_rope_table(self.graph, None, None), self.position)
        new_k, new_v = (self.k, self.v) if rope else (q, q)  # stand-ins: read only with ROPE_DECODE
        constants = {"HEAD_DIM": self.head_dim, "QUAD_HEADS": self.quad_heads, "QUAD_ROWS": quad_rows, "ROPE_DECODE": int(rope)}
        pipeline = await self.make_pipeline("sdpa_cpu", constants)
        buffers = {
            0: self.out.buffer, 1: self.partials, 2: q.buffer, 3: new_k.buffer, 4: new_v.buffer, 5: self.k_cache.buffer,
            6: self.v_cache.buffer, 7: self.params, 8: self.position, 9: table, 10: first_row,
        }  # fmt: skip
        return pipeline, self.graph.device.bind_group(pipeline, buffers)

    def resize_attention(self):
        """Set the output size, the key split and the parameters, and the positions that
        the recording serves (the kernels read the position itself on the GPU)."""
        seq_len = self.q.sizes[1]
        input_pos = self.int_arg(self.input_pos_arg)
        keys = input_pos + seq_len
        if input_pos < 0 or keys > self.max_context:
            self.fail(f"positions [{input_pos}, {keys}) exceed the cache's {self.max_context}")
        self.set_sizes(self.out, self.q.sizes)
        self.whole_row = self.tiled = False
        position_id = self.args[self.input_pos_arg]
        if self.on_cpu:
            # The host copies this call's keys and values into the caches at the position
            # (RopeSdpaWithKvCache's decode step: the kernel does, see cpu_decode_positions).
            # The kernel shares the keys out evenly itself (no chunk).
            chunk, self.splits = 0, CPU_DECODE_SPLITS if seq_len == 1 and keys >= CPU_SPLIT_MIN_KEYS else 1
            self.gpu_int_ranges = {}
            # Several rows: the kernel of the most rows a quad built so far.
            self.kernel = "sdpa_cpu" if seq_len == 1 else max(self.cpu_rows_kernels, key=cpu_quad_rows)
        elif seq_len >= TILED_MIN_ROWS and self.tiled_kernel is not None:
            # The kernel walks the keys up to the position it reads: every position serves.
            self.tiled = True
            chunk, self.splits = 0, 1
            self.gpu_int_ranges = {position_id: (0, self.max_context - seq_len)}
        elif (few_rows := split_keys(WHOLE_ROW_MAX_KEYS, seq_len * self.q_heads)[1] > 1) and keys <= WHOLE_ROW_MAX_KEYS:
            # Rows the split grid would spread over workgroups: whole_row while it is faster.
            self.whole_row = True
            chunk, self.splits = MAX_CHUNK, 1
            # Positions whose keys fit the cache too: past it, a resize refuses them.
            self.gpu_int_ranges = {position_id: (0, min(WHOLE_ROW_MAX_KEYS, self.max_context) - seq_len)}
        else:
            chunk, self.splits, most_keys = split_grid(keys, seq_len * self.q_heads, self.max_context)
            # Few rows go back to whole_row when their keys fall to WHOLE_ROW_MAX_KEYS.
            lowest = WHOLE_ROW_MAX_KEYS - seq_len + 1 if few_rows else 0
            self.gpu_int_ranges = {position_id: (lowest, most_keys - seq_len)}
        self.write_params(
            self.params, struct.pack("<5If", seq_len, self.q_heads, self.kv_heads, chunk, self.splits, self.scale)
        )
        self.rows = seq_len
        self.input_pos = input_pos

    def record(self, recorder):
        if not self.rows:
            return
        if self.on_cpu:
            if self.update_cache:
                self.copy_new_rows(recorder, self.k)
            self.dispatch_sdpa_cpu(recorder, self.cpu_kernel if self.rows == 1 else self.cpu_rows_kernels[self.kernel])
            return
        self.dispatch_sdpa(recorder, self.kernels)

    def copy_new_rows(self, recorder, k):
        """Record copies of this call's keys (`k`) and values into cache rows [input_pos,
        input_pos + S), where sdpa_cpu.wgsl reads them."""
        row_bytes = self.kv_heads * self.head_dim * 4
        for new, cache in ((k, self.k_cache), (self.v, self.v_cache)):
            recorder.copy(new.buffer, cache.buffer, self.rows * row_bytes, dst_offset=self.input_pos * row_bytes)

    def dispatch_sdpa_cpu(self, recorder, kernel):
        """Record sdpa_cpu.wgsl's `kernel`: a decode step's, or with several rows the one
        resize chose (self.kernel)."""
        quad_rows = 1 if self.rows == 1 else cpu_quad_rows(self.kernel)
        threads = self.splits * -(-self.rows // quad_rows) * self.q_heads // self.quad_heads * CPU_QUAD_THREADS
        recorder.dispatch(*kernel, *linear_grid(threads, CPU_WORKGROUP_SIZE))
        if self.splits > 1:
            outputs = self.rows * self.q_heads * self.head_dim // 4  # a thread per vec4
            recorder.dispatch(self.combine_pipeline, self.combine_group, *linear_grid(outputs, CPU_COMBINE_WORKGROUP_SIZE))

    def cpu_decode_positions(self) -> tuple[int, int]:
        """The positions a decode step's sdpa_cpu.wgsl recording serves (it reads the
        position on the GPU): those with as many key splits as this one's."""
        if self.splits > 1:
            return CPU_SPLIT_MIN_KEYS - 1, self.max_context - 1
        return 0, min(CPU_SPLIT_MIN_KEYS - 2, self.max_context - 1)

    def dispatch_sdpa(self, recorder, kernels):
        """Record the attention with `kernels` (sdpa_kernels' pairs) at the live sizes."""
        split_kernel, whole_row_kernel = kernels
        if self.tiled:
            rows_per_workgroup = TILED_PAIRS // (self.q_heads // self.kv_heads)
            recorder.dispatch(*self.tiled_kernel, self.kv_heads, -(-self.rows // rows_per_workgroup))
            return
        if self.whole_row:
            recorder.dispatch(*whole_row_kernel, self.q_heads, self.rows)
            return
        recorder.dispatch(*split_kernel, self.q_heads, self.rows, self.splits)
        if self.splits > 1:
            recorder.dispatch(self.combine_pipeline, self.combine_group, self.q_heads, self.rows)


@register("sdpa_with_kv_cache.default")
class SdpaWithKvCache(CausalAttention):
    """Args: q, k, v, k_cache, v_cache, input_pos (SymInt), seq_len (unused: a dummy Int),
    attn_mask, dropout_p, is_causal, scale, out."""

    update_cache = True

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 12:
            self.fail(f"expected 12 arguments, got {len(args)}")
        self.setup_attention(0, 3, 4, 5, 7, 8, 9, 10, 11)
        self.k, self.v = self.tensor(1), self.tensor(2)
        self.check_new_rows(self.k, "k")
        self.check_new_rows(self.v, "v")

    async def build(self):
        await self.build_attention(self.q, self.k, self.v)

    def resize(self):
        if self.k.sizes[1] != self.q.sizes[1] or self.v.sizes[1] != self.q.sizes[1]:
            self.fail(f"q, k and v differ in length: {self.q.sizes[1]}, {self.k.sizes[1]}, {self.v.sizes[1]}")
        self.resize_attention()


class RopeSdpaWithKvCache(SdpaWithKvCache):
    """sdpa_with_kv_cache with the RotaryEmbAtPosition op before it (ops/rope.py), made by
    fusion (runtime/fusion.py) for head dims that are multiples of 4. A decode step (one
    row) is one dispatch that rotates q and the new key as it reads them and stores the
    rotated key: on GPUs one dispatch fewer per layer and token; on CPU adapters
    (sdpa_cpu.wgsl's ROPE_DECODE) also no copies of the new key and value into the
    caches, and nothing to resize or re-record as the position moves. Longer calls run
    the RoPE op's own dispatch, then attention over its outputs: there every new key is
    read by every row, and rotating each read would cost more than the dispatch. Reads q
    and k as the RoPE op did, and the RoPE tables (constants) packed into pairs."""

    decodes_unrotated = False

    def __init__(self, graph, index, name, rope, sdpa):
        args = (rope.xq.id, rope.xk.id, *sdpa.args[2:])
        super().__init__(graph, index, name, args)
        if self.head_dim % 4:
            self.fail(f"head dim {self.head_dim}: RoPE inside attention needs a multiple of 4")
        self.rope = rope
        # Every value it reads or writes, for the runtime's tracking and memory plan.
        self.args = (*args, *rope.args[2:])

    def rope_bindings(self):
        return _rope_table(self.graph, self.rope.cos, self.rope.sin), self.graph.int_on_gpu(self.rope.start_id)

    async def build(self):
        await self.rope.build()
        await self.build_attention(self.rope.xq_out, self.rope.xk_out, self.v)
        if self.on_cpu:
            self.rotating_kernel = await self.sdpa_cpu_kernel(self.q, rope=True)
        else:
            self.rotating_kernels = await self.sdpa_kernels(self.q, self.k, self.v, rope=True)

    def resize(self):
        super().resize()
        if self.rows > 1:
            self.rope.resize()  # its checks, its outputs' sizes and parameters
        else:
            self.rope.check_tables(self.rows, self.head_dim // 2)
        ranges = dict(self.gpu_int_ranges)
        if self.on_cpu and self.rows == 1:
            # The rotating kernel reads the position on the GPU, and its recording serves
            # the positions with as many key splits (resize_attention checked this one).
            ranges[self.args[self.input_pos_arg]] = self.cpu_decode_positions()
        for value_id, (low, high) in self.rope.gpu_int_ranges.items():
            if value_id in ranges:  # one SymInt read as both positions: what both serve
                low, high = max(low, ranges[value_id][0]), min(high, ranges[value_id][1])
            ranges[value_id] = (low, high)
        self.gpu_int_ranges = ranges

    def record(self, recorder):
        if not self.rows:
            return
        if self.rows > 1:
            self.rope.record(recorder)
        if self.on_cpu:
            if self.rows == 1:
                self.dispatch_sdpa_cpu(recorder, self.rotating_kernel)
            else:
                self.copy_new_rows(recorder, self.rope.xk_out)
                self.dispatch_sdpa_cpu(recorder, self.cpu_rows_kernels[self.kernel])
        elif self.rows == 1:
            self.dispatch_sdpa(recorder, self.rotating_kernels)
        else:
            self.dispatch_sdpa(recorder, self.kernels)


@register("llama.custom_sdpa.default")
class CustomSdpa(CausalAttention):
    """Args: q, k_cache, v_cache, input_pos (SymInt), attn_mask, dropout_p, is_causal,
    scale, out. The caches already hold this call's rows (update_cache ran before)."""

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 9:
            self.fail(f"expected 9 arguments, got {len(args)}")
        self.setup_attention(0, 1, 2, 3, 4, 5, 6, 7, 8)

    async def build(self):
        # The kernel's k/v bindings are read only when keys lie past the cached ones,
        # which never happens here; q stands in for them (a read-only alias is valid).
        await self.build_attention(self.q, self.q, self.q)

    def resize(self):
        self.resize_attention()


@register("update_cache.default")
class UpdateCache(OpHandler):
    """Args: value [1, S, heads, head_dim], cache [1, context, heads, head_dim],
    input_pos (SymInt), out. `out` is a placeholder the exporter may plan into memory
    that other tensors use: it is never written."""

    RESIZED = ("offset", "size")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments (value, cache, input_pos, out), got {len(args)}")
        self.src, self.cache = self.tensor(0), self.tensor(1)
        self.int_arg(2)
        sizes = self.cache.max_sizes
        if len(sizes) != 4 or sizes[0] != 1 or len(self.src.max_sizes) != 4 or self.src.max_sizes[2:] != sizes[2:]:
            self.fail(f"value {list(self.src.max_sizes)} does not fit cache rows {list(sizes)}")
        if self.src.dtype != "float32" or self.cache.dtype != "float32":
            self.fail(f"value is {self.src.dtype} and the cache {self.cache.dtype}; only float32 is supported")
        self.row_bytes = sizes[2] * sizes[3] * self.cache.itemsize

    def resize(self):
        seq_len = self.src.sizes[1]
        position = self.int_arg(2)
        if position < 0 or position + seq_len > self.cache.max_sizes[1]:
            self.fail(f"positions [{position}, {position + seq_len}) exceed the cache's {self.cache.max_sizes[1]}")
        self.offset = position * self.row_bytes
        self.size = seq_len * self.row_bytes

    def record(self, recorder):
        if self.size:
            recorder.copy(self.src.buffer, self.cache.buffer, self.size, dst_offset=self.offset)
