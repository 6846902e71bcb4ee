"""CausalAttention: the attention shared by sdpa_with_kv_cache and custom_sdpa, which builds
the kernels selection.py allows, and dispatches the one it picks for each call."""

from __future__ import annotations

import array
import math
import struct
from functools import cache
from weakref import WeakKeyDictionary

from ...gpu import STORAGE_USAGE, linear_grid
from ...kernels import QUAD_DIRECTIVES, load_wgsl
from ..registry import OpHandler
from . import selection
from .selection import (
    CPU_COMBINE_WORKGROUP_SIZE,
    CPU_QUAD_ROWS,
    CPU_QUAD_THREADS,
    CPU_UPGRADE_QUAD_ROWS,
    CPU_WORKGROUP_SIZE,
    MAX_HEAD_DIM,
    MAX_KEYS,
    TILED,
    TILED_PAIRS,
    WHOLE_ROW,
    cpu_quad_rows,
    cpu_rows_kernel_name,
)


@cache
def tiled_source() -> str:
    """The tiled kernel's module (one string object: Device.compute_pipeline keys its cache
    by the source)."""
    return QUAD_DIRECTIVES + load_wgsl("attention/tiled")


# Per graph: the RoPE tables packed as (cos, sin) pairs for the kernels (made once, shared
# by every layer's attention), and the small buffer standing in for them where a kernel
# applies no RoPE (its binding must be filled all the same).
_rope_tables: WeakKeyDictionary = WeakKeyDictionary()


def rope_table(graph, cos, sin):
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


