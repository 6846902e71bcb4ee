"""Added (special) tokens, cut out of the text before the rest is tokenized."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from .unicode_regex import WHITE_SPACE


@dataclass(frozen=True)
class AddedToken:
    """An entry of tokenizer.json's `added_tokens`."""

    id: int
    content: str
    special: bool
    single_word: bool
    lstrip: bool
    rstrip: bool
    normalized: bool


class AddedTokenSplitter:
    """Cuts added tokens out of text the way HF's AddedVocabulary does.

    At each position the longest token wins (HF matches leftmost-longest): the regex
    alternation lists longer tokens first.
    """

    def __init__(self, tokens: Sequence[AddedToken]):
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
                start = max(len(text[:start].rstrip(WHITE_SPACE)), consumed)
            if token.rstrip:  # ... and after it
                stop = len(text) - len(text[stop:].lstrip(WHITE_SPACE))
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
