"""GPT-2's byte-level alphabet: a printable character for each byte 0..255."""

from __future__ import annotations


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
BYTE_TO_CHAR = _byte_level_alphabet()
CHAR_TO_BYTE = {char: byte for byte, char in enumerate(BYTE_TO_CHAR)}


def to_byte_level(text: str) -> str:
    """`text`'s UTF-8 bytes, each as the character that stands for it."""
    return text.encode("utf-8").decode("latin-1").translate(BYTE_TO_CHAR)
