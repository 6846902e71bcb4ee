"""A GGUF file's tokenizer metadata (`tokenizer.ggml.*`) as a tokenizer.json document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

# llama.cpp token types (gguf.TokenType).
_GGUF_CONTROL = 3
_GGUF_USER_DEFINED = 4

# Llama 3's split (tokenizer.json of Llama 3.x; llama.cpp's "llama-bpe").
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_BYTE_LEVEL_WITH_GPT2_SPLIT = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}

# llama.cpp's `tokenizer.ggml.pre` names whose splitting rules HF pre-tokenizers reproduce
# (the same table as export_tools.gguf_tokenizer).
GGUF_PRE_TOKENIZERS: dict[str, list[dict[str, Any]]] = {
    "gpt2": [_BYTE_LEVEL_WITH_GPT2_SPLIT],
    "smollm": [{"type": "Digits", "individual_digits": True}, _BYTE_LEVEL_WITH_GPT2_SPLIT],
    "llama-bpe": [
        {"type": "Split", "pattern": {"Regex": _LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
    ],
}


def tokenizer_json_from_gguf(
    tokens: Sequence[str],
    merges: Sequence[str],
    token_types: Optional[Sequence[int]],
    pre: str,
    bos_id: Optional[int],
    add_bos: Optional[bool],
) -> dict[str, Any]:
    """The tokenizer.json document of a GGUF's byte-level BPE tokenizer (see
    Tokenizer.from_gguf_metadata for the arguments)."""
    if pre not in GGUF_PRE_TOKENIZERS:
        raise ValueError(f"GGUF pre-tokenizer {pre!r} is not supported ({', '.join(GGUF_PRE_TOKENIZERS)})")
    token_types = token_types or []
    added_tokens = [
        {
            "id": token_id, "content": tokens[token_id], "special": kind == _GGUF_CONTROL,
            "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
        }
        for token_id, kind in enumerate(token_types)
        if kind in (_GGUF_CONTROL, _GGUF_USER_DEFINED)
    ]
    if add_bos is None:
        add_bos = pre == "llama-bpe"
    post_processor = None
    if add_bos and bos_id is not None:
        bos = tokens[bos_id]
        post_processor = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        }
    return {
        "added_tokens": added_tokens,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": GGUF_PRE_TOKENIZERS[pre]},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel"},
        "model": {
            "type": "BPE",
            "vocab": {text: token_id for token_id, text in enumerate(tokens)},
            "merges": merges,
            # llama.cpp looks whole Llama-3 words up in the vocabulary before merging.
            "ignore_merges": pre == "llama-bpe",
        },
    }
