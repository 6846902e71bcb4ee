"""Writing small llama.cpp GGUF files with the `gguf` package, in any tensor type.

`gguf.quants.quantize` covers Q4_0, Q4_1, Q8_0 (and F16); the K-quants it cannot write
are random blocks (every bit pattern of their scales and values is a valid block) with
realistic f16 super-block scales. Either way the values a reader sees are
`gguf.quants.dequantize` of the stored bytes, the reference the tests compare with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import torch

GGUF_TENSOR_NAMES = {
    "attention_norm.weight": "attn_norm.weight",
    "attention.wq.weight": "attn_q.weight",
    "attention.wk.weight": "attn_k.weight",
    "attention.wv.weight": "attn_v.weight",
    "attention.wo.weight": "attn_output.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "feed_forward.w1.weight": "ffn_gate.weight",
    "feed_forward.w3.weight": "ffn_up.weight",
    "feed_forward.w2.weight": "ffn_down.weight",
}

# K-quant type -> (block bytes, byte offsets of its f16 scales, their magnitude range).
_K_QUANT_BLOCKS = {
    "Q4_K": (144, (0, 2), (2e-4, 8e-4)),
    "Q5_K": (176, (0, 2), (1e-4, 4e-4)),
    "Q6_K": (210, (208,), (1e-4, 3e-4)),
}


def llama_gguf_writer(path: Path, geometry: dict, *, architecture: str = "llama"):
    """A GGUFWriter with a Llama model's metadata (no tokenizer) from `geometry`."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(geometry["n_layers"])
    writer.add_context_length(2048)
    writer.add_embedding_length(geometry["dim"])
    writer.add_feed_forward_length(geometry["ffn_dim"])
    writer.add_head_count(geometry["n_heads"])
    writer.add_head_count_kv(geometry["n_kv_heads"])
    writer.add_rope_freq_base(geometry["theta"])
    writer.add_layer_norm_rms_eps(geometry["eps"])
    writer.add_rope_dimension_count(geometry["head_dim"])
    writer.add_vocab_size(geometry["vocab"])
    return writer


def finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def add_tensor(writer, name: str, values: np.ndarray, gguf_type: str, rng: np.random.Generator) -> torch.Tensor:
    """Store `values` (f32 [rows, columns] or [n]) as `gguf_type` under `name`; returns
    what a reader dequantizes (K-quants: random blocks of that shape, not `values`)."""
    import gguf

    qtype = gguf.GGMLQuantizationType[gguf_type]
    if gguf_type == "F32":
        writer.add_tensor(name, values)
        return torch.from_numpy(values.copy())
    if gguf_type == "F16":
        stored = values.astype(np.float16)
        writer.add_tensor(name, stored)
        return torch.from_numpy(stored.astype(np.float32))
    if gguf_type in _K_QUANT_BLOCKS:
        stored = random_k_quant_blocks(gguf_type, values.shape, rng)
    else:
        stored = gguf.quants.quantize(values, qtype)
    writer.add_tensor(name, stored, raw_dtype=qtype)
    return torch.from_numpy(gguf.quants.dequantize(stored, qtype).reshape(values.shape))


def random_k_quant_blocks(gguf_type: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Random `gguf_type` super-blocks for a [rows, columns] tensor: uint8 [rows, bytes]."""
    block_bytes, scale_offsets, (low, high) = _K_QUANT_BLOCKS[gguf_type]
    rows, columns = shape
    blocks = rng.integers(0, 256, size=(rows * columns // 256, block_bytes), dtype=np.uint8)
    for offset in scale_offsets:
        scales = rng.uniform(low, high, size=blocks.shape[0]).astype(np.float16)
        blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def write_typed_gguf(
    path: Path, geometry: dict, weights: dict, types: dict, *, seed: int, output_type: Optional[str] = None
) -> dict:
    """A GGUF of `weights` (Meta-style keys, f32) whose tensor `key` is stored as
    `types[key]` (default F32 for norms, else types["default"]); the embedding is tied to
    the LM head unless `output_type` stores a separate output.weight. Returns what a
    reader sees, by Meta-style key (output.weight included)."""
    rng = np.random.default_rng(seed)
    writer = llama_gguf_writer(path, geometry)
    seen = {}

    def add(key: str, name: str) -> None:
        values = weights[key].numpy()
        gguf_type = types.get(key, "F32" if values.ndim == 1 else types["default"])
        seen[key] = add_tensor(writer, name, values, gguf_type, rng)

    add("tok_embeddings.weight", "token_embd.weight")
    add("norm.weight", "output_norm.weight")
    if output_type is None:
        seen["output.weight"] = seen["tok_embeddings.weight"]
    else:
        seen["output.weight"] = add_tensor(writer, "output.weight", weights["output.weight"].numpy(), output_type, rng)
    for i in range(geometry["n_layers"]):
        for meta_name, gguf_name in GGUF_TENSOR_NAMES.items():
            add(f"layers.{i}.{meta_name}", f"blk.{i}.{gguf_name}")
    finish(writer)
    return seen
