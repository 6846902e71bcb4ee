"""Two small GGUFs that hold every type the exact export supports, exported once per session.

Random weights, several groups per row, an LM head of 300 rows (not a multiple of 8):
"classic" holds Q4_0, Q4_1 and Q8_0 (a tied Q8_0 embedding, as SmolLM2); "k_quants" a
mix like a `_M` file: Q4_K, Q5_K, Q6_K, an F16 matrix and a separate Q6_K LM head.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


from gguf_files import write_typed_gguf
from test_export_tools import random_meta_weights

MAX_SEQ_LEN = 8
MAX_CONTEXT_LEN = 32
_BASE = dict(n_layers=2, theta=10000.0, eps=1e-5, vocab=300)
# name -> (geometry, GGUF type per Meta-style key with a default, separate LM head's type)
MODELS = {
    "classic": (
        {**_BASE, "dim": 96, "n_heads": 6, "n_kv_heads": 2, "head_dim": 16, "ffn_dim": 160},
        {
            "default": "Q4_1",
            "tok_embeddings.weight": "Q8_0",
            "layers.0.attention.wq.weight": "Q4_0",
            "layers.0.attention.wk.weight": "Q8_0",
            "layers.0.feed_forward.w1.weight": "Q4_0",
            "layers.0.feed_forward.w2.weight": "Q8_0",
        },
        None,
    ),
    "k_quants": (
        {**_BASE, "dim": 256, "n_heads": 4, "n_kv_heads": 2, "head_dim": 64, "ffn_dim": 512},
        {
            "default": "Q4_K",
            "layers.0.attention.wv.weight": "Q6_K",
            "layers.0.attention.wo.weight": "F16",
            "layers.0.feed_forward.w2.weight": "Q6_K",
            "layers.1.attention.wv.weight": "Q5_K",
            "layers.1.feed_forward.w1.weight": "Q5_K",
        },
        "Q6_K",
    ),
}


@cache
def exact_gguf_export(tmp_dir: str, name: str):
    """(ExportResult, what a GGUF reader sees by Meta-style key, geometry, GGUF path) of `name`."""
    from export_tools import GGUFSource, export_llama

    geometry, types, output_type = MODELS[name]
    folder = Path(tmp_dir) / f"gguf_exact_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    seen = write_typed_gguf(folder / "model.gguf", geometry, random_meta_weights(geometry, seed=5), types, seed=6, output_type=output_type)
    result = export_llama(GGUFSource(folder / "model.gguf"), folder / "model.pte", max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_CONTEXT_LEN)
    return result, seen, geometry, folder / "model.gguf"
