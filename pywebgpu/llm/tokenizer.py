"""Byte-level BPE tokenizer (GPT-2, Llama 3, SmolLM2, ...) in pure Python.

It reads a Hugging Face `tokenizers` tokenizer.json, or the tokenizer metadata of a GGUF
file (`Tokenizer.from_gguf_metadata`), and encodes text to exactly the ids that HF
`tokenizers` gives: added/special tokens are cut out of the text first, the rest is
normalized, pre-tokenized (regex splits, digit splits, byte-level mapping) and each
pre-token is merged by BPE. Decoding maps tokens back to bytes; `StreamDecoder` turns a
stream of ids into text without ever cutting a UTF-8 character in two.

Only the standard library is used (the runtime runs in Pyodide). The pre-tokenizer regexes
of tokenizer.json are Oniguruma patterns with `\\p{L}`-style Unicode classes, which
Python's `re` lacks; they are rewritten into explicit character classes built from
`unicodedata` (see `_translate_regex`).
"""

from __future__ import annotations

import codecs
import functools
import heapq
import itertools
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

__all__ = ["Tokenizer", "StreamDecoder"]


# --- GPT-2's byte <-> printable character table -------------------------------------------

def _byte_level_alphabet() -> str:
    """The character that stands for each byte 0..255 in a byte-level vocabulary.

    Printable Latin-1 bytes stand for themselves; the others (controls, space, ...) are
    moved to U+0100 onwards, so that every token is a readable, whitespace-free string.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    chars = {}
    moved = 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + moved)
            moved += 1
    return "".join(chars[byte] for byte in range(256))


# Indexed by byte value: str.translate maps the code points 0..255 of a latin-1 decoded
# byte string through it in one C-level pass.
_BYTE_TO_CHAR = _byte_level_alphabet()
_CHAR_TO_BYTE = {char: byte for byte, char in enumerate(_BYTE_TO_CHAR)}


def _to_byte_level(text: str) -> str:
    return text.encode("utf-8").decode("latin-1").translate(_BYTE_TO_CHAR)


# --- Oniguruma patterns -> Python `re` ------------------------------------------------------

# Unicode's White_Space property: what Oniguruma's `\s` matches. Python's `\s` also matches
# U+001C..U+001F (str.isspace), which HF treats as ordinary symbols.
_WHITE_SPACE_RANGES = (
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)
_WHITE_SPACE = "".join(chr(cp) for low, high in _WHITE_SPACE_RANGES for cp in range(low, high + 1))

Ranges = list[tuple[int, int]]


@functools.cache
def _general_category_ranges() -> dict[str, Ranges]:
    """Code point ranges of each Unicode general category (Lu, Ll, Nd, ...).

    Computed once, on the first tokenizer that needs a `\\p{...}` class other than \\p{L}
    and \\p{N} (about 0.2 s in CPython: one pass over all code points).
    """
    ranges: dict[str, Ranges] = {}
    start = 0
    for category, run in itertools.groupby(map(unicodedata.category, map(chr, range(0x110000)))):
        length = sum(1 for _ in run)
        ranges.setdefault(category, []).append((start, start + length - 1))
        start += length
    return ranges


def _coalesced(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: Ranges = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _complement(ranges: Ranges) -> Ranges:
    gaps: Ranges = []
    next_low = 0
    for low, high in ranges:
        if low > next_low:
            gaps.append((next_low, low - 1))
        next_low = high + 1
    if next_low <= 0x10FFFF:
        gaps.append((next_low, 0x10FFFF))
    return gaps


def _all_code_points() -> str:
    """Every code point, U+0000 .. U+10FFFF, in order, as one string: decoded from its
    UTF-32 bytes, which are laid down a byte column at a time (~0.02 s in CPython, where
    joining chr() of each code point takes ~0.2 s)."""
    count = 0x110000
    utf32 = bytearray(4 * count)
    utf32[0::4] = bytes(range(256)) * (count // 256)
    utf32[1::4] = b"".join(bytes([byte]) * 256 for byte in range(256)) * (count // 65536)
    utf32[2::4] = b"".join(bytes([plane]) * 65536 for plane in range(count // 65536))
    return utf32.decode("utf-32-le", "surrogatepass")


@functools.cache
def _letter_and_number_ranges() -> dict[str, Ranges]:
    """The code point ranges of \\p{L} and \\p{N}, the classes common pre-tokenizers use
    (GPT-2's, Llama 3's, SmolLM2's), without a category lookup per code point (~0.6 s in
    Pyodide, on every page's model load; this takes ~0.05 s in CPython).

    Letters are exactly what str.isalpha accepts, and numbers (Nd, Nl, No) are numeric
    characters, so both are alphanumeric: `re` finds the runs of alphanumeric characters
    over all code points, a run of letters only is one range of L, and in the few other
    runs each character is a letter or else a number.
    """
    letters: Ranges = []
    numbers: Ranges = []
    for run in re.finditer(r"[^\W_]+", _all_code_points()):
        word = run.group()
        if word.isalpha():
            letters.append((run.start(), run.end() - 1))
            continue
        for code_point, char in enumerate(word, run.start()):
            (letters if char.isalpha() else numbers).append((code_point, code_point))
    return {"L": _coalesced(letters), "N": _coalesced(numbers)}


def _property_ranges(name: str) -> Ranges:
    """Ranges of a general category given by its short name: one letter (L) or two (Lu)."""
    if name in ("L", "N"):
        return _letter_and_number_ranges()[name]
    categories = _general_category_ranges()
    if len(name) == 1:
        members = [ranges for category, ranges in categories.items() if category[0] == name]
    else:
        members = [categories[name]] if name in categories else []
    if not members:
        raise ValueError(f"unsupported Unicode property \\p{{{name}}} in a pre-tokenizer regex")
    return _coalesced(itertools.chain.from_iterable(members))


def _class_body(ranges: Ranges) -> str:
    """The inside of a `re` character class (between the brackets) matching `ranges`."""
    return "".join(
        f"\\U{low:08x}" if low == high else f"\\U{low:08x}-\\U{high:08x}" for low, high in ranges
    )


def _read_property_name(pattern: str, index: int) -> tuple[str, int]:
    """The name after `\\p` at `index` (`{L}`, `{^L}` or `L`) and the index after it."""
    if pattern.startswith("{", index):
        end = pattern.index("}", index)
        return pattern[index + 1 : end], end + 1
    return pattern[index], index + 1


def _translate_regex(pattern: str) -> str:
    """An Oniguruma pattern (as HF tokenizer.json has them) rewritten for Python's `re`.

    `\\p{..}` / `\\P{..}` become explicit classes and `\\s` / `\\S` Unicode White_Space
    classes, both inside and outside brackets. The rest of the syntax the common
    pre-tokenizer patterns use (`(?i:..)`, lookahead, `{1,3}`, ...) means the same in both.
    """
    out = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            kind = pattern[index + 1]
            if kind in "pP":
                name, index = _read_property_name(pattern, index + 2)
                negated = (kind == "P") != name.startswith("^")
                ranges = _property_ranges(name.lstrip("^"))
            elif kind in "sS":
                negated = kind == "S"
                ranges = list(_WHITE_SPACE_RANGES)
                index += 2
            elif kind in "wWbB":
                # Their Unicode definitions differ between Oniguruma and Python's `re`.
                raise ValueError(f"unsupported escape \\{kind} in a pre-tokenizer regex")
            else:
                out.append(pattern[index : index + 2])
                index += 2
                continue
            body = _class_body(_complement(ranges) if negated else ranges)
            out.append(body if in_class else f"[{body}]")
            continue
        out.append(char)
        index += 1
        if in_class:
            if char == "]":
                in_class = False
            elif char == "[":
                raise ValueError("nested character classes are not supported in pre-tokenizer regexes")
        elif char == "[":
            in_class = True
            # A "]" first in a class (after an optional "^") is a literal, not its end.
            if pattern.startswith("^", index):
                out.append("^")
                index += 1
            if pattern.startswith("]", index):
                out.append("\\]")
                index += 1
    return "".join(out)


@functools.cache
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(_translate_regex(pattern))


# --- Pre-tokenizers ------------------------------------------------------------------------

# GPT-2's split, the one HF's ByteLevel pre-tokenizer applies when use_regex is true.
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Llama 3's split (tokenizer.json of Llama 3.x; llama.cpp's "llama-bpe").
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

PreTokenizerStep = Callable[[list[str]], list[str]]


def _split(piece: str, regex: re.Pattern[str], behavior: str, invert: bool) -> list[str]:
    """`piece` cut at the matches of `regex`, as HF's Split does with `behavior`."""
    segments: list[tuple[str, bool]] = []  # (text, is it a delimiter)
    end_of_last = 0
    for match in regex.finditer(piece):
        start, end = match.span()
        if start > end_of_last:
            segments.append((piece[end_of_last:start], invert))
        segments.append((piece[start:end], not invert))
        end_of_last = end
    if end_of_last < len(piece):
        segments.append((piece[end_of_last:], invert))

    pieces: list[str] = []
    if behavior == "Isolated":
        pieces = [text for text, _ in segments]
    elif behavior == "Removed":
        pieces = [text for text, is_delimiter in segments if not is_delimiter]
    elif behavior == "Contiguous":
        previous_is_delimiter = False
        for text, is_delimiter in segments:
            if pieces and is_delimiter == previous_is_delimiter:
                pieces[-1] += text
            else:
                pieces.append(text)
            previous_is_delimiter = is_delimiter
    elif behavior == "MergedWithPrevious":
        previous_is_delimiter = False
        for text, is_delimiter in segments:
            if pieces and is_delimiter and not previous_is_delimiter:
                pieces[-1] += text
            else:
                pieces.append(text)
            previous_is_delimiter = is_delimiter
    elif behavior == "MergedWithNext":
        previous_is_delimiter = False
        for text, is_delimiter in reversed(segments):
            if pieces and is_delimiter and not previous_is_delimiter:
                pieces[-1] = text + pieces[-1]
            else:
                pieces.append(text)
            previous_is_delimiter = is_delimiter
        pieces.reverse()
    else:
        raise ValueError(f"unsupported split behavior {behavior!r}")
    return [text for text in pieces if text]


def _split_step(regex: re.Pattern[str], behavior: str, invert: bool) -> PreTokenizerStep:
    def step(pieces: list[str]) -> list[str]:
        return [part for piece in pieces for part in _split(piece, regex, behavior, invert)]

    return step


def _byte_level_step(add_prefix_space: bool, use_regex: bool) -> PreTokenizerStep:
    gpt2_regex = _compile(_GPT2_PATTERN) if use_regex else None

    def step(pieces: list[str]) -> list[str]:
        words = []
        for piece in pieces:
            if add_prefix_space and not piece.startswith(" "):
                piece = " " + piece
            # findall is an isolating split here: every character is a letter, a number,
            # white space or something else, and each of those is matched by the pattern.
            for word in gpt2_regex.findall(piece) if gpt2_regex else (piece,):
                words.append(_to_byte_level(word))
        return words

    return step


def _pre_tokenizer_members(config: Optional[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pre-tokenizers of a (possibly nested) Sequence, in order."""
    if config is None:
        return []
    if config["type"] == "Sequence":
        return [member for inner in config["pretokenizers"] for member in _pre_tokenizer_members(inner)]
    return [config]


def _pre_tokenizer_step(config: Mapping[str, Any]) -> PreTokenizerStep:
    kind = config["type"]
    if kind == "ByteLevel":
        return _byte_level_step(config.get("add_prefix_space", True), config.get("use_regex", True))
    if kind == "Split":
        pattern = config["pattern"]
        regex = _compile(pattern["Regex"]) if "Regex" in pattern else re.compile(re.escape(pattern["String"]))
        return _split_step(regex, config["behavior"], config.get("invert", False))
    if kind == "Digits":
        # HF splits on char::is_numeric, i.e. \p{N}, not only on 0-9.
        behavior = "Isolated" if config.get("individual_digits", False) else "Contiguous"
        return _split_step(_compile(r"\p{N}"), behavior, False)
    raise ValueError(f"unsupported pre-tokenizer {kind!r}")


def _normalizer(config: Optional[Mapping[str, Any]]) -> Optional[Callable[[str], str]]:
    if config is None:
        return None
    kind = config["type"]
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return functools.partial(unicodedata.normalize, kind)
    if kind == "Sequence":
        members = [_normalizer(member) for member in config["normalizers"]]

        def normalize_in_turn(text: str) -> str:
            for member in members:
                text = member(text)
            return text

        return normalize_in_turn
    raise ValueError(f"unsupported normalizer {kind!r}")


def _template_ids(config: Optional[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """The ids the post-processor puts before and after a single sequence."""
    if config is None:
        return [], []
    kind = config["type"]
    if kind == "ByteLevel":  # only adjusts offsets
        return [], []
    if kind == "Sequence":
        before: list[int] = []
        after: list[int] = []
        for member in config["processors"]:
            member_before, member_after = _template_ids(member)
            before = member_before + before
            after = after + member_after
        return before, after
    if kind == "TemplateProcessing":
        before, after = [], []
        seen_sequence = False
        for item in config["single"]:
            if "Sequence" in item:
                seen_sequence = True
            else:
                ids = config["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                (after if seen_sequence else before).extend(ids)
        return before, after
    raise ValueError(f"unsupported post-processor {kind!r}")


# --- Added (special) tokens -------------------------------------------------------------------

@dataclass(frozen=True)
class _AddedToken:
    id: int
    content: str
    special: bool
    single_word: bool
    lstrip: bool
    rstrip: bool
    normalized: bool


class _AddedTokenSplitter:
    """Cuts added tokens out of text the way HF's AddedVocabulary does.

    At each position the longest token wins (HF matches leftmost-longest): the regex
    alternation lists longer tokens first.
    """

    def __init__(self, tokens: Sequence[_AddedToken]):
        self._by_content = {token.content: token for token in tokens}
        by_length = sorted(self._by_content, key=len, reverse=True)
        self._regex = re.compile("|".join(map(re.escape, by_length))) if by_length else None

    def split(self, text: str) -> list[tuple[str, Optional[int]]]:
        """(text, None) for plain stretches, ("", id) for each added token, in order."""
        if self._regex is None:
            return [(text, None)]
        parts: list[tuple[str, Optional[int]]] = []
        consumed = 0
        for match in self._regex.finditer(text):
            token = self._by_content[match.group()]
            start, stop = match.span()
            if token.single_word and (_ends_with_word(text[:start]) or _starts_with_word(text[stop:])):
                continue
            if token.lstrip:  # the token swallows the white space before it
                start = max(len(text[:start].rstrip(_WHITE_SPACE)), consumed)
            if token.rstrip:  # ... and after it
                stop = len(text) - len(text[stop:].lstrip(_WHITE_SPACE))
            if consumed < start:
                parts.append((text[consumed:start], None))
            parts.append(("", token.id))
            consumed = stop
        if consumed < len(text):
            parts.append((text[consumed:], None))
        return parts


def _ends_with_word(text: str) -> bool:
    return bool(text) and text[-1].isalnum()


def _starts_with_word(text: str) -> bool:
    return bool(text) and text[0].isalnum()


# --- GGUF metadata -> tokenizer.json --------------------------------------------------------

# llama.cpp token types (gguf.TokenType).
_GGUF_CONTROL = 3
_GGUF_USER_DEFINED = 4

_GGUF_BYTE_LEVEL_WITH_GPT2_SPLIT = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}

# llama.cpp's `tokenizer.ggml.pre` names whose splitting rules HF pre-tokenizers reproduce
# (the same table as export_tools.gguf_tokenizer).
_GGUF_PRE_TOKENIZERS: dict[str, list[dict[str, Any]]] = {
    "gpt2": [_GGUF_BYTE_LEVEL_WITH_GPT2_SPLIT],
    "smollm": [{"type": "Digits", "individual_digits": True}, _GGUF_BYTE_LEVEL_WITH_GPT2_SPLIT],
    "llama-bpe": [
        {"type": "Split", "pattern": {"Regex": _LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
    ],
}

# Names of end-of-text / end-of-turn tokens, for tokenizer.json files that come without
# the model's generation config.
_WELL_KNOWN_END_TOKENS = frozenset(
    ["<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "</s>"]
)


# --- The tokenizer ---------------------------------------------------------------------------

class Tokenizer:
    """A byte-level BPE tokenizer that encodes and decodes like HF `tokenizers`."""

    # Words (pre-tokens) whose merges are remembered; the cache is emptied when full.
    _CACHE_LIMIT = 100_000

    def __init__(
        self, config: Mapping[str, Any], *, bos_id: Optional[int] = None, eos_ids: Optional[Iterable[int]] = None
    ):
        """`config` is a parsed tokenizer.json; see `from_json` for bos_id / eos_ids."""
        model = config["model"]
        if model.get("type", "BPE") != "BPE":
            raise ValueError(f"unsupported tokenizer model {model.get('type')!r} (only BPE)")
        for option in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
            if model.get(option):
                raise ValueError(f"BPE option {option}={model[option]!r} is not supported")
        decoder = config.get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            raise ValueError(f"unsupported decoder {decoder.get('type')!r} (only ByteLevel)")

        self._vocab: dict[str, int] = dict(model["vocab"])  # the BPE model's own, without added tokens
        self._merge_ranks: dict[tuple[str, str], int] = {
            (tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge)): rank
            for rank, merge in enumerate(model["merges"])
        }
        self._unk_token: Optional[str] = model.get("unk_token")
        self._fuse_unk: bool = model.get("fuse_unk", False)
        # Llama 3: a word that is a token as a whole is that token, merges or not.
        self._ignore_merges: bool = model.get("ignore_merges", False)

        added = [
            _AddedToken(
                id=entry["id"], content=entry["content"], special=entry.get("special", False),
                single_word=entry.get("single_word", False), lstrip=entry.get("lstrip", False),
                rstrip=entry.get("rstrip", False),
                normalized=entry.get("normalized", not entry.get("special", False)),
            )
            for entry in config.get("added_tokens") or []
        ]
        # Tokens that are not normalized are found in the raw text, the others after
        # normalization (HF's order).
        self._raw_added = _AddedTokenSplitter([token for token in added if not token.normalized])
        self._normalized_added = _AddedTokenSplitter([token for token in added if token.normalized])
        self._special_ids = frozenset(token.id for token in added if token.special)

        self._normalize = _normalizer(config.get("normalizer"))
        pre_tokenizers = _pre_tokenizer_members(config.get("pre_tokenizer"))
        if not any(member["type"] == "ByteLevel" for member in pre_tokenizers):
            raise ValueError("the pre-tokenizer has no ByteLevel step: not a byte-level BPE tokenizer")
        self._pre_tokenizer = [_pre_tokenizer_step(member) for member in pre_tokenizers]
        self._template_before, self._template_after = _template_ids(config.get("post_processor"))

        size = max([*self._vocab.values(), *(token.id for token in added)], default=-1) + 1
        self._id_to_token: list[Optional[str]] = [None] * size
        for text, token_id in self._vocab.items():
            self._id_to_token[token_id] = text
        for token in added:
            self._id_to_token[token.id] = token.content
        self._added_ids = {token.content: token.id for token in added}

        self.bos_id: Optional[int] = bos_id if bos_id is not None else next(iter(self._template_before), None)
        self.eos_ids: list[int] = (
            list(eos_ids) if eos_ids is not None
            else sorted(token.id for token in added if token.special and token.content in _WELL_KNOWN_END_TOKENS)
        )
        self._word_cache: dict[str, list[int]] = {}
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
        config = json.loads(text_or_dict) if isinstance(text_or_dict, str) else text_or_dict
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
        if pre not in _GGUF_PRE_TOKENIZERS:
            raise ValueError(f"GGUF pre-tokenizer {pre!r} is not supported ({', '.join(_GGUF_PRE_TOKENIZERS)})")
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
        config = {
            "added_tokens": added_tokens,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": _GGUF_PRE_TOKENIZERS[pre]},
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
        eos_ids = [eos_id] if isinstance(eos_id, int) else list(eos_id or [])
        return cls(config, bos_id=bos_id, eos_ids=eos_ids)

    # -- vocabulary --

    @property
    def vocab_size(self) -> int:
        """Number of ids (model vocabulary and added tokens): one more than the largest."""
        return len(self._id_to_token)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._added_ids.get(token, self._vocab.get(token))

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
        cache = self._word_cache
        for word in words:
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = self._merge(word)
                if len(cache) >= self._CACHE_LIMIT:
                    cache.clear()
                cache[word] = word_ids
            ids.extend(word_ids)

    def _merge(self, word: str) -> list[int]:
        """BPE of one pre-token, exactly as HF does it (tokenizers' Word::merge_all).

        The lowest-ranked adjacent pair is merged first, the leftmost one on ties; a heap
        holds candidate pairs and entries whose symbols have changed since are skipped.
        """
        vocab = self._vocab
        if self._ignore_merges and word in vocab:
            return [vocab[word]]
        symbols = self._initial_symbols(word)
        count = len(symbols)
        previous = list(range(-1, count - 1))
        following = [*range(1, count), -1]
        ranks = self._merge_ranks
        heap = []
        for position in range(count - 1):
            rank = ranks.get((symbols[position], symbols[position + 1]))
            if rank is not None:
                heap.append((rank, position, symbols[position] + symbols[position + 1]))
        heapq.heapify(heap)
        while heap:
            _, position, merged = heapq.heappop(heap)
            left = symbols[position]
            right_position = following[position]
            if left is None or right_position == -1:
                continue
            right = symbols[right_position]
            if (left, right) not in ranks or left + right != merged:
                continue  # the pair changed after this entry was pushed
            symbols[position] = merged
            symbols[right_position] = None
            after = following[right_position]
            following[position] = after
            if after != -1:
                previous[after] = position
            before = previous[position]
            if before != -1:
                rank = ranks.get((symbols[before], merged))
                if rank is not None:
                    heapq.heappush(heap, (rank, before, symbols[before] + merged))
            if after != -1:
                rank = ranks.get((merged, symbols[after]))
                if rank is not None:
                    heapq.heappush(heap, (rank, position, merged + symbols[after]))
        return [vocab[symbol] for symbol in symbols if symbol is not None]

    def _initial_symbols(self, word: str) -> list[Optional[str]]:
        """The word's characters as vocabulary tokens; characters missing from the
        vocabulary become the unknown token (runs of them one, with fuse_unk), or are
        dropped when there is none, as HF does."""
        symbols: list[Optional[str]] = []
        previous_unknown = False
        for char in word:
            if char in self._vocab:
                symbols.append(char)
                previous_unknown = False
            elif self._unk_token is not None:
                if not (self._fuse_unk and previous_unknown):
                    symbols.append(self._unk_token)
                previous_unknown = True
        return symbols

    # -- decoding --

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (b"" for an id with no token)."""
        cached = self._bytes_cache.get(token_id)
        if cached is None:
            token = self.id_to_token(token_id) or ""
            try:
                cached = bytes(_CHAR_TO_BYTE[char] for char in token)
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
