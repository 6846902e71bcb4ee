"""Rewrites of a graph's op list that cut dispatches, made before memory planning and
build. A rewrite keeps every op index: ops folded into another become no-ops that name
no values (so their intermediate tensors get no memory), and the fused op takes the
place of the last op of its pattern, where all its inputs exist. Each pattern is a
small named match (a dataclass) found over the ops, then applied.

- offsets (offsets.py): an exact GGUF linear's offset term beside its 4-bit linear,
  add(linear_q4gsw(x), linear(sum(view(x, [..., G, gs]), [-1]), C)), becomes the 4-bit
  linear with offsets C [N, G] (ops.linear.q4gsw); every later pattern keeps them.
- RoPE tables at the position (rope.py): Llama slices its cos and sin tables at rows
  [input_pos, input_pos + S) for apply_rotary_emb. Where only RoPE ops read the slices
  (through views), those read the whole tables from the position on the GPU
  (`RotaryEmbAtPosition`), so that a decode step resizes none of them; the op takes the
  slices' row count as a SymInt: where the slices end at start + a SymInt (Llama's
  input_pos + seq_len), that one, else the host's end - start. A decode step then
  resizes only the ops reading the position, no arithmetic.
- RoPE · attention (rope.py): a RoPE op at the position whose outputs only an
  sdpa_with_kv_cache reads as q and k becomes part of it (`RopeSdpaWithKvCache`), which
  in decode steps rotates q and k as it reads them: one dispatch fewer per layer.
- silu · mul (linears.py): torch exports the Llama MLP's `F.silu(gate) * up` as
  sigmoid, mul, mul; the three become one `SiluMul`.
- linear · add (linears.py): the residual add that ends each Llama block's attention and
  MLP, h = x + linear(...), moves into the linear's store (`LinearQ4gswResidual`).
- the MLP (linears.py): gate and up projections of one x, read only by a SiluMul, become
  one linear (`LinearQ4gswConcat`) and the SiluMul's dispatch goes. With the kernels for
  GPUs the linear writes gate and up side by side and the down projection reads them as
  silu(gate) * up, once per workgroup; the kernels for CPU adapters would compute that
  in every thread, so there the fused linear writes silu(gate) * up itself.
- linears of one x (attention's q, k and v projections; linears.py): one dispatch
  writing each output to its own tensor, up to LinearQ4gswConcat.MAX_OUTPUTS.
- rms_norm · linear (linears.py): an RMSNorm whose output only a linear reads as x
  becomes one op (`RmsNormLinear`), one dispatch where the linear runs a GEMV (decode;
  on CPU adapters up to ops.linear.plan.GEMV_NORM_MAX_N outputs), applying the norm as it
  reads x. The final norm before the LM head, which f16 exports reach through a clone,
  too: a plain linear reading it through views that keep its rows reads it directly.
- SymInt arithmetic whose result nothing reads any more is dropped (rope.py).
"""

from __future__ import annotations

from .linears import fuse_linear_residual, fuse_mlp, fuse_rms_norm_linear, fuse_shared_input_linears, fuse_silu_mul
from .matching import constant_aliases, readers
from .offsets import fuse_linear_offsets
from .rope import fold_unread_symints, fuse_rope_attention, fuse_rope_tables

# In this order: each pattern matches ops the ones before made.
PASSES = (
    fuse_linear_offsets,
    fuse_rope_tables,
    fuse_rope_attention,
    fuse_silu_mul,
    fuse_linear_residual,
    fuse_mlp,
    fuse_shared_input_linears,
    fuse_rms_norm_linear,
    fold_unread_symints,
)


def fuse(graph) -> None:
    """Apply every rewrite to `graph.ops` (a GraphRuntime before build)."""
    for rewrite in PASSES:
        rewrite(graph)


__all__ = ["PASSES", "constant_aliases", "fuse", "readers"]
