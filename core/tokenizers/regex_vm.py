"""A linear-time regex matcher for the tokenizer patterns a backtracking engine could take polynomial or
exponential time on (regex_cost.py decides which): a Pike VM over `re`'s own parse of the pattern.

Every thread of the pattern's NFA advances one character at a time together, at most one thread per program
state, so a search costs O(len(text) x states) whatever the pattern. Threads are kept in priority order
(greedy before lazy, left alternative before right) and a thread that matches cuts the ones behind it, which
gives the leftmost-first matches Python's re and Oniguruma give (the spans `finditer` yields are theirs).
What an NFA cannot do is refused with Unsupported: backreferences, conditionals, possessive and atomic parts,
and lookaround wider than one character (GPT-2's `\\s+(?!\\S)` is one character wide).

    LinearPattern(translated_pattern).finditer(text)   # yields objects with span() / start() / end() / group()
"""
from __future__ import annotations

import bisect
import re

from ..limits import budget
from .regex_cost import C, P, charset, item_set, union

CHAR, SPLIT, JMP, AT, LOOK, MATCH, LOOP = range(7)


class Unsupported(ValueError):
    pass


class _Test:
    """One character item as re matches it: in `ranges` (or not, when negated), where under IGNORECASE a
    character's lower and upper case count too; memoized per character. `superset`: ranges holding every
    character it accepts (for the search's skip to a possible start)."""
    __slots__ = ("los", "his", "negate", "fold", "superset", "memo")

    def __init__(self, op, av, flags):
        ranges, self.negate = item_set(op, av, flags)
        self.fold = bool(flags & C.SRE_FLAG_IGNORECASE) and op != C.ANY
        self.los, self.his, self.memo = [r[0] for r in ranges], [r[1] for r in ranges], {}
        self.superset = charset(op, av, flags)

    def _in(self, c: str) -> bool:
        o = ord(c)
        k = bisect.bisect_right(self.los, o) - 1
        return k >= 0 and o <= self.his[k]

    def __call__(self, c: str) -> bool:
        hit = self.memo.get(c)
        if hit is None:
            inside = self._in(c) or (self.fold and any(
                len(v) == 1 and self._in(v) for v in (c.lower(), c.upper())))
            hit = self.memo[c] = inside != self.negate
            if len(self.memo) > 4096:
                self.memo.clear()
        return hit


def _word(s, i) -> bool:
    return 0 <= i < len(s) and (s[i].isalnum() or s[i] == "_")


def _holds(where, multiline, s, i) -> bool:
    n = len(s)
    if where == C.AT_BEGINNING:
        return i == 0 or (multiline and s[i - 1] == "\n")
    if where == C.AT_BEGINNING_STRING:
        return i == 0
    if where == C.AT_END:
        return i == n or (i == n - 1 and s[i] == "\n") or (multiline and s[i] == "\n")
    if where == C.AT_END_STRING:
        return i == n
    if where == C.AT_BOUNDARY:
        return _word(s, i - 1) != _word(s, i)
    if where == C.AT_NON_BOUNDARY:
        return _word(s, i - 1) == _word(s, i)
    raise Unsupported(f"the assertion {where}")


