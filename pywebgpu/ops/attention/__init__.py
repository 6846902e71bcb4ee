"""Attention over a KV cache, from ExecuTorch's Llama export (kernels: wgsl/attention/).

- `sdpa_with_kv_cache`: what the Vulkan partitioner fuses update_cache + custom_sdpa
  into. Writes this call's k/v into the caches at rows [input_pos, input_pos + S), then
  attends causally over [0, input_pos + S), in the same dispatch.
- `update_cache` (alone): a buffer copy of the new rows into the cache.
- `llama.custom_sdpa` (when left unfused): the attention alone, over the caches.

The KV caches are constants of the graph (zero-initialised module buffers) that these
ops update in place, so they keep their contents from one execution to the next.
Tensors are [1, S, heads, head_dim] and caches [1, max_context, kv_heads, head_dim];
query head h reads kv head h // (q_heads / kv_heads) (grouped-query attention).

The kernels (selection.py picks one per call):
- on GPUs, a prefill's many rows run `tiled`: a workgroup per block of rows and kv head,
  whose (row, head) pairs share each block of keys and values staged in workgroup memory;
- otherwise (decode, short chunks), rows too few to fill the GPU run `whole_row`, one
  larger workgroup walking all of a row's keys, while they are short enough; past that
  `split` spreads a row's keys over several workgroups and `combine` merges them;
- on CPU adapters with subgroups, `cpu`: a quad of threads per row (or rows) and up to
  four heads of one kv head walks all the row's keys with no barriers, after buffer
  copies have put this call's keys and values into the caches (in a decode step with
  RoPE fused in, the quad itself stores the new ones); a decode row of many keys is split
  over two quads per kv head and merged by `cpu_combine`.
The kernels read the position on the GPU (the SymInt's buffer), and the grids have room
for more keys than the present ones: a decode step whose keys still fit changes nothing
here, so the runtime does not resize the op (`gpu_int_ranges`).

A decode step's attention also applies the rotary embedding to q and the new key, which
it reads before their RoPE op (fused into it: `RopeSdpaWithKvCache`).

Where the kernels for GPUs run, an f16 program's caches (ExecuTorch's force_fp16) stay
float16 if sdpa_with_kv_cache alone writes them and rows are whole vec4s
(`float16_constants`): half the memory and the reads of f32 caches; every key and value is
then attended as the cache holds it, this call's new ones rounded to float16 too, as the
program's own f16 tensors would be. Elsewhere they are widened to float32: on CPU
adapters unpacking float16 costs more than the reads it saves.
"""

from .causal import CausalAttention
from .sdpa import CustomSdpa, RopeSdpaWithKvCache, SdpaWithKvCache
from .update_cache import UpdateCache

__all__ = ["CausalAttention", "CustomSdpa", "RopeSdpaWithKvCache", "SdpaWithKvCache", "UpdateCache"]
