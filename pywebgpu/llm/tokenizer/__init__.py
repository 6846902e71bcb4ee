"""Byte-level BPE tokenizer (GPT-2, Llama 3, SmolLM2, ...) in pure Python.

It reads a Hugging Face `tokenizers` tokenizer.json, or the tokenizer metadata of a GGUF
file (`Tokenizer.from_gguf_metadata`, via `gguf`), and encodes text to exactly the ids
that HF `tokenizers` gives: added/special tokens are cut out of the text first
(`added_tokens`), the rest is normalized and pre-tokenized (`pipeline`: regex splits,
digit splits, byte-level mapping) and each pre-token is merged by BPE (`bpe`). Decoding
maps tokens back to bytes (`byte_level`); `StreamDecoder` turns a stream of ids into text
without ever cutting a UTF-8 character in two.

Only the standard library is used (the runtime runs in Pyodide). The pre-tokenizer regexes
of tokenizer.json are Oniguruma patterns with `\\p{L}`-style Unicode classes, which
Python's `re` lacks; `unicode_regex` rewrites them into explicit character classes built
from `unicodedata`.
"""

from .checks import TokenizerError
from .tokenizer import StreamDecoder, Tokenizer

__all__ = ["StreamDecoder", "Tokenizer", "TokenizerError"]
