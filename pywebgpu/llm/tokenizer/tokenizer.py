"""The Tokenizer: a tokenizer.json's stages put together, and decoding back to text."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, Union

from .added_tokens import AddedToken, AddedTokenSplitter
from .bpe import BPEModel
from .byte_level import CHAR_TO_BYTE
from .checks import TokenizerError, check_config
from .gguf import tokenizer_json_from_gguf
from .pipeline import normalizer, pre_tokenizer_members, pre_tokenizer_step, template_ids


# Names of end-of-text / end-of-turn tokens, for tokenizer.json files that come without
# the model's generation config.
_WELL_KNOWN_END_TOKENS = frozenset(
    ["<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "</s>"]
)


@contextmanager
def _stage(name: str):
    """A stage's own fields are read as it is built: a missing or mistyped one there is a
    TokenizerError naming the stage."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError, re.error) as error:
        raise TokenizerError(f"tokenizer.json: '{name}' is malformed ({type(error).__name__}: {error})") from None


class Tokenizer:
    """A byte-level BPE tokenizer that encodes and decodes like HF `tokenizers`."""

    def __init__(
        self, config: Mapping[str, Any], *, bos_id: Optional[int] = None, eos_ids: Optional[Iterable[int]] = None
    ):
        """`config` is a parsed tokenizer.json; see `from_json` for bos_id / eos_ids."""
        check_config(config)
        with _stage("model"):
            self._model = BPEModel(config["model"])
        decoder = config.get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            raise TokenizerError(f"unsupported decoder {decoder.get('type')!r} (only ByteLevel)")

        vocab = self._model.vocab
        added = [
            AddedToken(
                id=entry["id"], content=entry["content"], special=entry.get("special", False),
                single_word=entry.get("single_word", False), lstrip=entry.get("lstrip", False),
                rstrip=entry.get("rstrip", False),
                normalized=entry.get("normalized", not entry.get("special", False)),
            )
            for entry in config.get("added_tokens") or []
        ]
        # Tokens that are not normalized are found in the raw text, the others after
        # normalization (HF's order).
        self._raw_added = AddedTokenSplitter([token for token in added if not token.normalized])
        self._normalized_added = AddedTokenSplitter([token for token in added if token.normalized])
        self._special_ids = frozenset(token.id for token in added if token.special)

        with _stage("normalizer"):
            self._normalize = normalizer(config.get("normalizer"))
        with _stage("pre_tokenizer"):
            pre_tokenizers = pre_tokenizer_members(config.get("pre_tokenizer"))
            if not any(member["type"] == "ByteLevel" for member in pre_tokenizers):
                raise TokenizerError("the pre-tokenizer has no ByteLevel step: not a byte-level BPE tokenizer")
            self._pre_tokenizer = [pre_tokenizer_step(member) for member in pre_tokenizers]
        with _stage("post_processor"):
            self._template_before, self._template_after = template_ids(config.get("post_processor"))

        size = max([*vocab.values(), *(token.id for token in added)], default=-1) + 1
        self._id_to_token: list[Optional[str]] = [None] * size
        for text, token_id in vocab.items():
            self._id_to_token[token_id] = text
        for token in added:
            self._id_to_token[token.id] = token.content
        self._added_ids = {token.content: token.id for token in added}

        self.bos_id: Optional[int] = bos_id if bos_id is not None else next(iter(self._template_before), None)
        self.eos_ids: list[int] = (
            list(eos_ids) if eos_ids is not None
            else sorted(token.id for token in added if token.special and token.content in _WELL_KNOWN_END_TOKENS)
        )
        self._bytes_cache: dict[int, bytes] = {}

    # -- construction --

    @classmethod
    def from_json(
        cls,
        text_or_dict: Union[str, Mapping[str, Any]],
        *,
        bos_id: Optional[int] = None,
        eos_ids: Optional[Iterable[int]] = None,
    ) -> Tokenizer:
        """From a tokenizer.json document (text or already parsed).

        tokenizer.json does not name BOS/EOS: bos_id defaults to the token the
        post-processor puts first (Llama 3's <|begin_of_text|>), eos_ids to the special
        tokens with well-known end-of-text / end-of-turn names (<|eot_id|>, <|im_end|>, ...).
        """
        try:
            config = json.loads(text_or_dict) if isinstance(text_or_dict, str) else text_or_dict
        except ValueError as error:
            raise TokenizerError(f"tokenizer.json is not valid JSON ({error})") from None
        return cls(config, bos_id=bos_id, eos_ids=eos_ids)

    @classmethod
    def from_file(
        cls, path: Union[str, Path], *, bos_id: Optional[int] = None, eos_ids: Optional[Iterable[int]] = None
    ) -> Tokenizer:
        """From a tokenizer.json file; see `from_json`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"), bos_id=bos_id, eos_ids=eos_ids)

    @classmethod
    def from_gguf_metadata(
        cls,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Optional[Sequence[int]],
        pre: str,
        bos_id: Optional[int] = None,
        eos_id: Union[int, Iterable[int], None] = None,
        *,
        add_bos: Optional[bool] = None,
    ) -> Tokenizer:
        """From the values of a GGUF's `tokenizer.ggml.*` keys, as plain Python lists.

        tokens, merges, token_types and pre are `tokenizer.ggml.tokens`, `.merges`,
        `.token_type` and `.pre` (only byte-level BPE: `.model` must be "gpt2"); bos_id is
        `.bos_token_id`; eos_id is `.eos_token_id`, or a list of ids that end generation
        (EOS, end-of-turn, ...). add_bos is `.add_bos_token` (absent: llama.cpp's default,
        true for "llama-bpe" only). Control tokens become special added tokens and
        user-defined ones plain added tokens, as llama.cpp treats them.
        """
        config = tokenizer_json_from_gguf(tokens, merges, token_types, pre, bos_id, add_bos)
        eos_ids = [eos_id] if isinstance(eos_id, int) else list(eos_id or [])
        return cls(config, bos_id=bos_id, eos_ids=eos_ids)

    # -- vocabulary --

    @property
    def vocab_size(self) -> int:
        """Number of ids (model vocabulary and added tokens): one more than the largest."""
        return len(self._id_to_token)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._added_ids.get(token, self._model.vocab.get(token))

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._id_to_token[token_id] if 0 <= token_id < len(self._id_to_token) else None

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special_ids

    # -- encoding --

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of `text`. Added tokens written in it (e.g. <|im_start|>) become their
        ids; add_special_tokens adds what the post-processor adds (e.g. Llama 3's BOS)."""
        ids: list[int] = []
        for part, token_id in self._raw_added.split(text):
            if token_id is not None:
                ids.append(token_id)
                continue
            if self._normalize is not None:
                part = self._normalize(part)
            for piece, piece_token_id in self._normalized_added.split(part):
                if piece_token_id is not None:
                    ids.append(piece_token_id)
                else:
                    self._encode_plain(piece, ids)
        if add_special_tokens:
            ids = self._template_before + ids + self._template_after
        return ids

    def _encode_plain(self, text: str, ids: list[int]) -> None:
        """Appends the ids of text that holds no added token."""
        if not text:  # (HF adds no prefix space to nothing)
            return
        words = [text]
        for step in self._pre_tokenizer:
            words = step(words)
        self._model.encode_words(words, ids)

    # -- decoding --

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (b"" for an id with no token)."""
        cached = self._bytes_cache.get(token_id)
        if cached is None:
            token = self.id_to_token(token_id) or ""
            try:
                cached = bytes(CHAR_TO_BYTE[char] for char in token)
            except KeyError:  # not byte-level text (an added token like "<|x y|>"): itself
                cached = token.encode("utf-8")
            self._bytes_cache[token_id] = cached
        return cached

    def decode_bytes(self, ids: Iterable[int], skip_special_tokens: bool = False) -> bytes:
        return b"".join(
            self.token_bytes(token_id) for token_id in ids
            if not (skip_special_tokens and token_id in self._special_ids)
        )

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD, as in HF."""
        return self.decode_bytes(ids, skip_special_tokens).decode("utf-8", errors="replace")


class StreamDecoder:
    """Decodes ids one at a time, for printing text while it is generated.

    `push` returns only whole characters: the bytes of a character split across tokens
    are held back until it is complete, so no chunk ends in a U+FFFD that the full text
    does not have. The chunks joined (with `flush()` last) equal `tokenizer.decode(ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.decode_bytes([token_id], self._skip_special_tokens))

    def flush(self) -> str:
        """The held-back rest (a U+FFFD per incomplete character), then starts afresh."""
        return self._utf8.decode(b"", final=True)
