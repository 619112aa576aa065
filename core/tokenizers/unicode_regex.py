"""Unicode character classes for Python's `re`, and a translator for Oniguruma patterns.

tokenizer.json regexes are written for Oniguruma (`\\p{L}`, `\\p{N}`, Unicode `\\s`/`\\w`).
Python's `re` has no `\\p{..}` and its `\\s`/`\\w` differ (`\\s` takes U+001C..U+001F, `\\w`
misses combining marks), and the third-party `regex` module is not in Pyodide. So the classes
are built from `unicodedata` categories, once, and spliced into the pattern as explicit ranges.
"""
from __future__ import annotations

import functools
import itertools
import re
import sys
import unicodedata

from .errors import TokenizerError

# Unicode White_Space (what Oniguruma's \s, Rust's char::is_whitespace and the regex crate use).
WHITESPACE_RANGES = ((0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
                     (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                     (0x3000, 0x3000))
WHITESPACE = frozenset(chr(c) for lo, hi in WHITESPACE_RANGES for c in range(lo, hi + 1))


def is_whitespace(c: str) -> bool:
    return c in WHITESPACE


# Other_Alphabetic characters that are not marks (circled/squared Latin letters): \w has them
_ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189))
_JOIN_CONTROLS = ((0x200C, 0x200D),)


def is_word_char(c: str) -> bool:
    """Unicode \\w (UTS #18, as Oniguruma and the regex crate use it): Alphabetic, marks,
    decimal digits, connector punctuation and the two join controls."""
    cat = unicodedata.category(c)
    if cat[0] in "LM" or cat in ("Nd", "Nl", "Pc"):
        return True
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in _ALPHABETIC_SYMBOLS + _JOIN_CONTROLS)


# Planes 0-3 and 14 hold every assigned character (Unicode 15/16); planes 4-13 are
# unassigned and planes 15-16 private use, so they are filled in without a scan.
_SCANNED = ((0, 0x40000), (0xE0000, 0xF0000))
_UNSCANNED = (("Cn", 0x40000, 0xDFFFF), ("Co", 0xF0000, 0x10FFFF))


