"""Oniguruma patterns (tokenizer.json's pre-tokenizer regexes) rewritten for Python's `re`.

Their `\\p{L}`-style Unicode classes, which `re` lacks, become explicit character classes
built from `unicodedata`; `\\s` becomes Unicode's White_Space, as in Oniguruma.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable

from .checks import TokenizerError

# Unicode's White_Space property: what Oniguruma's `\s` matches. Python's `\s` also matches
# U+001C..U+001F (str.isspace), which HF treats as ordinary symbols.
WHITE_SPACE_RANGES = (
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)
WHITE_SPACE = "".join(chr(cp) for low, high in WHITE_SPACE_RANGES for cp in range(low, high + 1))

Ranges = list[tuple[int, int]]


@functools.cache
def _general_category_ranges() -> dict[str, Ranges]:
    """Code point ranges of each Unicode general category (Lu, Ll, Nd, ...).

    Computed once, on the first tokenizer that needs a `\\p{...}` class other than \\p{L}
    and \\p{N}, since it is one pass over all code points.
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
    UTF-32 bytes, laid down a byte column at a time (far faster than joining chr() of each)."""
    count = 0x110000
    utf32 = bytearray(4 * count)
    utf32[0::4] = bytes(range(256)) * (count // 256)
    utf32[1::4] = b"".join(bytes([byte]) * 256 for byte in range(256)) * (count // 65536)
    utf32[2::4] = b"".join(bytes([plane]) * 65536 for plane in range(count // 65536))
    return utf32.decode("utf-32-le", "surrogatepass")


@functools.cache
def _letter_and_number_ranges() -> dict[str, Ranges]:
    """The code point ranges of \\p{L} and \\p{N}, the classes common pre-tokenizers use
    (GPT-2's, Llama 3's, SmolLM2's), without a category lookup per code point, which would
    be slow in Pyodide on every page's model load.

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
        raise TokenizerError(f"unsupported Unicode property \\p{{{name}}} in a pre-tokenizer regex")
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
                ranges = list(WHITE_SPACE_RANGES)
                index += 2
            elif kind in "wWbB":
                # Their Unicode definitions differ between Oniguruma and Python's `re`.
                raise TokenizerError(f"unsupported escape \\{kind} in a pre-tokenizer regex")
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
                raise TokenizerError("nested character classes are not supported in pre-tokenizer regexes")
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
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A tokenizer.json (Oniguruma) pattern compiled for Python's `re`."""
    return re.compile(_translate_regex(pattern))
