"""Weight sources: each turns its input into Meta-style fp32 weights plus a LlamaParams.

Meta-style keys are what ExecuTorch's Llama model loads (`tok_embeddings.weight`,
`layers.N.attention.wq.weight`, `layers.N.feed_forward.w1.weight`, ...), and Meta's
rotary layout rotates interleaved pairs (x[2i], x[2i+1]) of each head: that is also the
layout of `et_vk.apply_rotary_emb`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch
from tqdm import tqdm

from .errors import ExportError
from .params import PRESETS, Llama3RopeScaling, LlamaParams

StateDict = dict[str, torch.Tensor]
PathLike = Union[str, Path]


@dataclass(frozen=True)
class SpecialToken:
    id: int
    text: Optional[str]  # None when no tokenizer vocabulary names the id

    def manifest_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text}


@dataclass
class TokenizerInfo:
    """What a runtime needs to turn text into tokens and back, as far as the source has it."""

    tokenizer_json: Optional[str]  # a Hugging Face `tokenizers` JSON document
    bos: Optional[SpecialToken]
    eos: list[SpecialToken]
    chat_template: Optional[str]


@dataclass
class LoadedModel:
    params: LlamaParams
    state_dict: StateDict  # Meta-style keys, fp32, exactly params.expected_shapes()
    tokenizer: Optional[TokenizerInfo]
    origin: dict[str, Any] = field(default_factory=dict)  # for the manifest


class ModelSource:
    """Base of all sources; `load` does the (possibly slow) reading and converting."""

    def load(self, *, progress: bool = False) -> LoadedModel:
        raise NotImplementedError


def _checked_state_dict(
    params: LlamaParams, tensors: Mapping[str, torch.Tensor], *, what: str
) -> StateDict:
    """The tensors as fp32, checked key by key and shape by shape against the geometry."""
    expected = params.expected_shapes()
    missing = [key for key in expected if key not in tensors]
    if missing:
        raise ExportError(f"{what} lacks {len(missing)} tensor(s), e.g. {', '.join(missing[:3])}")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise ExportError(
            f"{what} has tensor(s) a plain Llama model does not: {', '.join(unexpected[:3])}"
        )
    state_dict = {}
    for key, shape in expected.items():
        tensor = tensors[key]
        if tuple(tensor.shape) != shape:
            raise ExportError(
                f"{what}: {key} has shape {tuple(tensor.shape)}, the geometry needs {shape}"
            )
        state_dict[key] = tensor.to(torch.float32).contiguous()
    return state_dict


def _positive_int(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ExportError(f"{name} must be a positive integer, got {value!r}")
    return value


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportError(f"cannot read {what} {path}: {error}") from None


# --------------------------------------------------------------------------- random


class RandomSource(ModelSource):
    """Seeded random weights for any geometry: a preset name or a Meta-style params dict.

    Matrices are N(0, 1/fan_in) (so activations and logits stay O(1)), norm weights
    1 + N(0, 0.1^2) (so a runtime that ignores them is caught). With `tied_embeddings`
    the output layer is the embedding matrix.
    """

    def __init__(self, params: Union[str, Mapping[str, Any]], seed: int = 0):
        if isinstance(params, str):
            if params not in PRESETS:
                raise ExportError(f"unknown preset '{params}' (known: {', '.join(PRESETS)})")
            params = PRESETS[params]
        self.raw_params = dict(params)
        self.params = LlamaParams.from_meta_params(self.raw_params)
        self.seed = seed

    def load(self, *, progress: bool = False) -> LoadedModel:
        generator = torch.Generator().manual_seed(self.seed)
        state_dict: StateDict = {}
        shapes = self.params.expected_shapes()
        for key, shape in tqdm(shapes.items(), desc="random weights", disable=not progress):
            if key == "output.weight" and self.params.tied_embeddings:
                state_dict[key] = state_dict["tok_embeddings.weight"]
            elif len(shape) == 1:
                state_dict[key] = 1 + 0.1 * torch.randn(shape, generator=generator)
            else:
                state_dict[key] = torch.randn(shape, generator=generator) / shape[1] ** 0.5
        origin = {"kind": "random", "seed": self.seed, "params": self.raw_params}
        return LoadedModel(self.params, state_dict, tokenizer=None, origin=origin)


# --------------------------------------------------------------------------- Meta


class MetaCheckpointSource(ModelSource):
    """A Meta-style checkpoint (`consolidated.00.pth`) and its `params.json`.

    A checkpoint without `output.weight` has tied embeddings (Llama 3.2 1B/3B).
    """

    def __init__(self, checkpoint: PathLike, params_json: PathLike):
        self.checkpoint = Path(checkpoint)
        self.params_json = Path(params_json)

    def load(self, *, progress: bool = False) -> LoadedModel:
        raw_params = _read_json(self.params_json, "params file")
        if not isinstance(raw_params, dict):
            raise ExportError(f"params file {self.params_json} does not hold a JSON object")
        if not self.checkpoint.is_file():
            raise ExportError(f"checkpoint not found: {self.checkpoint}")
        try:
            tensors = torch.load(self.checkpoint, map_location="cpu", mmap=True, weights_only=True)
        except Exception as error:  # torch raises many types for a file that is not a checkpoint
            raise ExportError(f"cannot read checkpoint {self.checkpoint}: {error}") from None
        if isinstance(tensors, dict) and isinstance(tensors.get("model"), dict):
            tensors = tensors["model"]
        if not isinstance(tensors, dict) or "tok_embeddings.weight" not in tensors:
            raise ExportError(
                f"{self.checkpoint} is not a Meta-style Llama checkpoint (no tok_embeddings.weight)"
            )
        # Llama 2 checkpoints carry their RoPE table; ExecuTorch computes its own.
        tensors.pop("rope.freqs", None)
        tied = "output.weight" not in tensors
        if tied:
            tensors["output.weight"] = tensors["tok_embeddings.weight"]
        params = LlamaParams.from_meta_params(
            {**raw_params, "tied_embeddings": tied},
            vocab_size=tensors["tok_embeddings.weight"].shape[0],
        )
        state_dict = _checked_state_dict(params, tensors, what=str(self.checkpoint))
        origin = {"kind": "meta", "checkpoint": self.checkpoint.name, "params": self.params_json.name}
        return LoadedModel(params, state_dict, tokenizer=None, origin=origin)


# --------------------------------------------------------------------------- GGUF

# llama.cpp tensor names -> Meta-style keys. llama.cpp's converter already permuted
# Q/K rows into the interleaved (Meta) rotary layout, so they map one to one.
_GGUF_GLOBAL_TENSORS = {
    "token_embd.weight": "tok_embeddings.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "output.weight",
}
_GGUF_LAYER_TENSORS = {
    "attn_norm": "attention_norm",
    "attn_q": "attention.wq",
    "attn_k": "attention.wk",
    "attn_v": "attention.wv",
    "attn_output": "attention.wo",
    "ffn_norm": "ffn_norm",
    "ffn_gate": "feed_forward.w1",
    "ffn_up": "feed_forward.w3",
    "ffn_down": "feed_forward.w2",
}
_GGUF_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def _meta_key_for_gguf(name: str) -> Optional[str]:
    if name in _GGUF_GLOBAL_TENSORS:
        return _GGUF_GLOBAL_TENSORS[name]
    match = _GGUF_LAYER_NAME.fullmatch(name)
    if match and match.group(2) in _GGUF_LAYER_TENSORS:
        return f"layers.{match.group(1)}.{_GGUF_LAYER_TENSORS[match.group(2)]}.weight"
    return None


class GGUFSource(ModelSource):
    """A llama.cpp GGUF file of architecture `llama`; every tensor is dequantized to fp32.

    Geometry, RoPE theta and RMSNorm eps come from the GGUF metadata; Llama-3 RoPE scaling
    from the `rope_freqs.weight` factors llama.cpp stores. The tokenizer is rebuilt from
    the metadata (see `gguf_tokenizer`).
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)

    def load(self, *, progress: bool = False) -> LoadedModel:
        import gguf

        from .gguf_tokenizer import tokenizer_from_gguf_metadata

        if not self.path.is_file():
            raise ExportError(f"GGUF file not found: {self.path}")
        try:
            reader = gguf.GGUFReader(self.path)
        except Exception as error:  # the reader raises ValueError/struct errors/... on junk
            raise ExportError(f"cannot read {self.path} as GGUF: {error}") from None
        metadata = {name: field.contents() for name, field in reader.fields.items()}

        architecture = metadata.get("general.architecture")
        if architecture != "llama":
            raise ExportError(
                f"unsupported GGUF architecture '{architecture}' in {self.path.name} (only 'llama')"
            )
        tensors_by_name = {tensor.name: tensor for tensor in reader.tensors}
        params = self._params(metadata, tensors_by_name)

        tensors: StateDict = {}
        for name, tensor in tqdm(
            tensors_by_name.items(), desc="dequantize GGUF", disable=not progress
        ):
            if name == "rope_freqs.weight":
                continue  # folded into params.rope_scaling
            key = _meta_key_for_gguf(name)
            if key is None:
                raise ExportError(f"GGUF tensor '{name}' does not belong to a plain Llama model")
            try:
                values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            except NotImplementedError as error:
                raise ExportError(f"GGUF tensor '{name}': {error}") from None
            # GGUF lists dimensions fastest-first; PyTorch wants them the other way round.
            shape = [int(n) for n in reversed(tensor.shape)]
            tensors[key] = torch.tensor(values, dtype=torch.float32).reshape(shape)
        if "output.weight" not in tensors and "tok_embeddings.weight" in tensors:
            tensors["output.weight"] = tensors["tok_embeddings.weight"]
        state_dict = _checked_state_dict(params, tensors, what=self.path.name)
        tokenizer = tokenizer_from_gguf_metadata(metadata)
        origin = {"kind": "gguf", "file": self.path.name, "name": metadata.get("general.name")}
        return LoadedModel(params, state_dict, tokenizer, origin)

    def _params(self, metadata: Mapping[str, Any], tensors_by_name: Mapping[str, Any]) -> LlamaParams:
        def required(key: str) -> Any:
            if f"llama.{key}" not in metadata:
                raise ExportError(f"{self.path.name}: GGUF metadata lacks llama.{key}")
            return metadata[f"llama.{key}"]

        if metadata.get("llama.expert_count", 0):
            raise ExportError(f"{self.path.name} is a mixture-of-experts model; only dense Llama is supported")
        scaling_type = metadata.get("llama.rope.scaling.type", "none")
        if scaling_type != "none":
            raise ExportError(f"{self.path.name}: unsupported RoPE scaling type '{scaling_type}'")
        dim = int(required("embedding_length"))
        n_heads = int(required("attention.head_count"))
        head_dim = int(metadata.get("llama.attention.key_length", dim // n_heads))
        rotary_dims = int(metadata.get("llama.rope.dimension_count", head_dim))
        if rotary_dims != head_dim:
            raise ExportError(
                f"{self.path.name}: partial rotary embedding ({rotary_dims} of {head_dim} dims) is not supported"
            )
        embedding = tensors_by_name.get("token_embd.weight")
        if embedding is None:
            raise ExportError(f"{self.path.name} has no token_embd.weight")
        vocab_size = int(metadata.get("llama.vocab_size", int(embedding.shape[-1])))
        rope_theta = float(metadata.get("llama.rope.freq_base", 10000.0))
        rope_freqs = tensors_by_name.get("rope_freqs.weight")
        return LlamaParams(
            dim=dim,
            n_layers=int(required("block_count")),
            n_heads=n_heads,
            n_kv_heads=int(metadata.get("llama.attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            ffn_dim=int(required("feed_forward_length")),
            vocab_size=vocab_size,
            norm_eps=float(required("attention.layer_norm_rms_epsilon")),
            rope_theta=rope_theta,
            rope_scaling=(
                None
                if rope_freqs is None
                else self._llama3_scaling(torch.tensor(rope_freqs.data, dtype=torch.float32), head_dim, rope_theta)
            ),
            tied_embeddings="output.weight" not in tensors_by_name,
        )

    def _llama3_scaling(self, factors: torch.Tensor, head_dim: int, rope_theta: float) -> Llama3RopeScaling:
        """Recover Llama-3 scaling from llama.cpp's per-frequency divisors.

        The largest divisor is the scale factor; the result must reproduce every divisor
        through ExecuTorch's own `apply_scaling`, or the model uses some other scheme.
        """
        from executorch.examples.models.llama.rope import apply_scaling

        base = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        if factors.shape != base.shape:
            raise ExportError(f"{self.path.name}: rope_freqs.weight has {factors.numel()} values, expected {base.numel()}")
        scaling = Llama3RopeScaling(factor=round(float(factors.max())))
        expected = base / apply_scaling(base, scaling.factor, scaling.high_freq_factor)
        if not torch.allclose(factors, expected, rtol=1e-3):
            raise ExportError(f"{self.path.name}: rope_freqs.weight is not Llama-3 RoPE scaling")
        return scaling


# --------------------------------------------------------------------------- Hugging Face

_HF_GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "tok_embeddings.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",
}
_HF_LAYER_TENSORS = {
    "input_layernorm": "attention_norm",
    "self_attn.q_proj": "attention.wq",
    "self_attn.k_proj": "attention.wk",
    "self_attn.v_proj": "attention.wv",
    "self_attn.o_proj": "attention.wo",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "feed_forward.w1",
    "mlp.up_proj": "feed_forward.w3",
    "mlp.down_proj": "feed_forward.w2",
}
_HF_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.([\w.]+)\.weight")
# Buffers that old checkpoints saved; ExecuTorch computes its own RoPE table.
_HF_IGNORED = re.compile(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq")


def hf_to_meta_rotary(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo the row permutation of Hugging Face's Llama converter for wq/wk.

    HF's rotate-half layout pairs row i with row i + head_dim/2 of each head; Meta's
    interleaved layout pairs rows 2i and 2i+1. The converter did
    `w.view(n_heads, head_dim // 2, 2, dim).transpose(1, 2)`; this is its inverse.
    """
    rows, columns = weight.shape
    head_dim = rows // n_heads
    return weight.view(n_heads, 2, head_dim // 2, columns).transpose(1, 2).reshape(rows, columns)


class HFSource(ModelSource):
    """A Hugging Face Llama folder: config.json, *.safetensors, tokenizer.json (+ configs)."""

    def __init__(self, folder: PathLike):
        self.folder = Path(folder)

    def load(self, *, progress: bool = False) -> LoadedModel:
        from safetensors import safe_open

        if not self.folder.is_dir():
            raise ExportError(f"Hugging Face model folder not found: {self.folder}")
        config = _read_json(self.folder / "config.json", "model config")
        params = self._params(config)
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise ExportError(f"no *.safetensors files in {self.folder}")

        tensors: StateDict = {}
        with tqdm(desc="read safetensors", unit=" tensors", disable=not progress) as bar:
            for file in files:
                try:
                    with safe_open(str(file), framework="pt") as handle:
                        for name in handle.keys():
                            bar.update()
                            if _HF_IGNORED.fullmatch(name):
                                continue
                            key = self._meta_key(name)
                            tensor = handle.get_tensor(name).to(torch.float32)
                            if key.endswith("attention.wq.weight"):
                                tensor = hf_to_meta_rotary(tensor, params.n_heads)
                            elif key.endswith("attention.wk.weight"):
                                tensor = hf_to_meta_rotary(tensor, params.n_kv_heads)
                            tensors[key] = tensor
                except ExportError:
                    raise
                except Exception as error:  # safetensors raises its own error types
                    raise ExportError(f"cannot read {file}: {error}") from None
        if "output.weight" not in tensors and "tok_embeddings.weight" in tensors:
            tensors["output.weight"] = tensors["tok_embeddings.weight"]
        state_dict = _checked_state_dict(params, tensors, what=str(self.folder))
        origin = {"kind": "hf", "folder": self.folder.name, "name_or_path": config.get("_name_or_path")}
        return LoadedModel(params, state_dict, self._tokenizer(config), origin)

    @staticmethod
    def _meta_key(name: str) -> str:
        if name in _HF_GLOBAL_TENSORS:
            return _HF_GLOBAL_TENSORS[name]
        match = _HF_LAYER_NAME.fullmatch(name)
        if match and match.group(2) in _HF_LAYER_TENSORS:
            return f"layers.{match.group(1)}.{_HF_LAYER_TENSORS[match.group(2)]}.weight"
        raise ExportError(f"safetensors tensor '{name}' does not belong to a plain Llama model")

    def _params(self, config: Mapping[str, Any]) -> LlamaParams:
        architectures = config.get("architectures") or []
        if config.get("model_type") != "llama" or architectures not in ([], ["LlamaForCausalLM"]):
            raise ExportError(
                f"unsupported Hugging Face architecture {architectures or config.get('model_type')!r} "
                "(only LlamaForCausalLM)"
            )
        for flag in ("attention_bias", "mlp_bias"):
            if config.get(flag):
                raise ExportError(f"{flag} is set in config.json; ExecuTorch's Llama has no biases")
        if config.get("hidden_act", "silu") != "silu":
            raise ExportError(f"unsupported hidden_act '{config['hidden_act']}' (only silu)")

        def required(key: str) -> Any:
            if key not in config:
                raise ExportError(f"config.json lacks '{key}'")
            return config[key]

        # transformers 5 moved rope_theta and rope_scaling into rope_parameters.
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        rope_theta = config.get("rope_theta", rope.get("rope_theta", 10000.0))
        dim = _positive_int(required("hidden_size"), "hidden_size")
        n_heads = _positive_int(required("num_attention_heads"), "num_attention_heads")
        return LlamaParams(
            dim=dim,
            n_layers=required("num_hidden_layers"),
            n_heads=n_heads,
            n_kv_heads=config.get("num_key_value_heads") or n_heads,
            head_dim=config.get("head_dim") or dim // n_heads,
            ffn_dim=required("intermediate_size"),
            vocab_size=required("vocab_size"),
            norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope_theta),
            rope_scaling=self._rope_scaling(rope),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        )

    @staticmethod
    def _rope_scaling(rope: Mapping[str, Any]) -> Optional[Llama3RopeScaling]:
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type == "default":
            return None
        if rope_type != "llama3":
            raise ExportError(f"unsupported RoPE scaling '{rope_type}' (only llama3)")
        low = rope.get("low_freq_factor", Llama3RopeScaling.LOW_FREQ_FACTOR)
        original = rope.get("original_max_position_embeddings", Llama3RopeScaling.ORIGINAL_CONTEXT_LEN)
        if low != Llama3RopeScaling.LOW_FREQ_FACTOR or original != Llama3RopeScaling.ORIGINAL_CONTEXT_LEN:
            raise ExportError(
                "ExecuTorch's Llama-3 RoPE scaling fixes low_freq_factor=1 and "
                f"original_max_position_embeddings=8192; config.json has {low} and {original}"
            )
        factor, high = rope.get("factor"), rope.get("high_freq_factor", 4)
        if not all(isinstance(v, (int, float)) and float(v).is_integer() for v in (factor, high)):
            raise ExportError(f"llama3 RoPE scaling needs whole factors, got factor={factor}, high_freq_factor={high}")
        return Llama3RopeScaling(factor=int(factor), high_freq_factor=int(high))

    def _tokenizer(self, config: Mapping[str, Any]) -> Optional[TokenizerInfo]:
        from tokenizers import Tokenizer

        tokenizer_path = self.folder / "tokenizer.json"
        if not tokenizer_path.is_file():
            return None
        tokenizer_json = tokenizer_path.read_text(encoding="utf-8")
        try:
            tokenizer = Tokenizer.from_str(tokenizer_json)
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON
            raise ExportError(f"cannot load {tokenizer_path}: {error}") from None
        tokenizer_config_path = self.folder / "tokenizer_config.json"
        tokenizer_config = (
            _read_json(tokenizer_config_path, "tokenizer config") if tokenizer_config_path.is_file() else {}
        )
        generation_config_path = self.folder / "generation_config.json"
        generation_config = (
            _read_json(generation_config_path, "generation config") if generation_config_path.is_file() else {}
        )

        def token_ids(key: str) -> list[int]:
            # generation_config.json lists every stop token of instruct models.
            for settings in (generation_config, config):
                value = settings.get(f"{key}_token_id")
                if value is not None:
                    return [value] if isinstance(value, int) else list(value)
            text = tokenizer_config.get(f"{key}_token")
            text = text.get("content") if isinstance(text, dict) else text
            token_id = tokenizer.token_to_id(text) if text else None
            return [] if token_id is None else [token_id]

        def special(token_id: int) -> SpecialToken:
            return SpecialToken(token_id, tokenizer.id_to_token(token_id))

        bos_ids = token_ids("bos")
        return TokenizerInfo(
            tokenizer_json=tokenizer_json,
            bos=special(bos_ids[0]) if bos_ids else None,
            eos=[special(token_id) for token_id in token_ids("eos")],
            chat_template=self._chat_template(tokenizer_config),
        )

    def _chat_template(self, tokenizer_config: Mapping[str, Any]) -> Optional[str]:
        template = tokenizer_config.get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            named = {entry.get("name"): entry.get("template") for entry in template}
            template = named.get("default")
        if template is None and (self.folder / "chat_template.jinja").is_file():
            template = (self.folder / "chat_template.jinja").read_text(encoding="utf-8")
        return template
