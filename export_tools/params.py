"""Llama geometry: one validated description shared by every weight source.

Every source (random, Meta checkpoint, GGUF, Hugging Face) is reduced to a `LlamaParams`
plus a Meta-style state dict; `LlamaParams.executorch_params()` is the params.json that
ExecuTorch's Llama model (`executorch.examples.models.llama`) is built from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional

from .errors import ExportError

# ExecuTorch traces the model with the example prompt [2, 3, 4] (model.py), so the
# vocabulary must hold token 4 and the sequence bound must admit three tokens.
MIN_VOCAB_SIZE = 5


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1/3.2 RoPE frequency scaling, as ExecuTorch implements it.

    `executorch.examples.models.llama.rope.apply_scaling` fixes low_freq_factor = 1 and
    the original context length to 8192, so only these two numbers are free.
    """

    factor: int
    high_freq_factor: int = 4

    LOW_FREQ_FACTOR = 1
    ORIGINAL_CONTEXT_LEN = 8192


@dataclass(frozen=True)
class LlamaParams:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[Llama3RopeScaling] = None
    # Only recorded in the manifest: a tied model's state dict still holds output.weight
    # (a copy of the embedding), because ExecuTorch's model has a separate output layer.
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim"):
            positive_int(getattr(self, name), name)
        if not isinstance(self.vocab_size, int) or self.vocab_size < MIN_VOCAB_SIZE:
            raise ExportError(
                f"vocab_size must be an integer >= {MIN_VOCAB_SIZE}, got {self.vocab_size!r}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ExportError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.head_dim % 2:
            raise ExportError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if not self.norm_eps > 0:
            raise ExportError(f"norm_eps must be positive, got {self.norm_eps!r}")
        if not self.rope_theta > 0:
            raise ExportError(f"rope_theta must be positive, got {self.rope_theta!r}")

    # Keys of a Meta/ExecuTorch params.json that this tool understands. Anything else
    # (MoE, QK-norm, biases, sliding windows, ...) is a different architecture.
    _META_KEYS = frozenset(
        {
            "dim",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "vocab_size",
            "hidden_dim",
            "ffn_dim_multiplier",
            "multiple_of",
            "norm_eps",
            "rope_theta",
            "use_scaled_rope",
            "rope_scale_factor",
            "high_freq_factor",
            "tied_embeddings",
        }
    )
    # Run-time settings some params.json files carry; the export options decide these.
    _IGNORED_META_KEYS = frozenset({"max_seq_len", "max_batch_size", "max_context_len"})

    @classmethod
    def from_meta_params(
        cls, params: Mapping[str, Any], *, vocab_size: Optional[int] = None
    ) -> "LlamaParams":
        """Parse a Meta-style params.json dict.

        `vocab_size` fills in a missing or -1 vocab_size (old Meta checkpoints leave it to
        the tokenizer). FFN size comes from `hidden_dim` or from Meta's
        `ffn_dim_multiplier`/`multiple_of` rule. `use_scaled_rope` without
        `rope_scale_factor` means factor 32 (Llama 3.2, as ExecuTorch's llama3_2 export
        assumes); Llama 3.1 checkpoints need `"rope_scale_factor": 8`.
        """
        unknown = sorted(set(params) - cls._META_KEYS - cls._IGNORED_META_KEYS)
        if unknown:
            raise ExportError(f"unsupported params key(s) for a Llama model: {', '.join(unknown)}")
        for key in ("dim", "n_layers", "n_heads"):
            if key not in params:
                raise ExportError(f"params are missing '{key}'")
        dim = params["dim"]
        n_heads = params["n_heads"]
        head_dim = params.get("head_dim")
        if head_dim is None:
            if not isinstance(dim, int) or not isinstance(n_heads, int) or n_heads <= 0 or dim % n_heads:
                raise ExportError(
                    f"dim ({dim}) must be a multiple of n_heads ({n_heads}) when head_dim is not given"
                )
            head_dim = dim // n_heads
        params_vocab = params.get("vocab_size", -1)
        if params_vocab == -1:
            if vocab_size is None:
                raise ExportError("params are missing 'vocab_size'")
            params_vocab = vocab_size
        rope_scaling = None
        if params.get("use_scaled_rope", False):
            rope_scaling = Llama3RopeScaling(
                factor=_integral(params.get("rope_scale_factor", 32), "rope_scale_factor"),
                high_freq_factor=_integral(params.get("high_freq_factor", 4), "high_freq_factor"),
            )
        return cls(
            dim=dim,
            n_layers=params["n_layers"],
            n_heads=n_heads,
            n_kv_heads=params.get("n_kv_heads") or n_heads,
            head_dim=head_dim,
            ffn_dim=params.get("hidden_dim") or meta_ffn_dim(
                dim, params.get("ffn_dim_multiplier"), params.get("multiple_of", 256)
            ),
            vocab_size=params_vocab,
            norm_eps=float(params.get("norm_eps", 1e-5)),
            rope_theta=float(params.get("rope_theta", 10000.0)),
            rope_scaling=rope_scaling,
            tied_embeddings=bool(params.get("tied_embeddings", False)),
        )

    def executorch_params(self) -> dict[str, Any]:
        """The params.json for `executorch.examples.models.llama` (its ModelArgs)."""
        params: dict[str, Any] = {
            "dim": self.dim,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            # An explicit hidden_dim; ffn_dim_multiplier would also double ExecuTorch's
            # RoPE table (rope.py treats it as a sharded-checkpoint marker).
            "hidden_dim": self.ffn_dim,
            "vocab_size": self.vocab_size,
            "norm_eps": self.norm_eps,
            "rope_theta": self.rope_theta,
        }
        if self.rope_scaling is not None:
            params.update(
                use_scaled_rope=True,
                rope_scale_factor=self.rope_scaling.factor,
                high_freq_factor=self.rope_scaling.high_freq_factor,
            )
        return params

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of a Meta-style Llama state dict, with its shape."""
        q_dim = self.n_heads * self.head_dim
        kv_dim = self.n_kv_heads * self.head_dim
        shapes = {
            "tok_embeddings.weight": (self.vocab_size, self.dim),
            "norm.weight": (self.dim,),
            "output.weight": (self.vocab_size, self.dim),
        }
        for layer in range(self.n_layers):
            prefix = f"layers.{layer}."
            shapes.update(
                {
                    prefix + "attention_norm.weight": (self.dim,),
                    prefix + "attention.wq.weight": (q_dim, self.dim),
                    prefix + "attention.wk.weight": (kv_dim, self.dim),
                    prefix + "attention.wv.weight": (kv_dim, self.dim),
                    prefix + "attention.wo.weight": (self.dim, q_dim),
                    prefix + "ffn_norm.weight": (self.dim,),
                    prefix + "feed_forward.w1.weight": (self.ffn_dim, self.dim),
                    prefix + "feed_forward.w3.weight": (self.ffn_dim, self.dim),
                    prefix + "feed_forward.w2.weight": (self.dim, self.ffn_dim),
                }
            )
        return shapes

    def linear_in_features(self) -> dict[str, int]:
        """Input width of each kind of linear layer (what a quantization group splits)."""
        return {
            "dim": self.dim,
            "n_heads * head_dim (attention output)": self.n_heads * self.head_dim,
            "ffn_dim": self.ffn_dim,
        }

    def manifest_dict(self) -> dict[str, Any]:
        geometry = asdict(self)
        if self.rope_scaling is not None:
            geometry["rope_scaling"] = {
                "type": "llama3",
                "factor": self.rope_scaling.factor,
                "high_freq_factor": self.rope_scaling.high_freq_factor,
                "low_freq_factor": Llama3RopeScaling.LOW_FREQ_FACTOR,
                "original_max_position_embeddings": Llama3RopeScaling.ORIGINAL_CONTEXT_LEN,
            }
        return geometry


def meta_ffn_dim(dim: int, ffn_dim_multiplier: Optional[float], multiple_of: int) -> int:
    """Meta's SwiGLU hidden size rule (llama/model.py, also ExecuTorch's ModelArgs)."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * -(-hidden // multiple_of)


