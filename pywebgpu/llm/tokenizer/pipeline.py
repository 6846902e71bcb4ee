"""The tokenizer.json stages around the BPE model, as Python callables: the normalizer,
the pre-tokenizer's steps (regex splits, digit splits, byte-level mapping) and the ids
the post-processor adds."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Callable, Optional

from .byte_level import to_byte_level
from .unicode_regex import compile_pattern
from .checks import TokenizerError


# GPT-2's split, the one HF's ByteLevel pre-tokenizer applies when use_regex is true.
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

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
        raise TokenizerError(f"unsupported split behavior {behavior!r}")
    return [text for text in pieces if text]


def _split_step(regex: re.Pattern[str], behavior: str, invert: bool) -> PreTokenizerStep:
    def step(pieces: list[str]) -> list[str]:
        return [part for piece in pieces for part in _split(piece, regex, behavior, invert)]

    return step


def _byte_level_step(add_prefix_space: bool, use_regex: bool) -> PreTokenizerStep:
    gpt2_regex = compile_pattern(_GPT2_PATTERN) if use_regex else None

    def step(pieces: list[str]) -> list[str]:
        words = []
        for piece in pieces:
            if add_prefix_space and not piece.startswith(" "):
                piece = " " + piece
            # findall is an isolating split here: every character is a letter, a number,
            # white space or something else, and each of those is matched by the pattern.
            for word in gpt2_regex.findall(piece) if gpt2_regex else (piece,):
                words.append(to_byte_level(word))
        return words

    return step


def pre_tokenizer_members(config: Optional[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pre-tokenizers of a (possibly nested) Sequence, in order."""
    if config is None:
        return []
    if config["type"] == "Sequence":
        return [member for inner in config["pretokenizers"] for member in pre_tokenizer_members(inner)]
    return [config]


def pre_tokenizer_step(config: Mapping[str, Any]) -> PreTokenizerStep:
    """The step of one (non-Sequence) pre-tokenizer: a list of pieces → the pieces cut further."""
    kind = config["type"]
    if kind == "ByteLevel":
        return _byte_level_step(config.get("add_prefix_space", True), config.get("use_regex", True))
    if kind == "Split":
        pattern = config["pattern"]
        regex = compile_pattern(pattern["Regex"]) if "Regex" in pattern else re.compile(re.escape(pattern["String"]))
        return _split_step(regex, config["behavior"], config.get("invert", False))
    if kind == "Digits":
        # HF splits on char::is_numeric, i.e. \p{N}, not only on 0-9.
        behavior = "Isolated" if config.get("individual_digits", False) else "Contiguous"
        return _split_step(compile_pattern(r"\p{N}"), behavior, False)
    raise TokenizerError(f"unsupported pre-tokenizer {kind!r}")


def normalizer(config: Optional[Mapping[str, Any]]) -> Optional[Callable[[str], str]]:
    """The normalizer's function of text, or None where there is none."""
    if config is None:
        return None
    kind = config["type"]
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return functools.partial(unicodedata.normalize, kind)
    if kind == "Sequence":
        members = [normalizer(member) for member in config["normalizers"]]

        def normalize_in_turn(text: str) -> str:
            for member in members:
                text = member(text)
            return text

        return normalize_in_turn
    raise TokenizerError(f"unsupported normalizer {kind!r}")


def template_ids(config: Optional[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
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
            member_before, member_after = template_ids(member)
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
    raise TokenizerError(f"unsupported post-processor {kind!r}")
