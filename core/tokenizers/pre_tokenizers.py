"""tokenizer.json pre-tokenizers: each maps a list of Pieces to a finer list of Pieces."""
from __future__ import annotations

import re

from .byte_level import gpt2_regex, to_byte_chars
from .errors import TokenizerError, component_type, unsupported
from .normalized import BEHAVIORS, Piece, split_piece
from .normalizers import pattern_regex
from .unicode_regex import one_char_regex


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
        self.split_regex = re.compile(re.escape(replacement))

    def __call__(self, pieces: list[Piece]) -> list[Piece]:
        out, rep = [], self.replacement
        for piece in pieces:
            if " " in piece.text:
                piece.replace([(i, i + 1) for i, c in enumerate(piece.text) if c == " "], rep)
            if not piece.text.startswith(rep) and (
                    self.prepend_scheme == "always"
                    or (self.prepend_scheme == "first" and piece.orig_start == 0)):
                piece.prepend(rep)
            out.extend(split_piece(piece, self.split_regex, "MergedWithNext")
                       if self.split else [piece])
        return out


class Split:
    def __init__(self, regex: re.Pattern, behavior: str, invert: bool = False):
        if behavior not in BEHAVIORS:
            raise TokenizerError(f"tokenizer.json pre_tokenizer Split: behavior {behavior!r} is "
                                 f"not one of {', '.join(BEHAVIORS)}")
        self.regex, self.behavior, self.invert = regex, behavior, invert

    def __call__(self, pieces):
        return [p for piece in pieces for p in split_piece(piece, self.regex, self.behavior, self.invert)]


class CharSplit:
    """A split on single characters of one kind (WhitespaceSplit, Punctuation, Digits,
    CharDelimiterSplit): every such character is its own match, as upstream."""

    def __init__(self, char_regex: re.Pattern, behavior: str):
        if behavior not in BEHAVIORS:
            raise TokenizerError(f"tokenizer.json pre_tokenizer: behavior {behavior!r} is not "
                                 f"one of {', '.join(BEHAVIORS)}")
        self.regex, self.behavior = char_regex, behavior

    def __call__(self, pieces):
        return [p for piece in pieces for p in split_piece(piece, self.regex, self.behavior)]


class Sequence:
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, pieces):
        for step in self.steps:
            pieces = step(pieces)
        return pieces


def _whitespace():
    # tokenizers' Whitespace: keep runs of \w+ and of [^\w\s]+, drop the rest
    return Split(pattern_regex({"Regex": r"\w+|[^\w\s]+"}, "pre_tokenizer Whitespace"), "Removed",
                 invert=True)


def _bert():
    """Split on whitespace (dropped) then isolate each punctuation char: in one pass, keep
    single punctuation chars and runs of everything that is neither."""
    space = one_char_regex("whitespace").pattern[1:-1]
    punct = one_char_regex("punctuation").pattern[1:-1]
    return Split(re.compile(f"[{punct}]|[^{space}{punct}]+"), "Removed", invert=True)


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
            return Split(pattern_regex(spec["pattern"], "pre_tokenizer Split"), spec["behavior"],
                         spec.get("invert", False))
        if kind == "Whitespace":
            return _whitespace()
        if kind == "WhitespaceSplit":
            return CharSplit(one_char_regex("whitespace"), "Removed")
        if kind == "BertPreTokenizer":
            return _bert()
        if kind == "Punctuation":
            return CharSplit(one_char_regex("punctuation"), spec.get("behavior", "Isolated"))
        if kind == "Digits":
            return CharSplit(one_char_regex("numeric"),
                             "Isolated" if spec.get("individual_digits") else "Contiguous")
        if kind == "CharDelimiterSplit":
            return CharSplit(re.compile(re.escape(spec["delimiter"])), "Removed")
        if kind == "Sequence":
            return Sequence([build_pre_tokenizer(s, f"{where}.pretokenizers[{i}]")
                             for i, s in enumerate(spec["pretokenizers"])])
    except (KeyError, TypeError) as exc:
        raise TokenizerError(f"tokenizer.json {where} ({kind}): missing or bad field {exc}") from None
    raise unsupported(where, kind, ["ByteLevel", "Metaspace", "Split", "Whitespace",
                                    "WhitespaceSplit", "BertPreTokenizer", "Punctuation", "Digits",
                                    "CharDelimiterSplit", "Sequence"])

