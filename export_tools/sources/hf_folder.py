"""A Hugging Face Llama folder: config.json, *.safetensors, tokenizer.json (+ configs)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import torch
from tqdm import tqdm

from ..errors import ExportError
from ..params import Llama3RopeScaling, LlamaParams, positive_int
from .base import (
    LoadedModel,
    ModelSource,
    PathLike,
    SpecialToken,
    StateDict,
    TokenizerInfo,
    checked_state_dict,
    meta_key,
    read_json,
)

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
        config = read_json(self.folder / "config.json", "model config")
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
        state_dict = checked_state_dict(params, tensors, what=str(self.folder))
        origin = {"kind": "hf", "folder": self.folder.name, "name_or_path": config.get("_name_or_path")}
        return LoadedModel(params, state_dict, self._tokenizer(config), origin)

    @staticmethod
    def _meta_key(name: str) -> str:
        key = meta_key(name, _HF_GLOBAL_TENSORS, _HF_LAYER_NAME, _HF_LAYER_TENSORS)
        if key is None:
            raise ExportError(f"safetensors tensor '{name}' does not belong to a plain Llama model")
        return key

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
        dim = positive_int(required("hidden_size"), "hidden_size")
        n_heads = positive_int(required("num_attention_heads"), "num_attention_heads")
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
            read_json(tokenizer_config_path, "tokenizer config") if tokenizer_config_path.is_file() else {}
        )
        generation_config_path = self.folder / "generation_config.json"
        generation_config = (
            read_json(generation_config_path, "generation config") if generation_config_path.is_file() else {}
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
