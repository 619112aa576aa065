"""ONNX string operators (StringConcat, StringSplit, StringNormalizer, RegexFullMatch; Equal takes strings too).

No ember backend stores text, so a string tensor is a numpy object array of str that stays on the host
(session.to_tensor makes them, _to_numpy hands them back); these operators read and make such arrays,
and their numeric outputs (RegexFullMatch's booleans, StringSplit's counts) are ordinary tensors.
"""
from __future__ import annotations

import re
import unicodedata

import numpy as np

from ..limits import check
from .guard import sized
from .registry import op
from .wire import OnnxFormatError


def is_text(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def as_text(a) -> np.ndarray:
    """An array of strings (bytes decoded as UTF-8) as the object array of str the executor holds."""
    a = np.asarray(a, dtype=object)
    out = np.empty(a.shape, object)
    flat = out.reshape(-1)
    for i, s in enumerate(a.reshape(-1)):
        flat[i] = s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
    return out


def _text(ctx, v, what):
    if not is_text(v):
        raise OnnxFormatError(f"ember: {ctx.where}: {what} must be a string tensor")
    return v


@op("StringConcat", since=20)
def _string_concat(ctx, ins, at):
    x, y = (_text(ctx, v, "StringConcat's inputs") for v in ins)
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), object)
    out[...] = np.frompyfunc(lambda a, b: a + b, 2, 1)(x, y)
    return out


def _re2_check(pattern):
    """(why the pattern is not RE2, or None; whether `re` could backtrack exponentially on it). ONNX
    specifies RE2: no backreferences or lookaround, and linear-time matching, which `re` does not give
    for a repeated part that itself repeats or alternates, as in (a+)+ or (a|aa)*."""
    from .linear_regex import C, P
    nested = {C.MAX_REPEAT, C.MIN_REPEAT, C.BRANCH}
    refused = {C.GROUPREF: "a backreference", C.GROUPREF_EXISTS: "a conditional group",
               C.ASSERT: "a lookahead/lookbehind", C.ASSERT_NOT: "a negative lookahead/lookbehind"}
    risky = False

    def walk(items, repeated):
        nonlocal risky
        for opcode, av in items:
            if opcode in refused:
                return f"{refused[opcode]}, which RE2 (the syntax ONNX specifies) does not have"
            risky = risky or (repeated and opcode in nested)
            if opcode in (C.MAX_REPEAT, C.MIN_REPEAT):
                why = walk(av[2], repeated or av[1] > 1)
            elif opcode == C.BRANCH:
                why = next((w for w in (walk(b, repeated) for b in av[1]) if w), None)
            elif opcode == C.SUBPATTERN:
                why = walk(av[-1], repeated)
            else:
                why = None
            if why:
                return why
        return None

    return walk(P.parse(pattern), False), risky


@op("RegexFullMatch", since=20)
def _regex_full_match(ctx, ins, at):
    x = _text(ctx, ins[0], "RegexFullMatch's input")
    pattern = at.s("pattern", "")
    check(ctx.where, "RegexFullMatch pattern", len(pattern), "max_regex_chars", " chars")  # (a model's, untrusted)
    try:  # (RE2's syntax, which the patterns exports use share with Python's re)
        rx = re.compile(pattern)
    except re.error as e:
        raise OnnxFormatError(f"ember: {ctx.where}: RegexFullMatch pattern {pattern!r}: {e}") from None
    why, risky = _re2_check(pattern)
    if why:
        raise OnnxFormatError(f"ember: {ctx.where}: RegexFullMatch pattern {pattern!r} has {why}")
    if risky:  # matched as RE2 does, in linear time (re could take exponential time on it)
        from .linear_regex import LinearRegex, Unsupported
        try:
            full = LinearRegex(pattern).fullmatch
        except Unsupported as e:
            raise OnnxFormatError(f"ember: {ctx.where}: RegexFullMatch pattern {pattern!r}: {e} is not supported "
                                  "in a pattern that repeats a repeated part") from None
    else:
        full = lambda s: rx.fullmatch(s) is not None  # noqa: E731
    return ctx.const(np.array([full(s) for s in x.reshape(-1)], np.bool_).reshape(x.shape))


@op("StringSplit", since=20)
def _string_split(ctx, ins, at):
    """-> (pieces padded with "" to the longest split, on a new last axis; the count per string)."""
    x = _text(ctx, ins[0], "StringSplit's input")
    sep = at.s("delimiter", "") or None  # empty: runs of whitespace, as str.split()
    maxsplit = at.i("maxsplit", -1)
    parts = [s.split(sep, maxsplit) for s in x.reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    sized(at, "the longest split", list(x.shape) + [width], 8)  # (an object array: a pointer per piece)
    out = np.full((len(parts), width), "", object)
    for i, p in enumerate(parts):
        out[i, :len(p)] = p
    counts = np.array([len(p) for p in parts], np.int64).reshape(x.shape)
    return [out.reshape(x.shape + (width,)), ctx.const(counts)]


def _strip_accents(s):
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


@op("StringNormalizer", since=10)
def _string_normalizer(ctx, ins, at):
    """Case change and stop-word removal over a [C] or [1, C] tensor (what is left keeps its rank; all
    removed leaves one empty string)."""
    x = _text(ctx, ins[0], "StringNormalizer's input")
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise OnnxFormatError(f"ember: {ctx.where}: StringNormalizer takes [C] or [1, C] strings, got {list(x.shape)}")
    action = at.s("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise OnnxFormatError(f"ember: {ctx.where}: StringNormalizer case_change_action {action!r}")
    sensitive = bool(at.i("is_case_sensitive", 0))
    stops = at.strings("stopwords", [])
    change = {"LOWER": str.lower, "UPPER": str.upper, "NONE": lambda s: s}[action]
    if sensitive:
        stop = set(stops)
        words = [change(s) for s in (_strip_accents(s) for s in x.reshape(-1)) if s not in stop]
    else:
        stop = {s.casefold() for s in stops}
        words = [change(s) for s in (_strip_accents(s) for s in x.reshape(-1)) if s.casefold() not in stop]
    words = [w for w in words if w] or [""]
    out = np.empty(len(words), object)
    out[:] = words
    return out.reshape((1, -1) if x.ndim == 2 else (-1,))