class _Compiler:
    """sre parse tree -> program: prog[pc] = [kind, arg, x, y] (CHAR: test, next x; SPLIT: x before y;
    LOOP: a SPLIT that starts an unbounded repeat, arg the slot of its exit; JMP: x; AT: position kind, next x;
    LOOK: (test, ahead, negate), next x; MATCH)."""

    def __init__(self):
        self.prog = []

    def emit(self, kind, arg=None, x=None, y=None) -> int:
        if len(self.prog) >= budget.max_regex_states:  # counted repeats unrolled
            raise Unsupported(f"more than {budget.max_regex_states} states (EMBER_MAX_REGEX_STATES)")
        self.prog.append([kind, arg, x, y])
        return len(self.prog) - 1

    def seq(self, items, flags):
        """-> (start pc, [(pc, slot) left to patch to what follows])."""
        start, holes = None, []
        for item in items:
            f = self.node(item, flags)
            if start is None:
                start, holes = f
            else:
                self.patch(holes, f[0])
                holes = f[1]
        if start is None:
            s = self.emit(JMP)
            return s, [(s, 2)]
        return start, holes

    def patch(self, holes, target):
        for pc, slot in holes:
            self.prog[pc][slot] = target

    def node(self, item, flags):
        op, av = item
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            s = self.emit(CHAR, _Test(op, av, flags))
            return s, [(s, 2)]
        if op == C.SUBPATTERN:
            return self.seq(av[-1], (flags | av[1]) & ~av[2])
        if op == C.BRANCH:
            alts = av[1]
            first = self.seq(alts[0], flags)
            if len(alts) == 1:
                return first
            s = self.emit(SPLIT)
            rest = self.node((C.BRANCH, (None, alts[1:])), flags)
            self.prog[s][2], self.prog[s][3] = first[0], rest[0]
            return s, first[1] + rest[1]
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            return self.repeat(*av, greedy=op == C.MAX_REPEAT, flags=flags)
        if op == C.AT:
            s = self.emit(AT, (av, bool(flags & C.SRE_FLAG_MULTILINE)))
            return s, [(s, 2)]
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, body = av
            body = list(body)
            while len(body) == 1 and body[0][0] == C.SUBPATTERN:
                body = list(body[0][1][-1])
            if len(body) == 1 and body[0][0] in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
                test = _Test(*body[0], flags)
                s = self.emit(LOOK, (test, direction > 0, op == C.ASSERT_NOT))
                return s, [(s, 2)]
            raise Unsupported("a lookaround wider than one character")
        names = {C.GROUPREF: "a backreference", C.GROUPREF_EXISTS: "a conditional group",
                 C.POSSESSIVE_REPEAT: "a possessive quantifier", C.ATOMIC_GROUP: "an atomic group"}
        raise Unsupported(names.get(op, f"the element {op}"))

    def repeat(self, lo, hi, body, greedy, flags):
        def optional_split():  # SPLIT to the body (x) or past it (y); lazy swaps the preference
            return self.emit(SPLIT)

        def aim(s, into, past):
            self.prog[s][2], self.prog[s][3] = (into, past) if greedy else (past, into)

        start, holes = None, []
        for _ in range(lo):  # the required copies
            f = self.seq(body, flags)
            if start is None:
                start, holes = f
            else:
                self.patch(holes, f[0])
                holes = f[1]
        if hi == C.MAXREPEAT:  # then a loop: split -> body -> split
            s = self.emit(LOOP, 3 if greedy else 2)
            f = self.seq(body, flags)
            aim(s, f[0], None)
            self.patch(f[1], s)
            if start is None:
                start = s
            else:
                self.patch(holes, s)
            return start, [(s, 3 if greedy else 2)]
        for _ in range(hi - lo):  # optional copies, each may end the repeat
            s = optional_split()
            f = self.seq(body, flags)
            aim(s, f[0], None)
            if start is None:
                start = s
            else:
                self.patch(holes, s)
            holes = f[1] + [(s, 3 if greedy else 2)]
        if start is None:
            return self.seq([], flags)
        return start, holes


class Match:
    __slots__ = ("string", "_span")

    def __init__(self, string, span):
        self.string, self._span = string, span

    def span(self):
        return self._span

    def start(self):
        return self._span[0]

    def end(self):
        return self._span[1]

    def group(self, n=0):
        if n:
            raise IndexError("ember's linear matcher keeps no groups")
        return self.string[self._span[0]:self._span[1]]


