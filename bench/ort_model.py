"""The model of the benchmark's `ort-webgpu` side (onnxruntime-web's WebGPU execution
provider): SmolLM2-135M-Instruct from the same GGUF as the bundled model, or the
Llama-3.2-1B geometry with random weights, written as a Hugging Face folder and built by
the onnxruntime-genai model builder into a 4-bit ONNX model with a KV cache
(`MatMulNBits`, block 32, asymmetric round-to-nearest; fp32 inputs, scales and cache, so
no `shader-f16` is needed; logits of the last position only, as pywebgpu's prefill).

    .venv/bin/pip install -e ".[bench]"       # the builder and what it imports (benchmark only)
    .venv/bin/python -m bench.ort_model [--model smollm2|llama3.2-1b] [--weightless OUT_DIR]

writes build/ort/<model>/ (model.onnx, model.onnx.data, genai_config.json, tokenizer)
unless it holds a build with the same options, and fetches onnxruntime-web into
web/vendor/onnxruntime-web/ (bench.ort_runtime). --weightless also writes
OUT_DIR/ort-<model>/: model.onnx, genai_config.json and model.onnx.data.gz, every
initializer in the data file filled with bench.weightless's byte, so that it compresses
to almost nothing (its tokens are meaningless); `gunzip` the .gz where it runs.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from devtools.bundle import ROOT

from .options import MANIFEST
from .ort_runtime import FOLDER as RUNTIME_FOLDER
from .ort_runtime import ensure_runtime
from .weightless import FILL_BYTE

BUILD = ROOT / "build" / "ort"
MODELS = ("smollm2", "llama3.2-1b")
# The builder's options: int4 MatMulNBits of block 32 with zero points (asymmetric, as
# the GGUF's Q4_1), RTN (the default algorithm breaks a tied embedding with zero points),
# fp32 activations and KV cache, and the LM head on the last position only.
BUILDER_OPTIONS = [
    "-p", "int4", "-e", "webgpu", "--extra_options", "use_webgpu_fp32=true", "is_symmetric=false",
    "algo_config=rtn", "block_size=32", "prune_lm_head=true",
]  # fmt: skip
BENCH_DEPENDENCIES = ("onnxruntime_genai", "onnx", "onnxruntime", "onnx_ir", "transformers")
DATA_FILE = "model.onnx.data"
# Positions the model's RoPE table covers: SmolLM2's trained context, and the original
# context of Llama 3's RoPE scaling.
CONTEXT = 8192


def require_bench_dependencies():
    """Stop with the install command if the builder's dependencies are missing."""
    missing = [name for name in BENCH_DEPENDENCIES if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"bench.ort_model needs {', '.join(missing)}: run `.venv/bin/pip install -e \".[bench]\"`")


