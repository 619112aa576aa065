"""GPT-2's byte <-> printable-character table and its pre-tokenization regex."""
from __future__ import annotations

import functools

from .unicode_regex import compile_onig

# The exact GPT-2 pattern tokenizers' ByteLevel uses (Oniguruma syntax).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _bytes_to_unicode() -> dict[int, str]:
    """Printable bytes map to themselves; the other 68 to U+0100.. in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTES_CHAR: dict[int, str] = _bytes_to_unicode()
CHAR_BYTES: dict[str, int] = {c: b for b, c in BYTES_CHAR.items()}
# str.translate table: a latin-1 decoded byte string -> its byte-level characters
_LATIN1_TO_BYTE_CHARS = {b: c for b, c in BYTES_CHAR.items()}


def to_byte_chars(text: str) -> str:
    return text.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_BYTE_CHARS)


def from_byte_chars(token: str) -> bytes | None:
    """The bytes a byte-level token stands for, or None if it holds a foreign character."""
    try:
        return bytes(CHAR_BYTES[c] for c in token)
    except KeyError:
        return None


@functools.cache
def gpt2_regex():
    return compile_onig(GPT2_PATTERN)