class CausalAttention(OpHandler):
    """The attention shared by sdpa_with_kv_cache and custom_sdpa: q, caches, input_pos
    and the options (attn_mask, dropout_p, is_causal, scale) at the given arg positions."""

    RESIZED = ("input_pos", "kernel", "rows", "splits", "variant")

    update_cache = False
    # Whether a decode step may run the CPU kernel's one-row variant (not where RoPE is
    # fused in: RopeSdpaWithKvCache's steps run the rotating kernel).
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
        return 4 * selection.scratch_slots(self.q.max_sizes[1], self.q_heads, self.max_context) * (self.head_dim + 2)

    def check_new_rows(self, new, label):
        """`new` (this call's k or v) must be [1, S, kv_heads, head_dim] like the caches."""
        sizes = new.max_sizes
        if new.dtype != "float32" or len(sizes) != 4 or sizes[0] != 1 or sizes[2:] != (self.kv_heads, self.head_dim):
            self.fail(f"{label} is {new.dtype}{list(sizes)}; expected float32[1, S, {self.kv_heads}, {self.head_dim}]")

    def rope_bindings(self) -> tuple:
        """(the RoPE table's buffer, its first row's uniform) for the kernels with ROPE."""
        raise NotImplementedError

    # --- build ---------------------------------------------------------------------
    async def build_attention(self, q, k, v):
        device = self.graph.device
        self.position = self.graph.int_on_gpu(self.args[self.input_pos_arg])
        self.params = self.params_buffer(32)
        self.cache_f16 = self.k_cache.dtype == "float16"  # kept so by the runtime (float16_constants)
        self.on_cpu = selection.runs_cpu_kernel(self.kernel_set, device.features, self.head_dim)
        self.partials = self.graph.scratch
        if self.on_cpu:
            self.quad_heads = selection.cpu_quad_heads(self.q_heads, self.kv_heads)
            self.cpu_kernel = await self.sdpa_cpu_kernel(q) if self.decodes_unrotated else None
            # Calls of several rows: the CPU kernels by their names (cpu_rows_kernel_name),
            # over `q` (rows_q: the upgrade's reads it too).
            self.rows_q = q
            self.cpu_rows_kernels = {cpu_rows_kernel_name(CPU_QUAD_ROWS): await self.sdpa_cpu_kernel(q, quad_rows=CPU_QUAD_ROWS)}
            self.combine_pipeline = await self.make_pipeline("attention/cpu_combine", {"HEAD_DIM": self.head_dim}, "combine")
            buffers = {0: self.out.buffer, 1: self.partials, 7: self.params}
            self.combine_group = device.bind_group(self.combine_pipeline, buffers)
            return
        self.kernels = await self.sdpa_kernels(q, k, v)
        tiles = selection.can_tile(
            self.kernel_set, device.features, self.head_dim, self.q_heads // self.kv_heads, self.q.max_sizes[1]
        )
        self.tiled_kernel = await self.make_tiled_kernel(q, k, v) if tiles else None
        self.combine_pipeline = await self.make_pipeline("attention/combine", {"HEAD_DIM": self.head_dim}, "combine")
        self.combine_group = device.bind_group(self.combine_pipeline, [self.out.buffer, self.partials, self.params, self.position])

    async def build_upgrades(self) -> bool:
        if not self.on_cpu or self.q.max_sizes[1] == 1:
            return False
        kernel = await self.sdpa_cpu_kernel(self.rows_q, quad_rows=CPU_UPGRADE_QUAD_ROWS)
        self.cpu_rows_kernels[cpu_rows_kernel_name(CPU_UPGRADE_QUAD_ROWS)] = kernel
        return True

    async def sdpa_kernels(self, q, k, v, rope: bool = False):
        """The (pipeline, bind group) pairs of the split and whole_row kernels over these q,
        k and v (with `rope`, before their rotary embedding, which the kernels apply)."""
        table, first_row = self.rope_bindings() if rope else (rope_table(self.graph, None, None), self.position)
        constants = {
            "HEAD_DIM": self.head_dim, "UPDATE_CACHE": int(self.update_cache), "ROPE": int(rope), "CACHE_F16": int(self.cache_f16),
        }  # fmt: skip
        buffers = [self.out, self.partials, q, k, v, self.k_cache, self.v_cache, self.params, self.position, table, first_row]
        buffers = [getattr(b, "buffer", b) for b in buffers]
        kernels = []
        for kernel in ("split", "whole_row"):
            pipeline = await self.make_pipeline(f"attention/{kernel}", constants, kernel)
            kernels.append((pipeline, self.graph.device.bind_group(pipeline, buffers)))
        return tuple(kernels)

    async def make_tiled_kernel(self, q, k, v):
        """The tiled kernel's (pipeline, bind group) over q, k and v (no RoPE)."""
        constants = {"HEAD_DIM": self.head_dim, "UPDATE_CACHE": int(self.update_cache), "CACHE_F16": int(self.cache_f16)}
        table = rope_table(self.graph, None, None)
        # The split kernel's bindings but for the partials (the kernel merges nothing).
        buffers = {
            0: self.out, 2: q, 3: k, 4: v, 5: self.k_cache, 6: self.v_cache, 7: self.params, 8: self.position, 9: table,
            10: self.position,
        }  # fmt: skip
        device = self.graph.device
        pipeline = await device.compute_pipeline(tiled_source(), label=f"attention/tiled#{self.index}", entry_point="tiled", constants=constants)
        return pipeline, device.bind_group(pipeline, {i: getattr(b, "buffer", b) for i, b in buffers.items()})

    async def sdpa_cpu_kernel(self, q, rope: bool = False, quad_rows: int = 1):
        """The CPU kernel's (pipeline, bind group) over `q`, `quad_rows` query rows per
        quad; with `rope`, the ROPE_DECODE variant (RopeSdpaWithKvCache's decode step),
        which also reads this call's k and v."""
        table, first_row = self.rope_bindings() if rope else (rope_table(self.graph, None, None), self.position)
        new_k, new_v = (self.k, self.v) if rope else (q, q)  # stand-ins: read only with ROPE_DECODE
        constants = {"HEAD_DIM": self.head_dim, "QUAD_HEADS": self.quad_heads, "QUAD_ROWS": quad_rows, "ROPE_DECODE": int(rope)}
        pipeline = await self.make_pipeline("attention/cpu", constants)
        buffers = {
            0: self.out.buffer, 1: self.partials, 2: q.buffer, 3: new_k.buffer, 4: new_v.buffer, 5: self.k_cache.buffer,
            6: self.v_cache.buffer, 7: self.params, 8: self.position, 9: table, 10: first_row,
        }  # fmt: skip
        return pipeline, self.graph.device.bind_group(pipeline, buffers)

    # --- resize and record ---------------------------------------------------------
    def resize_attention(self):
        """Set the output size, the kernel and key split and the parameters, and the
        positions that the recording serves (the kernels read the position on the GPU)."""
        seq_len = self.q.sizes[1]
        input_pos = self.int_arg(self.input_pos_arg)
        keys = input_pos + seq_len
        if input_pos < 0 or keys > self.max_context:
            self.fail(f"positions [{input_pos}, {keys}) exceed the cache's {self.max_context}")
        self.set_sizes(self.out, self.q.sizes)
        choice = selection.choose_kernel(
            seq_len, keys, self.q_heads, self.max_context, on_cpu=self.on_cpu, tiled=not self.on_cpu and self.tiled_kernel is not None
        )
        self.variant, self.splits = choice.kernel, choice.splits
        position_id = self.args[self.input_pos_arg]
        self.gpu_int_ranges = {} if choice.positions is None else {position_id: choice.positions}
        if self.on_cpu:
            # The host copies this call's keys and values into the caches at the position
            # (RopeSdpaWithKvCache's decode step: the kernel does). Several rows: the kernel
            # of the most rows a quad built so far.
            self.kernel = "sdpa_cpu" if seq_len == 1 else max(self.cpu_rows_kernels, key=cpu_quad_rows)
        self.write_params(
            self.params, struct.pack("<5If", seq_len, self.q_heads, self.kv_heads, choice.chunk, self.splits, self.scale)
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
        input_pos + S), where the CPU kernel reads them."""
        row_bytes = self.kv_heads * self.head_dim * 4
        for new, cache in ((k, self.k_cache), (self.v, self.v_cache)):
            recorder.copy(new.buffer, cache.buffer, self.rows * row_bytes, dst_offset=self.input_pos * row_bytes)

    def dispatch_sdpa_cpu(self, recorder, kernel):
        """Record the CPU `kernel`: a decode step's, or with several rows the one resize
        chose (self.kernel)."""
        quad_rows = 1 if self.rows == 1 else cpu_quad_rows(self.kernel)
        threads = self.splits * -(-self.rows // quad_rows) * self.q_heads // self.quad_heads * CPU_QUAD_THREADS
        recorder.dispatch(*kernel, *linear_grid(threads, CPU_WORKGROUP_SIZE))
        if self.splits > 1:
            outputs = self.rows * self.q_heads * self.head_dim // 4  # a thread per vec4
            recorder.dispatch(self.combine_pipeline, self.combine_group, *linear_grid(outputs, CPU_COMBINE_WORKGROUP_SIZE))

    def dispatch_sdpa(self, recorder, kernels):
        """Record the attention with `kernels` (sdpa_kernels' pairs) at the live sizes."""
        split_kernel, whole_row_kernel = kernels
        if self.variant == TILED:
            rows_per_workgroup = TILED_PAIRS // (self.q_heads // self.kv_heads)
            recorder.dispatch(*self.tiled_kernel, self.kv_heads, -(-self.rows // rows_per_workgroup))
            return
        if self.variant == WHOLE_ROW:
            recorder.dispatch(*whole_row_kernel, self.q_heads, self.rows)
            return
        recorder.dispatch(*split_kernel, self.q_heads, self.rows, self.splits)
        if self.splits > 1:
            recorder.dispatch(self.combine_pipeline, self.combine_group, self.q_heads, self.rows)