def positive_int(value: Any, name: str) -> int:
    """`value` if it is a positive int (not a bool); ExportError naming `name` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ExportError(f"{name} must be a positive integer, got {value!r}")
    return value


def _integral(value: Any, name: str) -> int:
    """ExecuTorch's RoPE scaling takes integers; accept 32.0 but not 32.5."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    raise ExportError(f"{name} must be a whole number for ExecuTorch's Llama-3 RoPE scaling, got {value!r}")


PRESETS: dict[str, dict[str, Any]] = {
    # Small enough to export in seconds; every linear width divisible by group size 32.
    "tiny": {
        "dim": 64,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "hidden_dim": 128,
        "vocab_size": 512,
        "norm_eps": 1e-5,
        "rope_theta": 10000.0,
    },
    # Llama-3.2-1B's geometry (Meta's params.json, with the FFN size spelled out).
    "llama3.2-1b": {
        "dim": 2048,
        "n_layers": 16,
        "n_heads": 32,
        "n_kv_heads": 8,
        "hidden_dim": 8192,
        "vocab_size": 128256,
        "norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "use_scaled_rope": True,
        "rope_scale_factor": 32,
        "high_freq_factor": 4,
        "tied_embeddings": True,
    },
    # Llama-3.2-3B's and Llama-3.1-8B's geometries (Meta's params.json likewise).
    "llama3.2-3b": {
        "dim": 3072,
        "n_layers": 28,
        "n_heads": 24,
        "n_kv_heads": 8,
        "hidden_dim": 8192,
        "vocab_size": 128256,
        "norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "use_scaled_rope": True,
        "rope_scale_factor": 32,
        "high_freq_factor": 4,
        "tied_embeddings": True,
    },
    "llama3.1-8b": {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "hidden_dim": 14336,
        "vocab_size": 128256,
        "norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "use_scaled_rope": True,
        "rope_scale_factor": 8,
        "high_freq_factor": 4,
    },
}
