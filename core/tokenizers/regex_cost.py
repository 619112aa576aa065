"""How much a backtracking engine (Python's re, Oniguruma) can backtrack on a pattern, read off its parse tree.

A quantifier is a choice point when the text after it could also start a match of what follows: `\\w*\\w*x` gives
the second `\\w*` a say over every split of a word of a's, and a near miss (no x) tries them all. Each unbounded
choice point in one sequence multiplies the work by the text's length: n^k per start position for k of them, so
twelve `\\w*` and an x hang on 50 characters. A bounded one (`?`, `{1,3}`) multiplies it by a constant, and a
repeated group that itself repeats or alternates (`(a+)+`, `(a|a)*`) is exponential.

`cost(tree)` -> (degree, factor): the most unbounded choice points on one path (their count is the polynomial's
degree in the text's length, per start), and the product of the bounded ones (alternations add: they are tried
one after the other). A choice point whose continuation cannot fail is free (the first try succeeds), and so is
one whose next character decides it (its characters and the continuation's first characters are disjoint). A
nested quantifier is degree NESTED. Real pre-tokenizer patterns (GPT-2, Llama 3, Qwen 2, o200k, DeepSeek) have
degree 1 at most (Llama 3's `\\s*[\\r\\n]+`); ember runs patterns of degree <= 1 and small factor with `re` and
the rest with its linear-time matcher (regex_vm.py).

Character sets are sorted tuples of disjoint (lo, hi) code point ranges; they over-approximate (case folding
adds every letter), which can only make a pattern look costlier than it is.
"""
from __future__ import annotations

import sys

try:
    from re import _constants as C
    from re import _parser as P
except ImportError:  # pragma: no cover  (Python < 3.11)
    import sre_constants as C
    import sre_parse as P

NESTED = 1 << 20    # the degree of an exponential pattern
MAX_DEGREE = 1      # re runs a pattern with at most this many unbounded choice points on one path ...
MAX_FACTOR = 256    # ... and this much bounded branching
_SMALL = 8          # a repeat that varies by fewer than this many counts is a bounded choice
ALL = ((0, sys.maxunicode),)
EMPTY = ()


# ---------------------------------------------------------------- character sets

def union(*sets) -> tuple:
    out = []
    for lo, hi in sorted(r for s in sets for r in s):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(s) -> tuple:
    out, nxt = [], 0
    for lo, hi in s:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= sys.maxunicode:
        out.append((nxt, sys.maxunicode))
    return tuple(out)


def overlaps(a, b) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def _category(av) -> tuple:
    from .unicode_regex import class_ranges
    names = {C.CATEGORY_DIGIT: ("d", False), C.CATEGORY_NOT_DIGIT: ("d", True), C.CATEGORY_SPACE: ("s", False),
             C.CATEGORY_NOT_SPACE: ("s", True), C.CATEGORY_WORD: ("w", False), C.CATEGORY_NOT_WORD: ("w", True)}
    if av not in names:
        return ALL
    name, negate = names[av]
    s = tuple(class_ranges(name))
    if name == "s":  # Python's \s also takes U+001C..U+001F
        s = union(s, ((0x1C, 0x1F),))
    return complement(s) if negate else s


def _fold(s) -> tuple:
    """s with case variants added (over-approximated: a large set gets every cased letter)."""
    if sum(hi - lo + 1 for lo, hi in s) > 512:
        from .unicode_regex import class_ranges
        return union(s, class_ranges("L"), ((0x212A, 0x212B), (0x17F, 0x17F)))
    extra = []
    for lo, hi in s:
        for o in range(lo, hi + 1):
            c = chr(o)
            extra.extend((ord(x), ord(x)) for x in (c.lower(), c.upper(), c.casefold()) if len(x) == 1)
    return union(s, extra, ((0x212A, 0x212B), (0x17F, 0x17F)) if extra else ())


def item_set(op, av, flags) -> tuple[tuple, bool]:
    """(ranges, negated) of one single-character item (LITERAL, NOT_LITERAL, ANY, IN), before case folding."""
    if op == C.LITERAL:
        return ((av, av),), False
    if op == C.NOT_LITERAL:
        return ((av, av),), True
    if op == C.ANY:
        return (ALL, False) if flags & C.SRE_FLAG_DOTALL else (((10, 10),), True)
    parts, negate = [], False  # IN
    for o, a in av:
        if o == C.NEGATE:
            negate = True
        elif o == C.LITERAL:
            parts.append(((a, a),))
        elif o == C.RANGE:
            parts.append(((a[0], a[1]),))
        elif o == C.CATEGORY:
            parts.append(_category(a))
        else:
            parts.append(ALL)
    return union(*parts), negate


def charset(op, av, flags) -> tuple:
    """A superset of the characters one single-character item can consume (case variants included)."""
    s, negate = item_set(op, av, flags)
    if flags & C.SRE_FLAG_IGNORECASE and op != C.ANY:
        # negated: a character matches when none of its variants is in s, so it is outside s itself
        return complement(s) if negate else _fold(s)
    return complement(s) if negate else s


# ---------------------------------------------------------------- the analysis