def meta_to_hf_rotary(weight, n_heads: int):
    """Meta's interleaved RoPE rows of wq/wk (rows 2i, 2i+1 a pair) in Hugging Face's
    rotate-half order (row i with i + head_dim/2): the inverse of
    export_tools.sources.hf_folder.hf_to_meta_rotary."""
    rows, columns = weight.shape
    return weight.view(n_heads, rows // n_heads // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def hf_state_dict(loaded) -> tuple[dict, bool]:
    """A LoadedModel's Meta-style weights under Hugging Face Llama names, and whether the
    output layer is the embedding (then left out: tie_word_embeddings)."""
    import torch

    from export_tools.sources.hf_folder import _HF_GLOBAL_TENSORS, _HF_LAYER_TENSORS

    params, weights = loaded.params, loaded.state_dict
    global_names = {meta: hf for hf, meta in _HF_GLOBAL_TENSORS.items()}
    layer_names = {meta: hf for hf, meta in _HF_LAYER_TENSORS.items()}
    tied = torch.equal(weights["output.weight"], weights["tok_embeddings.weight"])
    tensors = {}
    for key, tensor in weights.items():
        if key == "output.weight" and tied:
            continue
        if key in global_names:
            tensors[global_names[key]] = tensor
            continue
        _, layer, *part, _ = key.split(".")
        part = ".".join(part)
        if part == "attention.wq":
            tensor = meta_to_hf_rotary(tensor, params.n_heads)
        elif part == "attention.wk":
            tensor = meta_to_hf_rotary(tensor, params.n_kv_heads)
        tensors[f"model.layers.{layer}.{layer_names[part]}.weight"] = tensor
    return tensors, tied


def write_hf_folder(loaded, folder: Path, dtype) -> None:
    """config.json, model.safetensors (in `dtype`) and the tokenizer files the builder
    reads, from an export_tools LoadedModel; a model without a tokenizer gets the bundled
    SmolLM2's (the benchmark feeds token ids only)."""
    from safetensors.torch import save_file

    params = loaded.params
    tensors, tied = hf_state_dict(loaded)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({name: tensor.to(dtype).contiguous() for name, tensor in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    if loaded.tokenizer is not None:
        tokenizer_json, bos, eos = loaded.tokenizer.tokenizer_json, loaded.tokenizer.bos, loaded.tokenizer.eos[0]
        bos, eos = {"id": bos.id, "text": bos.text}, {"id": eos.id, "text": eos.text}
    else:
        bundled = json.loads(MANIFEST.read_text())
        tokenizer_json = (MANIFEST.parent / bundled["tokenizer"]["file"]).read_text()
        bos, eos = bundled["special_tokens"]["bos"], bundled["special_tokens"]["eos"][0]
    rope = {"rope_type": "default", "rope_theta": params.rope_theta}
    if params.rope_scaling is not None:
        scaling = params.rope_scaling
        rope = {
            "rope_type": "llama3",
            "rope_theta": params.rope_theta,
            "factor": float(scaling.factor),
            "high_freq_factor": float(scaling.high_freq_factor),
            "low_freq_factor": float(scaling.LOW_FREQ_FACTOR),
            "original_max_position_embeddings": scaling.ORIGINAL_CONTEXT_LEN,
        }
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": params.dim,
        "intermediate_size": params.ffn_dim,
        "num_hidden_layers": params.n_layers,
        "num_attention_heads": params.n_heads,
        "num_key_value_heads": params.n_kv_heads,
        "head_dim": params.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": params.norm_eps,
        "rope_theta": params.rope_theta,
        "rope_scaling": None if rope["rope_type"] == "default" else rope,
        "rope_parameters": rope,
        "vocab_size": params.vocab_size,
        "tie_word_embeddings": tied,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos["id"],
        "eos_token_id": eos["id"],
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (folder / "tokenizer.json").write_text(tokenizer_json)
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos["text"],
        "eos_token": eos["text"],
        "model_max_length": CONTEXT,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1) + "\n")


def load_source(model: str):
    """The export_tools LoadedModel of `model`, and the dtype its HF folder is written in:
    the GGUF's dequantized values exactly (fp32); the random 1B in bf16 (half the bytes)."""
    import torch

    from export_tools.bundled import gguf_path
    from export_tools.sources.gguf_file import GGUFSource
    from export_tools.sources.random_weights import RandomSource

    if model == "smollm2":
        return GGUFSource(gguf_path()).load(progress=True), torch.float32
    return RandomSource("llama3.2-1b").load(progress=True), torch.bfloat16


def build(model: str) -> Path:
    """build/ort/<model>/, built unless it holds a build made with the same options."""
    out = BUILD / model
    stamp = {"model": model, "context": CONTEXT, "builder_options": BUILDER_OPTIONS}
    stamp_file = out / "built.json"
    if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp and (out / DATA_FILE).is_file():
        print(f"kept {out} (built with these options)")
        return out
    require_bench_dependencies()
    shutil.rmtree(out, ignore_errors=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD, prefix=f"{model}-hf-") as scratch:
        loaded, dtype = load_source(model)
        write_hf_folder(loaded, Path(scratch) / "hf", dtype)
        del loaded
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", f"{scratch}/hf", "-o", str(out), "-c", f"{scratch}/cache", *BUILDER_OPTIONS]
        print("building:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    stamp_file.write_text(json.dumps(stamp, indent=1) + "\n")
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()):,} bytes)")
    return out


