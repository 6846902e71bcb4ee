"""A GGUF with an export preset's geometry and random 4-bit weights (Q4_0), for the
benchmark's peer (wllama, llama.cpp in wasm) on a model too large to send to a GPU
machine: written there, with the `gguf` package and numpy only.

    python -m bench.random_gguf --preset llama3.2-1b --tokenizer TOKENIZER.json OUT.gguf

The tokenizer is a byte-level BPE tokenizer.json (the bundled SmolLM2's, which
bench.weightless copies beside random-weight programs), padded with unused tokens to
the preset's vocabulary: the benchmark's prompt texts then tokenize to the same ids for
wllama as for pywebgpu. Speed does not depend on weight values, so each tensor shape gets
one random tensor, quantized once and repeated over the layers; tied embeddings (no
`output.weight`), as in the preset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# llama.cpp's names of a Llama block's tensors, by (rows, columns) of the preset.
BLOCK_TENSORS = {
    "attn_q.weight": ("q_dim", "dim"),
    "attn_k.weight": ("kv_dim", "dim"),
    "attn_v.weight": ("kv_dim", "dim"),
    "attn_output.weight": ("dim", "q_dim"),
    "ffn_gate.weight": ("hidden_dim", "dim"),
    "ffn_up.weight": ("hidden_dim", "dim"),
    "ffn_down.weight": ("dim", "hidden_dim"),
}
TOKEN_NORMAL, TOKEN_UNUSED = 1, 5  # llama.cpp's token types
BOS_ID, EOS_ID = 1, 2  # SmolLM2's <|im_start|> and <|im_end|>, as its own GGUF has them


def write_random_gguf(out: Path, preset: dict, tokenizer_json: dict, seed: int = 0) -> Path:
    import gguf

    head_dim = preset["dim"] // preset["n_heads"]
    sizes = {
        "dim": preset["dim"],
        "q_dim": preset["n_heads"] * head_dim,
        "kv_dim": preset["n_kv_heads"] * head_dim,
        "hidden_dim": preset["hidden_dim"],
        "vocab": preset["vocab_size"],
    }
    model = tokenizer_json["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    if len(tokens) > sizes["vocab"]:
        raise SystemExit(f"the tokenizer has {len(tokens)} tokens, the preset's vocabulary {sizes['vocab']}")
    types = [TOKEN_NORMAL] * len(tokens) + [TOKEN_UNUSED] * (sizes["vocab"] - len(tokens))
    tokens += [f"<|unused_{i}|>" for i in range(sizes["vocab"] - len(tokens))]

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_block_count(preset["n_layers"])
    writer.add_context_length(2048)
    writer.add_embedding_length(sizes["dim"])
    writer.add_feed_forward_length(sizes["hidden_dim"])
    writer.add_head_count(preset["n_heads"])
    writer.add_head_count_kv(preset["n_kv_heads"])
    writer.add_rope_freq_base(preset["rope_theta"])
    writer.add_layer_norm_rms_eps(preset["norm_eps"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(sizes["vocab"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]])
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)

    rng = np.random.default_rng(seed)
    quantized = {}

    def q4_0(rows: int, columns: int):
        if (rows, columns) not in quantized:
            values = rng.standard_normal((rows, columns), dtype=np.float32) * 0.02
            quantized[rows, columns] = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q4_0)
        return quantized[rows, columns]

    norm = np.ones(sizes["dim"], dtype=np.float32)
    writer.add_tensor("token_embd.weight", q4_0(sizes["vocab"], sizes["dim"]), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.add_tensor("output_norm.weight", norm)
    for layer in range(preset["n_layers"]):
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", norm)
        writer.add_tensor(f"blk.{layer}.ffn_norm.weight", norm)
        for name, (rows, columns) in BLOCK_TENSORS.items():
            writer.add_tensor(f"blk.{layer}.{name}", q4_0(sizes[rows], sizes[columns]), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main(argv=None) -> int:
    from export_tools.params import PRESETS

    parser = argparse.ArgumentParser(prog="python -m bench.random_gguf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--tokenizer", type=Path, required=True, help="a byte-level BPE tokenizer.json")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out = write_random_gguf(args.out, PRESETS[args.preset], json.loads(args.tokenizer.read_text(encoding="utf-8")))
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
