"""tokenizer.json pre-tokenizers: each maps a list of Pieces to a finer list of Pieces."""
from __future__ import annotations

import unicodedata

from .byte_level import gpt2_regex, to_byte_chars
from .errors import TokenizerError, component_type, unsupported
from .normalized import BEHAVIORS, Piece, split_piece
from .normalizers import _pattern
from .unicode_regex import is_punctuation, is_whitespace


class ByteLevel:
    """Optionally prefix a space, split with the GPT-2 regex, then spell every UTF-8 byte as
    its printable stand-in character (aligned with the original character it came from)."""

    def __init__(self, add_prefix_space=True, use_regex=True):
        self.add_prefix_space, self.use_regex = add_prefix_space, use_regex

    def __call__(self, pieces: list[Piece]) -> list[Piece]:
        out = []
        for piece in pieces:
            if self.add_prefix_space and not piece.text.startswith(" "):
                piece.prepend(" ")
            out.extend(split_piece(piece, gpt2_regex(), "Isolated") if self.use_regex else [piece])
        for piece in out:
            if not piece.text.isascii():
                piece.map_chars(to_byte_chars)
            else:  # ASCII maps one char to one char: skip the per-char alignment rebuild
                piece.text = to_byte_chars(piece.text)
        return out


class Metaspace:
    def __init__(self, replacement="\u2581", prepend_scheme="always", split=True):
        if prepend_scheme not in ("always", "never", "first"):
            raise TokenizerError(f"tokenizer.json pre_tokenizer Metaspace: prepend_scheme "
                                 f"{prepend_scheme!r} is not always/never/first")
        self.replacement, self.prepend_scheme, self.split = replacement, prepend_scheme, split

    def __call__(self, pieces: list[Piece]) -> list[Piece]:
        out, rep = [], self.replacement
        for piece in pieces:
            if " " in piece.text:
                piece.replace([(i, i + 1) for i, c in enumerate(piece.text) if c == " "], rep)
            if not piece.text.startswith(rep) and (
                    self.prepend_scheme == "always"
                    or (self.prepend_scheme == "first" and piece.orig_start == 0)):
                piece.prepend(rep)
            out.extend(split_piece(piece, lambda c: c == rep, "MergedWithNext")
                       if self.split else [piece])
        return out


class Split:
    def __init__(self, pattern, behavior, invert=False):
        if behavior not in BEHAVIORS:
            raise TokenizerError(f"tokenizer.json pre_tokenizer Split: behavior {behavior!r} is "
                                 f"not one of {', '.join(BEHAVIORS)}")
        self.regex, self.behavior, self.invert = _pattern(pattern, "pre_tokenizer Split"), behavior, invert

    def __call__(self, pieces):
        return [p for piece in pieces for p in split_piece(piece, self.regex, self.behavior, self.invert)]


class CharSplit:
    """A split on a character predicate (WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit)."""

    def __init__(self, predicate, behavior):
        self.predicate, self.behavior = predicate, behavior

    def __call__(self, pieces):
        return [p for piece in pieces for p in split_piece(piece, self.predicate, self.behavior)]


class Sequence:
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, pieces):
        for step in self.steps:
            pieces = step(pieces)
        return pieces


def _whitespace():
    # tokenizers' Whitespace: keep runs of \w+ and of [^\w\s]+, drop the rest
    return Split({"Regex": r"\w+|[^\w\s]+"}, "Removed", invert=True)


def _bert():
    return Sequence([CharSplit(is_whitespace, "Removed"), CharSplit(is_punctuation, "Isolated")])


def _is_numeric(c: str) -> bool:
    return unicodedata.category(c) in ("Nd", "Nl", "No")


def build_pre_tokenizer(spec, where="pre_tokenizer"):
    if spec is None:
        return None
    kind = component_type(spec, where)
    try:
        if kind == "ByteLevel":
            return ByteLevel(spec.get("add_prefix_space", True), spec.get("use_regex", True))
        if kind == "Metaspace":
            scheme = spec.get("prepend_scheme")
            if scheme is None:  # files written before 0.19 carry add_prefix_space instead
                scheme = "always" if spec.get("add_prefix_space", True) else "never"
            return Metaspace(spec.get("replacement", "\u2581"), scheme, spec.get("split", True))
        if kind == "Split":
            return Split(spec["pattern"], spec["behavior"], spec.get("invert", False))
        if kind == "Whitespace":
            return _whitespace()
        if kind == "WhitespaceSplit":
            return CharSplit(is_whitespace, "Removed")
        if kind == "BertPreTokenizer":
            return _bert()
        if kind == "Punctuation":
            return CharSplit(is_punctuation, spec.get("behavior", "Isolated"))
        if kind == "Digits":
            return CharSplit(_is_numeric, "Isolated" if spec.get("individual_digits") else "Contiguous")
        if kind == "CharDelimiterSplit":
            delimiter = spec["delimiter"]
            return CharSplit(lambda c: c == delimiter, "Removed")
        if kind == "Sequence":
            return Sequence([build_pre_tokenizer(s, f"{where}.pretokenizers[{i}]")
                             for i, s in enumerate(spec["pretokenizers"])])
    except (KeyError, TypeError) as exc:
        raise TokenizerError(f"tokenizer.json {where} ({kind}): missing or bad field {exc}") from None
    raise unsupported(where, kind, ["ByteLevel", "Metaspace", "Split", "Whitespace",
                                    "WhitespaceSplit", "BertPreTokenizer", "Punctuation", "Digits",
                                    "CharDelimiterSplit", "Sequence"])