def external_ranges(model_onnx: Path) -> list[tuple[int, int]]:
    """(offset, length) in the data file of every initializer stored there; an error for
    one of an integer type (shapes or indices, which a constant fill would break)."""
    import onnx

    proto = onnx.load(str(model_onnx), load_external_data=False)
    weight_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.UINT8, onnx.TensorProto.INT8}
    ranges = []
    for tensor in proto.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        if info["location"] != DATA_FILE:
            raise SystemExit(f"{model_onnx}: initializer {tensor.name} is in {info['location']}, not {DATA_FILE}")
        if tensor.data_type not in weight_types:
            raise SystemExit(f"{model_onnx}: initializer {tensor.name} of type {onnx.TensorProto.DataType.Name(tensor.data_type)} is in {DATA_FILE}; only weights may be filled")
        ranges.append((int(info.get("offset", 0)), int(info["length"])))
    return ranges


def weightless(built: Path, out_dir: Path) -> Path:
    """OUT_DIR/ort-<model>/ with the data file's initializers one byte, gzip'd."""
    data = bytearray((built / DATA_FILE).read_bytes())
    for offset, length in external_ranges(built / "model.onnx"):
        data[offset : offset + length] = bytes([FILL_BYTE]) * length
    pack = out_dir / f"ort-{built.name}"
    pack.mkdir(parents=True, exist_ok=True)
    for name in ("model.onnx", "genai_config.json"):
        shutil.copy(built / name, pack / name)
    with gzip.open(pack / f"{DATA_FILE}.gz", "wb", compresslevel=6) as out:
        out.write(data)
    print(f"wrote {pack}: {DATA_FILE}.gz {(pack / (DATA_FILE + '.gz')).stat().st_size:,} bytes ({len(data):,} unpacked)")
    return pack


def page_config(folder: Path, url: str) -> dict:
    """What bench/web/ort.mjs needs of a built model (or a weightless pack) served at
    `url`: its files' URLs and the KV cache's geometry, from the builder's genai_config.json."""
    for name in ("model.onnx", DATA_FILE, "genai_config.json"):
        if not (folder / name).is_file():
            hint = f"gunzip {folder / DATA_FILE}.gz" if name == DATA_FILE and (folder / f"{DATA_FILE}.gz").is_file() else "build it with `python -m bench.ort_model`"
            raise SystemExit(f"the ort-webgpu side's model folder {folder} lacks {name}: {hint}")
    if not (RUNTIME_FOLDER / ".version").is_file():
        raise SystemExit(f"the ort-webgpu side needs onnxruntime-web in {RUNTIME_FOLDER}: run `python -m bench.ort_runtime`")
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    return {
        "modelUrl": f"{url}model.onnx",
        "dataUrl": f"{url}{DATA_FILE}",
        "dataFile": DATA_FILE,
        "layers": decoder["num_hidden_layers"],
        "kvHeads": decoder["num_key_value_heads"],
        "headDim": decoder["head_size"],
    }


def model_entry(folder: Path) -> dict:
    """The report's record of the ONNX model a run used: its folder, files and build options."""
    stamp = folder / "built.json"
    return {
        "folder": str(folder),
        "files": {path.name: path.stat().st_size for path in sorted(folder.iterdir()) if path.is_file()},
        "built_with": json.loads(stamp.read_text()) if stamp.is_file() else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ort_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    parser.add_argument("--weightless", type=Path, metavar="OUT_DIR", help="also write a weightless, gzip'd pack of it here")
    args = parser.parse_args(argv)
    ensure_runtime()
    built = build(args.model)
    if args.weightless:
        weightless(built, args.weightless)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
