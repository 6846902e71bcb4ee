"""Weight sources: each turns its input into Meta-style fp32 weights plus a LlamaParams.

Meta-style keys are what ExecuTorch's Llama model loads (`tok_embeddings.weight`,
`layers.N.attention.wq.weight`, `layers.N.feed_forward.w1.weight`, ...), and Meta's
rotary layout rotates interleaved pairs (x[2i], x[2i+1]) of each head: that is also the
layout of `et_vk.apply_rotary_emb`.

base.py holds what they return (`LoadedModel`, `TokenizerInfo`) and the checks they
share; one module per source: random_weights, meta_checkpoint, gguf_file, hf_folder.
"""

from .base import GGUFTensor, LoadedModel, ModelSource, PathLike, SpecialToken, StateDict, TokenizerInfo
from .gguf_file import GGUFSource
from .hf_folder import HFSource, hf_to_meta_rotary
from .meta_checkpoint import MetaCheckpointSource
from .random_weights import RandomSource

__all__ = [
    "GGUFSource",
    "GGUFTensor",
    "HFSource",
    "LoadedModel",
    "MetaCheckpointSource",
    "ModelSource",
    "PathLike",
    "RandomSource",
    "SpecialToken",
    "StateDict",
    "TokenizerInfo",
    "hf_to_meta_rotary",
]
