"""A regex tree (regex.py) -> a DFA over UTF-8 bytes, as numpy tables a token mask walks (mask.py).

Code point sets become byte-range sequences (UTF-8's structure: the split regex-automata's utf8 module makes, so
a DFA never accepts a malformed or surrogate sequence); Thompson's construction makes a byte NFA; the subset
construction makes the DFA over byte classes (bytes no transition tells apart share a class). State 0 is the dead
state. Both constructions are bounded (budget.grammar_states DFA states, 10x that many NFA states,
budget.grammar_seconds of wall time): a grammar past them is a GrammarError, not a hang.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .errors import GrammarError

_SURROGATES = (0xD800, 0xDFFF)


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """[[(byte lo, byte hi), ...], ...]: the UTF-8 encodings of code points lo..hi as products of byte ranges."""
    out, stack = [], [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        if lo > hi:
            continue
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            stack += [(lo, _SURROGATES[0] - 1), (_SURROGATES[1] + 1, hi)]
            continue
        for bound in (0x7F, 0x7FF, 0xFFFF):
            if lo <= bound < hi:
                stack += [(lo, bound), (bound + 1, hi)]
                break
        else:
            if hi <= 0x7F:
                out.append([(lo, hi)])
                continue
            n = 2 if hi <= 0x7FF else 3 if hi <= 0xFFFF else 4
            for i in range(1, n):
                m = (1 << (6 * i)) - 1
                if lo & ~m != hi & ~m:
                    if lo & m:
                        stack += [(lo, lo | m), ((lo | m) + 1, hi)]
                        break
                    if hi & m != m:
                        stack += [(lo, (hi & ~m) - 1), (hi & ~m, hi)]
                        break
            else:
                a, b = chr(lo).encode("utf-8"), chr(hi).encode("utf-8")
                out.append(list(zip(a, b)))
    return out


class _NFA:
    def __init__(self, max_states: int, deadline: float):
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []  # (byte lo, byte hi, target)
        self.max_states, self.deadline = max_states, deadline

    def new(self) -> int:
        self.eps.append([])
        self.edges.append([])
        n = len(self.eps)
        if n > self.max_states:
            raise GrammarError(f"ember: the grammar needs more than {self.max_states:,} automaton states "
                               f"(budget.grammar_states x 10 for the NFA); simplify it (fewer or shorter bounded "
                               f"repetitions, fewer alternatives)")
        if n & 4095 == 0 and time.monotonic() > self.deadline:
            raise GrammarError("ember: compiling the grammar took longer than budget.grammar_seconds")
        return n - 1

    def build(self, node) -> tuple[int, int]:
        kind = node[0]
        if kind == "set":
            start, end = self.new(), self.new()
            for lo, hi in node[1]:
                for seq in utf8_sequences(lo, hi):
                    s = start
                    for k, (blo, bhi) in enumerate(seq):
                        t = end if k == len(seq) - 1 else self.new()
                        self.edges[s].append((blo, bhi, t))
                        s = t
            return start, end
        if kind == "cat":
            start = end = self.new()
            for child in node[1]:
                s, e = self.build(child)
                self.eps[end].append(s)
                end = e
            return start, end
        if kind == "alt":
            start, end = self.new(), self.new()
            for child in node[1]:
                s, e = self.build(child)
                self.eps[start].append(s)
                self.eps[e].append(end)
            return start, end
        if kind == "rep":
            _, child, lo, hi = node
            start = end = self.new()
            for _ in range(lo):
                s, e = self.build(child)
                self.eps[end].append(s)
                end = e
            if hi is None:  # a loop: child*
                s, e = self.build(child)
                loop = self.new()
                self.eps[end].append(loop)
                self.eps[loop].append(s)
                self.eps[e].append(loop)
                return start, loop
            tail = self.new()
            for _ in range(hi - lo):  # each optional copy may end the repetition
                self.eps[end].append(tail)
                s, e = self.build(child)
                self.eps[end].append(s)
                end = e
            self.eps[end].append(tail)
            return start, tail
        raise GrammarError(f"ember: unknown grammar node {kind!r}")


@dataclass
class DFA:
    table: np.ndarray      # (states, classes) int32: next state, 0 = dead
    classes: np.ndarray    # (256,) int32: byte -> class
    accept: np.ndarray     # (states,) bool
    start: int

    @property
    def n_states(self) -> int:
        return self.table.shape[0]

    def walk(self, state: int, data: bytes) -> int:
        for b in data:
            state = int(self.table[state, self.classes[b]])
            if state == 0:
                return 0
        return state

    def matches(self, data: bytes) -> bool:
        s = self.walk(self.start, data)
        return s != 0 and bool(self.accept[s])

    def live(self) -> np.ndarray:
        """(states,) bool: states from which an accepting state can still be reached."""
        live = self.accept.copy()
        live[0] = False
        while True:
            nxt = live | live[self.table].any(axis=1)
            nxt[0] = False
            if (nxt == live).all():
                return live
            live = nxt


def compile_dfa(tree, max_states: int, max_seconds: float) -> DFA:
    deadline = time.monotonic() + max_seconds
    nfa = _NFA(10 * max_states, deadline)
    s0, final = nfa.build(tree)
    # byte classes: bytes no edge tells apart
    cuts = np.zeros(257, bool)
    cuts[0] = True
    for edges in nfa.edges:
        for lo, hi, _ in edges:
            cuts[lo] = cuts[hi + 1] = True
    classes = (np.cumsum(cuts[:256]) - 1).astype(np.int32)
    n_cls = int(classes[-1]) + 1
    moves = [[(int(classes[lo]), int(classes[hi]), t) for lo, hi, t in edges] for edges in nfa.edges]
    eps = nfa.eps

    closures: dict = {}

    def closure(states) -> frozenset:
        key = frozenset(states)
        hit = closures.get(key)
        if hit is not None:
            return hit
        seen, stack = set(key), list(key)
        while stack:
            for t in eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        out = closures[key] = frozenset(seen)
        return out

    start = closure([s0])
    ids = {start: 1}
    order = [start]
    rows = [[0] * n_cls]  # the dead state
    i = 0
    while i < len(order):
        if i & 255 == 0 and time.monotonic() > deadline:
            raise GrammarError(f"ember: compiling the grammar took longer than {max_seconds} s "
                               f"(budget.grammar_seconds)")
        cur = order[i]
        targets: dict[int, set] = {}
        for s in cur:
            for klo, khi, t in moves[s]:
                for k in range(klo, khi + 1):
                    targets.setdefault(k, set()).add(t)
        row = [0] * n_cls
        for k, ts in targets.items():
            c = closure(ts)
            j = ids.get(c)
            if j is None:
                j = ids[c] = len(order) + 1
                order.append(c)
                if len(order) >= max_states:
                    raise GrammarError(f"ember: the grammar needs more than {max_states:,} DFA states "
                                       f"(budget.grammar_states); simplify it")
            row[k] = j
        rows.append(row)
        i += 1
    accept = np.array([False] + [final in st for st in order])
    return DFA(np.array(rows, np.int32), classes, accept, 1)
