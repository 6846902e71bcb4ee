"""Rebuild a Hugging Face `tokenizers` tokenizer.json from GGUF tokenizer metadata.

Only byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`) can be rebuilt, and
only for pre-tokenizers whose llama.cpp splitting rules are reproduced here exactly
(`tokenizer.ggml.pre`). For anything else the export goes on without a tokenizer file
(with a warning) rather than ship one that splits text differently from llama.cpp.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Optional

from .errors import ExportWarning
from .sources.base import SpecialToken, TokenizerInfo

# llama.cpp token types (gguf.TokenType).
_CONTROL = 3
_USER_DEFINED = 4

# Llama 3's split pattern (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3, HF tokenizer.json).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer(pre: str):
    """The pre-tokenizer for a llama.cpp `tokenizer.ggml.pre` name, or None if unknown."""
    from tokenizers import Regex, pre_tokenizers

    # ByteLevel's own regex is GPT-2's: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|...
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "gpt2":
        return gpt2
    if pre == "smollm":  # llama.cpp: "\p{N}" (every digit alone), then GPT-2's regex
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2])
    if pre == "llama-bpe":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return None


def _byte_level_bpe_json(
    metadata: Mapping[str, Any], tokens: list[str], bos: Optional[SpecialToken], eos: list[SpecialToken]
) -> Optional[str]:
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    model = metadata.get("tokenizer.ggml.model")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if model != "gpt2":
        warnings.warn(f"GGUF tokenizer model '{model}' cannot be rebuilt (only 'gpt2' byte-level BPE); no tokenizer file written", ExportWarning)
        return None
    pre_tokenizer = _pre_tokenizer(pre)
    if pre_tokenizer is None:
        warnings.warn(f"GGUF pre-tokenizer '{pre}' is not supported (smollm, llama-bpe, gpt2); no tokenizer file written", ExportWarning)
        return None

    merges = [tuple(merge.split(" ", 1)) for merge in metadata.get("tokenizer.ggml.merges", [])]
    tokenizer = Tokenizer(
        models.BPE(
            vocab={text: token_id for token_id, text in enumerate(tokens)},
            merges=merges,
            # llama.cpp looks whole Llama-3 words up in the vocabulary before merging.
            ignore_merges=pre == "llama-bpe",
        )
    )
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()

    token_types = metadata.get("tokenizer.ggml.token_type", [])
    # Their ids are already in the vocabulary, so adding them only marks them as atomic.
    tokenizer.add_special_tokens(
        [AddedToken(tokens[i], special=True, normalized=False) for i, kind in enumerate(token_types) if kind == _CONTROL]
    )
    tokenizer.add_tokens(
        [AddedToken(tokens[i], special=False, normalized=False) for i, kind in enumerate(token_types) if kind == _USER_DEFINED]
    )

    # Like HF's tokenizer.json files: encoding with special tokens adds BOS/EOS itself.
    add_bos = metadata.get("tokenizer.ggml.add_bos_token", pre == "llama-bpe") and bos is not None
    add_eos = metadata.get("tokenizer.ggml.add_eos_token", False) and bool(eos)
    prefix = [bos] if add_bos else []
    suffix = [eos[0]] if add_eos else []
    if prefix or suffix:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=[f"{token.text}:0" for token in prefix] + ["$A:0"] + [f"{token.text}:0" for token in suffix],
            special_tokens=[(token.text, token.id) for token in dict.fromkeys(prefix + suffix)],
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer.to_str()


def tokenizer_from_gguf_metadata(metadata: Mapping[str, Any]) -> Optional[TokenizerInfo]:
    """Tokenizer, special tokens and chat template from a GGUF's metadata (None if it has no vocabulary)."""
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not tokens:
        return None

    def special(key: str) -> Optional[SpecialToken]:
        token_id = metadata.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is None or not 0 <= token_id < len(tokens):
            return None
        return SpecialToken(int(token_id), tokens[token_id])

    bos = special("bos")
    # Instruct models stop at end-of-turn / end-of-message too (llama.cpp's EOG set).
    eos = list(dict.fromkeys(token for token in map(special, ("eos", "eot", "eom")) if token is not None))
    return TokenizerInfo(
        tokenizer_json=_byte_level_bpe_json(metadata, tokens, bos, eos),
        bos=bos,
        eos=eos,
        chat_template=metadata.get("tokenizer.chat_template"),
    )