class _Info:
    """What a node can do: match empty (nullable), always succeed (sure: nullable with no assertion that can
    fail), its first characters, all its characters, and its (degree, factor) inside."""
    __slots__ = ("nullable", "sure", "first", "chars", "degree", "factor")

    def __init__(self, nullable, sure, first, chars, degree=0, factor=1):
        self.nullable, self.sure, self.first, self.chars = nullable, sure, first, chars
        self.degree, self.factor = degree, factor


class _Cont:
    """What follows a node up to the end of the pattern: can it fail, what can it start with."""
    __slots__ = ("sure", "first")

    def __init__(self, sure, first):
        self.sure, self.first = sure, first


END = _Cont(True, EMPTY)


def _variable(items) -> bool:
    """Does a sub-pattern repeat or alternate anywhere inside (what makes repeating it exponential)?"""
    for op, av in items:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT) and (av[1] != av[0] or _variable(av[2])):
            return True
        if op == C.BRANCH:
            return True
        if op in (C.SUBPATTERN, C.ATOMIC_GROUP) and _variable(av[-1]):
            return True
    return False


def seq(items, after: _Cont, flags: int) -> _Info:
    """A concatenation followed by `after`."""
    items = list(items)
    infos = [None] * len(items)
    cont = after
    for k in range(len(items) - 1, -1, -1):  # right to left: each item sees what follows it
        infos[k] = node(items[k], cont, flags)
        i = infos[k]
        cont = _Cont(i.sure and cont.sure, union(i.first, cont.first) if i.nullable else i.first)
    nullable = all(i.nullable for i in infos)
    first, sure = [], True
    for i in infos:
        first.append(i.first)
        if not i.nullable:
            break
    sure = all(i.sure for i in infos)
    degree = sum(i.degree for i in infos)
    factor = 1
    for i in infos:
        factor *= i.factor
    return _Info(nullable, sure, union(*first), union(*(i.chars for i in infos)), min(degree, NESTED), factor)


def node(item, after: _Cont, flags: int) -> _Info:
    op, av = item
    if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
        s = charset(op, av, flags)
        return _Info(False, False, s, s)
    if op == C.AT:
        return _Info(True, False, EMPTY, EMPTY)
    if op in (C.ASSERT, C.ASSERT_NOT):  # the lookaround body backtracks on its own
        inner = seq(av[1], END, flags)
        return _Info(True, False, EMPTY, EMPTY, inner.degree, inner.factor)
    if op == C.SUBPATTERN:
        add, drop = av[1], av[2]
        return seq(av[-1], after, (flags | add) & ~drop)
    if op == C.ATOMIC_GROUP:  # no backtracking into it once it has matched
        inner = seq(av, END, flags)
        return _Info(inner.nullable, inner.sure, inner.first, inner.chars, inner.degree, inner.factor)
    if op == C.BRANCH:
        alts = [seq(a, after, flags) for a in av[1]]
        # alternatives a first character tells apart: one of them goes on; else each may be tried in turn
        apart = len(alts) <= 64 and all(not a.nullable for a in alts) and not any(
            overlaps(a.first, b.first) for i, a in enumerate(alts) for b in alts[i + 1:])
        factor = max(a.factor for a in alts) if apart else sum(a.factor for a in alts)
        return _Info(any(a.nullable for a in alts), any(a.sure for a in alts), union(*(a.first for a in alts)),
                     union(*(a.chars for a in alts)), max(a.degree for a in alts), factor)
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        lo, hi, body = av
        unbounded = hi == C.MAXREPEAT
        if (unbounded or hi > 1) and _variable(body):
            b = seq(body, END, flags)
            return _Info(lo == 0 or b.nullable, lo == 0, b.first, b.chars, NESTED, 1)
        b = seq(body, after if hi <= 1 else END, flags)
        nullable, sure = lo == 0 or b.nullable, lo == 0 or b.sure
        degree, factor = b.degree, b.factor
        span = None if unbounded else hi - lo
        if op != C.POSSESSIVE_REPEAT and span != 0 and not after.sure and overlaps(b.first, after.first):
            if span is None or span >= _SMALL:
                degree += 1
            else:
                factor *= span + 1
        return _Info(nullable, sure, b.first, b.chars, degree, factor)
    if op == C.GROUPREF:  # a backreference: any characters, any length
        return _Info(True, False, ALL, ALL)
    if op == C.GROUPREF_EXISTS:
        _, yes, no = av
        alts = [seq(yes, after, flags)] + ([seq(no, after, flags)] if no else [])
        return _Info(True, False, union(*(a.first for a in alts)), union(*(a.chars for a in alts)),
                     max(a.degree for a in alts), sum(a.factor for a in alts))
    return _Info(True, False, ALL, ALL, NESTED, 1)  # something unknown: assume the worst


def parse(pattern: str):
    return P.parse(pattern)


def cost(tree) -> tuple[int, int]:
    """(degree, factor) of a parsed pattern (see the module docstring)."""
    info = seq(list(tree), END, tree.state.flags)
    return info.degree, info.factor


def backtracks_safely(tree) -> bool:
    degree, factor = cost(tree)
    return degree <= MAX_DEGREE and factor <= MAX_FACTOR