class LinearPattern:
    """A pattern (Python `re` syntax, as unicode_regex.translate writes it) matched in linear time; the
    `finditer` of a compiled re.Pattern, for the spans."""

    def __init__(self, pattern: str, tree=None):
        self.pattern = pattern
        tree = tree if tree is not None else P.parse(pattern)
        flags = tree.state.flags
        if flags & C.SRE_FLAG_VERBOSE:
            flags &= ~C.SRE_FLAG_VERBOSE  # (the parser already dropped the whitespace and comments)
        comp = _Compiler()
        start, holes = comp.seq(list(tree), flags)
        comp.patch(holes, comp.emit(MATCH))
        self.prog, self.start = comp.prog, start
        self._first = self._first_chars()

    def _first_chars(self):
        """A re.Pattern finding the next position a match can start at, or None when any position can
        (a match may be empty, or start with an assertion)."""
        prog, seen, todo, sets = self.prog, set(), [self.start], []
        while todo:
            pc = todo.pop()
            if pc is None or pc in seen:
                continue
            seen.add(pc)
            kind, arg, x, y = prog[pc]
            if kind == CHAR:
                sets.append(arg.superset)
            elif kind in (SPLIT, JMP, LOOP):
                todo.extend((x, y))
            else:
                return None
        ranges = union(*sets)
        if not ranges:
            return None
        body = "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
        return re.compile(f"[{body}]")

    def _closure(self, pc, start, s, i, out, seen):
        """Follow pc's empty moves at position i (in priority order), appending (pc, start) for each CHAR or
        MATCH state reached first."""
        prog, stack = self.prog, [pc]
        while stack:
            pc = stack.pop()
            if pc is None:
                continue
            if pc in seen:
                # back at a loop's split without consuming: an empty iteration, which ends the repeat there (as
                # re's "an empty iteration stops" rule), at this path's priority
                if prog[pc][0] == LOOP:
                    stack.append(prog[pc][prog[pc][1]])
                continue
            seen.add(pc)
            kind, arg, x, y = prog[pc]
            if kind == SPLIT or kind == LOOP:
                stack.append(y)
                stack.append(x)
            elif kind == JMP:
                stack.append(x)
            elif kind == AT:
                if _holds(arg[0], arg[1], s, i):
                    stack.append(x)
            elif kind == LOOK:
                test, ahead, negate = arg
                j = i if ahead else i - 1
                if (0 <= j < len(s) and test(s[j])) != negate:
                    stack.append(x)
            else:
                out.append((pc, start))

    def search(self, s: str, pos: int = 0, not_empty_at: int = -1):
        """The leftmost-first match at or after pos, as (start, end), or None; not_empty_at: a position where an
        empty match does not count (finditer's rule after an empty match)."""
        prog, n, match = self.prog, len(s), None
        i = pos
        if self._first is not None:  # skip to where a match can begin
            m = self._first.search(s, i)
            if m is None:
                return None
            i = m.start()
        clist, seen = [], set()
        self._closure(self.start, i, s, i, clist, seen)
        while True:
            c = s[i] if i < n else None
            nlist, nseen = [], set()
            for pc, st in clist:
                kind, arg, x, _ = prog[pc]
                if kind == MATCH:
                    if st == i == not_empty_at:
                        continue
                    match = (st, i)
                    break  # the threads behind this one lose to it
                if c is not None and arg(c):
                    self._closure(x, st, s, i + 1, nlist, nseen)
            if i >= n:
                break
            i += 1
            if match is None:
                if not nlist and self._first is not None:
                    m = self._first.search(s, i)
                    if m is None:
                        break
                    i, nseen = m.start(), set()
                self._closure(self.start, i, s, i, nlist, nseen)
            elif not nlist:
                break
            clist = nlist
        return match

    def finditer(self, s: str, pos: int = 0):
        not_empty_at = -1
        while pos <= len(s):
            m = self.search(s, pos, not_empty_at)
            if m is None:
                return
            yield Match(s, m)
            if m[0] == m[1]:
                pos, not_empty_at = m[1], m[1]
            else:
                pos, not_empty_at = m[1], -1