@functools.cache
def _category_ranges() -> dict[str, list[tuple[int, int]]]:
    """Two-letter general category -> code point ranges, for the running Python's Unicode
    version. Built on first use from a C-level map over ~330k code points (~0.2 s in
    CPython; the per-character Python loop it replaces took 5x longer, more in Pyodide)."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for lo, hi in _SCANNED:
        pos = lo
        for cat, run in itertools.groupby(map(unicodedata.category, map(chr, range(lo, hi)))):
            n = sum(1 for _ in run)
            ranges.setdefault(cat, []).append((pos, pos + n - 1))
            pos += n
    for cat, lo, hi in _UNSCANNED:
        ranges.setdefault(cat, []).append((lo, hi))
    return ranges


def _merge(ranges) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges) -> list[tuple[int, int]]:
    out, nxt = [], 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= sys.maxunicode:
        out.append((nxt, sys.maxunicode))
    return out


@functools.cache
def class_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """Ranges of a named class: a general category ("L", "Lu", "N", ...) or s/w/d."""
    if name == "s":
        return WHITESPACE_RANGES
    cats = _category_ranges()
    if name == "w":  # see is_word_char
        parts = [r for c, rs in cats.items() if c[0] in "LM" or c in ("Nd", "Nl", "Pc") for r in rs]
        parts += [*_ALPHABETIC_SYMBOLS, *_JOIN_CONTROLS]
    elif name == "d":
        parts = cats.get("Nd", [])
    elif len(name) == 1:
        parts = [r for c, rs in cats.items() if c[0] == name for r in rs]
    elif name in cats:
        parts = cats[name]
    else:
        raise TokenizerError(f"regex: unknown Unicode property \\p{{{name}}}")
    return tuple(_merge(parts))


def _body(ranges) -> str:
    return "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}"
                   for lo, hi in ranges)


def class_body(name: str, negate: bool = False) -> str:
    """The inside of a `[...]` matching class `name` (or its complement)."""
    ranges = class_ranges(name)
    return _body(_complement(ranges) if negate else ranges)


_ASCII_PUNCTUATION = ((33, 47), (58, 64), (91, 96), (123, 126))


@functools.cache
def one_char_regex(kind: str) -> re.Pattern:
    """One character of a kind tokenizers tests per char: "whitespace", "punctuation"
    (BERT's: ASCII punctuation or any P* category) or "numeric" (any N* category)."""
    ranges = {"whitespace": lambda: WHITESPACE_RANGES,
              "punctuation": lambda: _merge([*class_ranges("P"), *_ASCII_PUNCTUATION]),
              "numeric": lambda: class_ranges("N")}[kind]()
    return re.compile(f"[{_body(ranges)}]")


_PROPERTY = re.compile(r"\\([pP])\{\^?([A-Za-z_]+)\}")
_SHORTHAND = {"s": ("s", False), "S": ("s", True), "w": ("w", False), "W": ("w", True),
              "d": ("d", False), "D": ("d", True)}
_PROPERTY_ALIASES = {"Letter": "L", "Number": "N", "Mark": "M", "Punctuation": "P",
                     "Symbol": "S", "Separator": "Z", "Other": "C"}


def translate(pattern: str) -> str:
    """Rewrite an Oniguruma pattern into an equivalent Python `re` pattern."""
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            m = _PROPERTY.match(pattern, i)
            if m:
                name = _PROPERTY_ALIASES.get(m.group(2), m.group(2))
                negate = (m.group(1) == "P") != ("{^" in m.group(0))
                i = m.end()
            elif pattern[i + 1] in _SHORTHAND:
                name, negate = _SHORTHAND[pattern[i + 1]]
                i += 2
            else:
                out.append(pattern[i:i + 2])
                i += 2
                continue
            body = class_body(name, negate)
            out.append(body if depth else f"[{body}]")
            continue
        if c == "[":
            if depth and (pattern.startswith("[:", i) or pattern.startswith("[^", i)):
                raise TokenizerError(f"regex {pattern!r}: POSIX classes and negated nested "
                                     f"classes are not supported")
            depth += 1
            if depth > 1:  # Oniguruma's nested [..] inside a class is a union: flatten it
                i += 1
                continue
            out.append(c)
            if pattern.startswith("^", i + 1):
                out.append("^")
                i += 1
            if pattern.startswith("]", i + 1):  # a literal ']' first in the class
                out.append("\\]")
                i += 1
        elif c == "]" and depth:
            depth -= 1
            if depth == 0:
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


_QUANTIFIER = re.compile(r"[*+?]|\{(\d*)(,?)(\d*)\}")


def _quantifier_at(pattern: str, i: int):
    """(end, repeats more than once, repeats a variable number of times) for a quantifier at i, or None."""
    m = _QUANTIFIER.match(pattern, i)
    if m is None or (m.group(0).startswith("{") and not (m.group(1) or m.group(3))):
        return None
    q = m.group(0)
    if q in "*+":
        lo, hi = (0 if q == "*" else 1), None
    elif q == "?":
        lo, hi = 0, 1
    else:
        lo = int(m.group(1) or 0)
        hi = None if m.group(2) and not m.group(3) else int(m.group(3) or m.group(1))
    end = m.end()
    if end < len(pattern) and pattern[end] in "?+":  # lazy / possessive modifiers
        end += 1
    return end, hi is None or hi > 1, hi is None or hi != lo


def nested_quantifier(pattern: str) -> str | None:
    """The first group that is repeated (more than once) and holds a variable repetition or an alternation,
    such as `(a+)+`, `(?:x*y?)*` or `(a|a)*`, or None. Those let a backtracking engine (Python's re,
    Oniguruma) split a text in exponentially many ways, so a near miss takes time exponential in its length;
    the native runtime refuses them when a tokenizer is loaded (a static check works in Pyodide and in threads,
    where a time limit could not), and names this group. Real pre-tokenizer patterns (GPT-2, Llama 3, Qwen,
    o200k ...) have none."""
    stack = [[0, False]]  # per open group: start index, holds a variable quantifier or an alternation

    def after_atom(i: int) -> int:  # an atom ends before i: note a quantifier on it, return where it ends
        q = _quantifier_at(pattern, i)
        if q is None:
            return i
        stack[-1][1] |= q[2]
        return q[0]

    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i = i + 2 if in_class else after_atom(i + 2)
        elif in_class:
            in_class = c != "]"
            i = i + 1 if in_class else after_atom(i + 1)
        elif c == "[":
            in_class, i = True, i + 1
            i += pattern.startswith("^", i)
            i += pattern.startswith("]", i)  # a literal ']' first in the class
        elif c == "(":
            stack.append([i, False])
            i += 1
        elif c == "|":
            stack[-1][1] = True
            i += 1
        elif c == ")" and len(stack) > 1:
            start, inner = stack.pop()
            q = _quantifier_at(pattern, i + 1)
            if q and inner and q[1]:
                return pattern[start:q[0]]
            stack[-1][1] |= inner or bool(q and q[2])
            i = q[0] if q else i + 1
        else:
            i = after_atom(i + 1)
    return None


def _length_check(pattern: str):
    from ..limits import budget
    if len(pattern) > budget.max_regex_chars:
        from ..errors import LimitError
        raise LimitError("tokenizer.json", f"regex {pattern[:40]!r}...: length", len(pattern),
                         budget.max_regex_chars, "max_regex_chars", " characters")


def _parsed(pattern: str):
    """(translated pattern, re's parse tree of it) or TokenizerError."""
    from .regex_cost import parse
    translated = translate(pattern)
    try:
        return translated, parse(translated)
    except (re.error, RecursionError, OverflowError) as exc:
        raise TokenizerError(f"regex {pattern!r}: cannot be compiled for Python's re ({exc})") from None


def _why_costly(pattern: str, tree) -> str:
    from .regex_cost import NESTED, cost
    bad = nested_quantifier(pattern)
    if bad is not None:
        return f"the group {bad!r} repeats a repetition (a nested quantifier), which can take exponential time"
    degree, factor = cost(tree)
    if degree >= NESTED:
        return "a repeated part repeats or alternates inside, which can take exponential time"
    if degree > 1:
        return (f"{degree} unbounded repetitions in a row can split the same text between them, which takes time "
                f"growing as the text's length to the power {degree}")
    return f"its optional parts and alternatives can be tried in {factor} ways at each position"


def check_backtracking(pattern: str) -> None:
    """Refuse a pattern a backtracking engine (Oniguruma, in the native runtime) could take more than linear
    time per start position on (regex_cost.py); real pre-tokenizer patterns pass."""
    from .regex_cost import backtracks_safely
    _length_check(pattern)
    translated, tree = _parsed(pattern)
    if not backtracks_safely(tree):
        raise TokenizerError(f"regex {pattern!r}: {_why_costly(pattern, tree)}; ember refuses such patterns for a "
                             "backtracking engine")


@functools.cache
def compile_onig(pattern: str):
    """The pattern, translated for Python's re: a compiled re.Pattern when backtracking on it is bounded
    (regex_cost.py: real pre-tokenizer patterns), else ember's linear-time matcher (regex_vm.LinearPattern),
    which yields the same spans. Both have finditer(text)."""
    from .regex_cost import backtracks_safely
    from .regex_vm import LinearPattern, Unsupported
    _length_check(pattern)
    translated, tree = _parsed(pattern)
    if backtracks_safely(tree):
        return re.compile(translated)
    try:
        return LinearPattern(translated, tree)
    except Unsupported as e:
        raise TokenizerError(f"regex {pattern!r}: {_why_costly(pattern, tree)}, and it uses {e}, which ember's "
                             "linear-time matcher does not run; ember refuses it") from None
