"""The attention ops: sdpa_with_kv_cache, its fusion with the RoPE op before it, and
llama.custom_sdpa."""

from __future__ import annotations

from ..registry import register
from .causal import CausalAttention, rope_table
from .selection import cpu_decode_positions


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
    fusion (runtime/fusion/) for head dims that are multiples of 4. A decode step (one
    row) is one dispatch that rotates q and the new key as it reads them and stores the
    rotated key: on GPUs one dispatch fewer per layer and token; on CPU adapters
    (the CPU kernel's ROPE_DECODE) also no copies of the new key and value into the
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

    def host_constants(self) -> tuple:
        return (self.rope.cos, self.rope.sin)  # packed into pairs on the host (rope_table)

    def rope_bindings(self):
        return rope_table(self.graph, self.rope.cos, self.rope.sin), self.graph.int_on_gpu(self.rope.start_id)

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
            ranges[self.args[self.input_pos_arg]] = cpu_decode_positions(self.splits, self.max_context)
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
