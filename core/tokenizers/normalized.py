"""A normalized string that remembers where each of its characters came from.

Mirrors tokenizers' NormalizedString at character (not byte) granularity: `align[i]` is the
(start, end) span, in characters of the user's original input, that normalized character i
stands for. Token offsets are read back through it, so they point into the original text.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from .errors import TokenizerError

Span = tuple[int, int]


class Piece:
    __slots__ = ("text", "align", "orig_start")

    def __init__(self, text: str, align: list[Span], orig_start: int):
        self.text = text
        self.align = align  # one (start, end) per character of text
        self.orig_start = orig_start  # where this piece's original text begins

    @classmethod
    def original(cls, text: str, start: int = 0) -> Piece:
        return cls(text, [(i, i + 1) for i in range(start, start + len(text))], start)

    def __repr__(self) -> str:
        return f"Piece({self.text!r}, from {self.orig_start})"

    def slice(self, start: int, end: int) -> Piece:
        align = self.align[start:end]
        origin = align[0][0] if align else (self.align[start - 1][1] if start else self.orig_start)
        return Piece(self.text[start:end], align, origin)

    def span(self, start: int, end: int) -> Span:
        """Original offsets of normalized characters [start, end)."""
        if start >= end:
            at = self.align[start][0] if start < len(self.align) else (
                self.align[-1][1] if self.align else self.orig_start)
            return at, at
        return self.align[start][0], self.align[end - 1][1]

    # ------------------------------------------------------------ edits that keep alignment

    def transform(self, pairs: Iterable[tuple[str, int]]) -> None:
        """Replace the text by `pairs` of (char, change) like NormalizedString::transform:
        change 0 replaces the next original char, +1 inserts a char (aligned with the previous
        one), -n replaces one char and removes the n after it."""
        old, text, align = self.align, [], []
        idx = 0
        for c, change in pairs:
            if change > 0:
                a = old[idx - 1] if idx > 0 else (self.orig_start, self.orig_start)
            else:
                a = old[idx]
                idx += 1 - change
            text.append(c)
            align.append(a)
        self.text, self.align = "".join(text), align

    def map_chars(self, fn: Callable[[str], str]) -> None:
        """Apply `fn` per character; a character may become several, or none."""
        text, align = [], []
        for c, a in zip(self.text, self.align):
            out = fn(c)
            text.append(out)
            align.extend([a] * len(out))
        self.text, self.align = "".join(text), align

    def filter(self, keep: Callable[[str], bool]) -> None:
        kept = [(c, a) for c, a in zip(self.text, self.align) if keep(c)]
        self.text = "".join(c for c, _ in kept)
        self.align = [a for _, a in kept]

    def prepend(self, s: str) -> None:
        """The prefix is aligned with the first character (as tokenizers does)."""
        if self.text:
            self.text = s + self.text
            self.align = [self.align[0]] * len(s) + self.align

    def replace(self, matches: list[Span], content: str) -> None:
        """Replace each matched range by `content`, aligned with the range's last char."""
        text, align, last = [], [], 0
        for s, e in matches:
            text.append(self.text[last:s])
            align.extend(self.align[last:s])
            if content:
                text.append(content)
                align.extend([self.align[e - 1] if e > 0 else (self.orig_start,) * 2] * len(content))
            last = e
        text.append(self.text[last:])
        align.extend(self.align[last:])
        self.text, self.align = "".join(text), align


# ---------------------------------------------------------------- splitting

BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def find_matches(text: str, pattern: re.Pattern) -> list[tuple[int, int, bool]]:
    """Cover `text` with (start, end, is_match) segments from the regex's non-overlapping
    matches. (A one-character class regex stands in for tokenizers' per-char predicates.)"""
    if not text:
        return [(0, 0, False)]
    out, prev = [], 0
    for m in pattern.finditer(text):
        s, e = m.span()
        if s == e:  # an empty match splits nothing
            continue
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def split_piece(piece: Piece, pattern, behavior: str, invert: bool = False) -> list[Piece]:
    matches = find_matches(piece.text, pattern)
    if invert:
        matches = [(s, e, not m) for s, e, m in matches]
    spans: list[list] = []  # [start, end, remove]
    if behavior == "Isolated":
        spans = [[s, e, False] for s, e, _ in matches]
    elif behavior == "Removed":
        spans = [[s, e, m] for s, e, m in matches]
    elif behavior == "Contiguous":
        previous = False
        for s, e, m in matches:
            if m == previous and spans:
                spans[-1][1] = e
            else:
                spans.append([s, e, False])
            previous = m
    elif behavior == "MergedWithPrevious":
        previous = False
        for s, e, m in matches:
            if m and not previous and spans:
                spans[-1][1] = e
            else:
                spans.append([s, e, False])
            previous = m
    elif behavior == "MergedWithNext":
        previous = False
        for s, e, m in reversed(matches):
            if m and not previous and spans:
                spans[-1][0] = s
            else:
                spans.append([s, e, False])
            previous = m
        spans.reverse()
    else:
        raise TokenizerError(f"split behavior {behavior!r} is not one of {', '.join(BEHAVIORS)}")
    return [piece.slice(s, e) for s, e, remove in spans if not remove and e > s]
