"""A llama.cpp GGUF file of architecture `llama`: its tensors as stored and dequantized to fp32."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..errors import ExportError
from ..params import Llama3RopeScaling, LlamaParams
from .base import GGUFTensor, LoadedModel, ModelSource, PathLike, StateDict, checked_state_dict, meta_key

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


class GGUFSource(ModelSource):
    """A llama.cpp GGUF file of architecture `llama`.

    `load` keeps every tensor as stored (`LoadedModel.gguf_tensors`, for the exact export)
    and dequantizes it to fp32 with `gguf.quants.dequantize` (the state dict).

    Geometry, RoPE theta and RMSNorm eps come from the GGUF metadata; Llama-3 RoPE scaling
    from the `rope_freqs.weight` factors llama.cpp stores. The tokenizer is rebuilt from
    the metadata (see `gguf_tokenizer`).
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)

    def load(self, *, progress: bool = False) -> LoadedModel:
        import gguf

        from ..gguf_tokenizer import tokenizer_from_gguf_metadata

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
        stored: dict[str, GGUFTensor] = {}
        for name, tensor in tqdm(
            tensors_by_name.items(), desc="dequantize GGUF", disable=not progress
        ):
            if name == "rope_freqs.weight":
                continue  # folded into params.rope_scaling
            key = meta_key(name, _GGUF_GLOBAL_TENSORS, _GGUF_LAYER_NAME, _GGUF_LAYER_TENSORS)
            if key is None:
                raise ExportError(f"GGUF tensor '{name}' does not belong to a plain Llama model")
            try:
                values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            except NotImplementedError as error:
                raise ExportError(f"GGUF tensor '{name}': {error}") from None
            # GGUF lists dimensions fastest-first; PyTorch wants them the other way round.
            shape = [int(n) for n in reversed(tensor.shape)]
            tensors[key] = torch.tensor(values, dtype=torch.float32).reshape(shape)
            stored[key] = GGUFTensor(name, tensor.tensor_type.name, tensor.data, tuple(shape))
        state_dict = checked_state_dict(params, tensors, what=self.path.name)
        if "output.weight" not in stored:
            stored["output.weight"] = stored["tok_embeddings.weight"]
        tokenizer = tokenizer_from_gguf_metadata(metadata)
        origin = {"kind": "gguf", "file": self.path.name, "name": metadata.get("general.name")}
        return LoadedModel(params, state_dict, tokenizer, origin, gguf_tensors=stored)

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
