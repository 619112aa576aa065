"""Full matches in linear time, for RegexFullMatch's patterns that Python's backtracking `re` could take
exponential time on.

ONNX specifies RE2 syntax and semantics: matching in time linear in the text, no backreferences, no
lookaround. `re` agrees on the syntax but backtracks, so a model's (a+)+$ against a long string of a's
would never finish. Such patterns are parsed by `re`'s own parser and run here as a Thompson NFA: every
position advances the set of live states at once (Pike / RE2's approach), O(len(text) x states).
Only the boolean answer is needed, so captures and laziness do not matter.
"""
from __future__ import annotations

try:
    from re import _parser as P  # (Python >= 3.11)
    from re import _constants as C
except ImportError:  # pragma: no cover
    import sre_constants as C
    import sre_parse as P

from ..limits import budget

_CATEGORY = {
    C.CATEGORY_DIGIT: str.isdecimal, C.CATEGORY_SPACE: str.isspace,
    C.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
}
_NOT = {C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT, C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
        C.CATEGORY_NOT_WORD: C.CATEGORY_WORD}


class Unsupported(ValueError):
    pass


def _word(s, i):
    return 0 <= i < len(s) and (s[i].isalnum() or s[i] == "_")


def _class_test(items, fold):
    """A character predicate from an IN list: literals, ranges, categories, negation."""
    neg = bool(items) and items[0][0] == C.NEGATE
    tests = []
    for op, av in items[1:] if neg else items:
        if op == C.LITERAL:
            tests.append(lambda c, v=chr(av): c == v)
        elif op == C.RANGE:
            tests.append(lambda c, lo=av[0], hi=av[1]: lo <= ord(c) <= hi)
        elif op == C.CATEGORY and av in _CATEGORY:
            tests.append(_CATEGORY[av])
        elif op == C.CATEGORY and av in _NOT:
            tests.append(lambda c, t=_CATEGORY[_NOT[av]]: not t(c))
        else:
            raise Unsupported(f"character class item {op}")

    def test(c):
        hit = any(t(c) for t in tests) or (fold and any(t(x) for t in tests for x in (c.lower(), c.upper())))
        return hit != neg
    return test


class _NFA:
    """states[k] = (kind, arg, next, alt): 'char' tests one character, 'split' goes to both next and alt,
    'at' checks a position assertion, 'match' accepts."""

    def __init__(self, fold):
        self.states, self.fold = [], fold

    def new(self, kind, arg=None):
        if len(self.states) >= budget.max_regex_states:  # counted repeats unrolled
            raise Unsupported(f"more than {budget.max_regex_states} NFA states (EMBER_MAX_REGEX_STATES)")
        self.states.append([kind, arg, None, None])
        return len(self.states) - 1

    # a fragment is (start, [(state, slot) left to patch])
    def seq(self, items):
        start, holes = None, []
        for op, av in items:
            f = self.node(op, av)
            if start is None:
                start, holes = f
            else:
                self.patch(holes, f[0])
                holes = f[1]
        if start is None:  # empty: a split with both exits patched to what follows
            s = self.new("split")
            return s, [(s, 2), (s, 3)]
        return start, holes

    def patch(self, holes, target):
        for s, slot in holes:
            self.states[s][slot] = target

    def char(self, test):
        s = self.new("char", test)
        return s, [(s, 2)]

    def node(self, op, av):
        fold = self.fold
        if op == C.LITERAL:
            v = chr(av)
            return self.char((lambda c: c.lower() == v.lower()) if fold else (lambda c: c == v))
        if op == C.NOT_LITERAL:
            v = chr(av)
            return self.char((lambda c: c.lower() != v.lower()) if fold else (lambda c: c != v))
        if op == C.ANY:
            return self.char(lambda c: c != "\n")
        if op == C.IN:
            return self.char(_class_test(av, fold))
        if op == C.SUBPATTERN:
            return self.seq(av[-1])
        if op == C.BRANCH:
            s = self.new("split")
            first = self.seq(av[1][0])
            rest = self.node(C.BRANCH, (None, av[1][1:])) if len(av[1]) > 2 else self.seq(av[1][1])
            self.states[s][2], self.states[s][3] = first[0], rest[0]
            return s, first[1] + rest[1]
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            start, holes = None, []
            for _ in range(lo):  # the required copies
                f = self.seq(sub)
                if start is None:
                    start, holes = f
                else:
                    self.patch(holes, f[0])
                    holes = f[1]
            if hi == C.MAXREPEAT:  # then a loop: split -> sub -> split
                s = self.new("split")
                f = self.seq(sub)
                self.states[s][2] = f[0]
                self.patch(f[1], s)
                if start is None:
                    start = s
                else:
                    self.patch(holes, s)
                return start, [(s, 3)]
            for _ in range(hi - lo):  # optional copies, each may end the repeat
                s = self.new("split")
                f = self.seq(sub)
                self.states[s][2] = f[0]
                if start is None:
                    start = s
                else:
                    self.patch(holes, s)
                holes = f[1] + [(s, 3)]
            if start is None:
                return self.seq([])
            return start, holes
        if op == C.AT:
            return self.at(av)
        raise Unsupported(f"pattern element {op}")

    def at(self, where):
        s = self.new("at", where)
        return s, [(s, 2)]


def _holds(where, s, i):
    n = len(s)
    if where in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
        return i == 0
    if where == C.AT_END:
        return i == n or (i == n - 1 and s[i] == "\n")
    if where == C.AT_END_STRING:
        return i == n
    if where == C.AT_BOUNDARY:
        return _word(s, i - 1) != _word(s, i)
    if where == C.AT_NON_BOUNDARY:
        return _word(s, i - 1) == _word(s, i)
    raise Unsupported(f"assertion {where}")


class LinearRegex:
    """`re`-syntax pattern matched as RE2 would: fullmatch(text) -> bool in O(len(text) x states).
    Raises Unsupported for what RE2 lacks (backreferences, lookaround) or flags other than (?i)."""

    def __init__(self, pattern: str):
        tree = P.parse(pattern)
        flags = tree.state.flags & ~(C.SRE_FLAG_UNICODE)
        if flags & ~C.SRE_FLAG_IGNORECASE:
            raise Unsupported(f"flags {flags}")
        self.nfa = _NFA(bool(flags & C.SRE_FLAG_IGNORECASE))
        start, holes = self.nfa.seq(list(tree))
        self.nfa.patch(holes, self.nfa.new("match"))
        self.start = start

    def fullmatch(self, s: str) -> bool:
        states = self.nfa.states
        current = self._closure([self.start], s, 0)
        for i, c in enumerate(s):
            step = [states[k][2] for k in current if states[k][0] == "char" and states[k][1](c)]
            if not step:
                return False
            current = self._closure(step, s, i + 1)
        return any(states[k][0] == "match" for k in current)

    def _closure(self, todo, s, i):
        states, seen, out = self.nfa.states, set(), []
        while todo:
            k = todo.pop()
            if k is None or k in seen:
                continue
            seen.add(k)
            kind, arg, nxt, alt = states[k]
            if kind == "split":
                todo.append(alt)
                todo.append(nxt)
            elif kind == "at":
                if _holds(arg, s, i):
                    todo.append(nxt)
            else:
                out.append(k)
        return out
