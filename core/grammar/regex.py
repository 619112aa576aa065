"""Regular expressions as a small tree over Unicode code point sets, from pattern text (the syntax JSON Schema
`pattern`s and Python's re share) or built directly (schema.py).

Nodes: ("set", ranges) one code point from sorted disjoint (lo, hi) ranges; ("cat", [nodes]); ("alt", [nodes]);
("rep", node, min, max | None). A pattern is a *language*: the tree accepts exactly the strings the pattern
matches in full (`^` at its start and `$` at its end are dropped; anywhere else they are refused), and where
Python's re is wider than what is generated (\\d is any Unicode digit there) the tree takes the narrower, ASCII
side, so whatever it produces re.search accepts. Lookarounds, backreferences, word boundaries and inline flags
are refused with a GrammarError naming them.
"""
from __future__ import annotations

import sys
import unicodedata

from .errors import GrammarError

MAX_CP = sys.maxunicode
EMPTY = ("cat", [])


def cset(*ranges) -> tuple:
    return ("set", normalize(ranges))


def normalize(ranges) -> tuple:
    out = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges if a <= b):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(ranges) -> tuple:
    out, nxt = [], 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


def subtract(a, b) -> tuple:
    """Ranges of a not in b."""
    return intersect(a, complement(b))


def intersect(a, b) -> tuple:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def literal(text: str) -> tuple:
    return ("cat", [("set", ((ord(c), ord(c)),)) for c in text])


def alt(*nodes) -> tuple:
    return ("alt", list(nodes)) if len(nodes) != 1 else nodes[0]


def cat(*nodes) -> tuple:
    return ("cat", list(nodes)) if len(nodes) != 1 else nodes[0]


def rep(node, lo: int = 0, hi: int | None = None) -> tuple:
    return ("rep", node, lo, hi)


def opt(node) -> tuple:
    return ("rep", node, 0, 1)


# ---------------------------------------------------------------------------- classes

DIGIT = ((0x30, 0x39),)
WORD = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE = normalize([(0x09, 0x0D), (0x20, 0x20)])
LINE_BREAK = ((0x0A, 0x0A),)


def _unicode(pred) -> tuple:
    """The code points where pred(char) holds (for the negated classes, which must exclude all of Python's)."""
    from ember.tokenizers.unicode_regex import class_ranges
    return pred(class_ranges)


def _not_digit():
    return complement(_unicode(lambda cr: cr("Nd")))


def _not_word():
    return complement(_unicode(lambda cr: normalize(list(cr("w")) + list(cr("Nd")) + [(0x5F, 0x5F)])))


def _not_space():
    return complement(normalize(list(_unicode(lambda cr: cr("s"))) + [(0x1C, 0x1F)]))


CLASS_ESCAPES = {"d": lambda: DIGIT, "w": lambda: WORD, "s": lambda: SPACE, "D": _not_digit, "W": _not_word,
                 "S": _not_space}
CHAR_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "0": 0, "a": 7}


class _Parser:
    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0

    def fail(self, msg):
        raise GrammarError(f"ember: regex {self.p[:60]!r}: {msg} (at {self.i})")

    def peek(self):
        return self.p[self.i] if self.i < len(self.p) else ""

    def parse(self):
        if self.p.startswith("^"):
            self.i = 1
        node = self.alternation(top=True)
        if self.i < len(self.p):
            self.fail(f"unexpected {self.peek()!r}")
        return node

    def alternation(self, top=False):
        branches = [self.sequence(top)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(top))
        return alt(*branches)

    def sequence(self, top):
        items = []
        while self.i < len(self.p) and self.peek() not in "|)":
            if self.peek() == "$":
                if top and (self.i == len(self.p) - 1 or self.p[self.i + 1] in "|"):
                    self.i += 1
                    continue
                self.fail("'$' is only supported at the end of the pattern")
            if self.peek() == "^":
                self.fail("'^' is only supported at the start of the pattern")
            items.append(self.quantified(self.atom()))
        return cat(*items) if items else EMPTY

    def quantified(self, node):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._counted():
                lo, hi = self._counted(consume=True)
            else:
                return node
            if self.peek() in ("?", "+"):  # lazy / possessive: the same language
                self.i += 1
            node = rep(node, lo, hi)

    def _counted(self, consume=False):
        j = self.p.find("}", self.i)
        if j < 0:
            return None
        body = self.p[self.i + 1:j]
        lo_s, comma, hi_s = body.partition(",")
        if not lo_s.isdigit() or (hi_s and not hi_s.isdigit()):
            return None
        lo, hi = int(lo_s), (int(hi_s) if hi_s else (None if comma else int(lo_s)))
        if hi is not None and hi < lo:
            self.fail(f"{{{body}}}: the maximum is below the minimum")
        if consume:
            self.i = j + 1
        return lo, hi

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?P<", self.i) or (self.p.startswith("?<", self.i) and
                                                       self.p[self.i + 2:self.i + 3] not in ("=", "!")):
                self.i = self.p.index(">", self.i) + 1
            elif self.peek() == "?":
                self.fail("lookarounds, inline flags and conditionals are not supported")
            node = self.alternation()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.i += 1
            return node
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.i += 1
            return ("set", complement(LINE_BREAK))
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            self.fail(f"nothing to repeat before {c!r}")
        if c == "{" and self._counted():
            self.fail("nothing to repeat before '{'")
        self.i += 1
        return ("set", ((ord(c), ord(c)),))

    def escape(self, in_class):
        self.i += 1
        c = self.peek()
        if not c:
            self.fail("a trailing backslash")
        self.i += 1
        if c in CLASS_ESCAPES:
            r = CLASS_ESCAPES[c]()
            return r if in_class else ("set", r)
        if c in CHAR_ESCAPES:
            cp = CHAR_ESCAPES[c]
        elif c == "x":
            cp = self._hex(2)
        elif c == "u":
            cp = self._hex(4)
        elif c == "U":
            cp = self._hex(8)
        elif c == "N" and self.peek() == "{":
            j = self.p.index("}", self.i)
            try:
                cp = ord(unicodedata.lookup(self.p[self.i + 1:j]))
            except KeyError:
                self.fail("unknown character name")
            self.i = j + 1
        elif c.isdigit() or c in "bBAZzGpP":
            self.fail(f"\\{c} (backreferences, word boundaries, anchors, properties) is not supported")
        elif c.isalpha():
            self.fail(f"unknown escape \\{c}")
        else:
            cp = ord(c)
        return cp if in_class else ("set", ((cp, cp),))

    def _hex(self, n):
        h = self.p[self.i:self.i + n]
        if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
            self.fail(f"expected {n} hex digits")
        self.i += n
        return int(h, 16)

    def char_class(self):
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges, first = [], True
        while True:
            c = self.peek()
            if not c:
                self.fail("missing ']'")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "[" and self.p.startswith("[:", self.i):
                self.fail("POSIX classes are not supported")
            lo = self._class_item()
            if isinstance(lo, tuple):  # a class escape inside: \d, \w ...
                ranges.extend(lo)
                continue
            if self.peek() == "-" and self.p[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self._class_item()
                if isinstance(hi, tuple) or hi < lo:
                    self.fail("a bad character range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        r = normalize(ranges)
        return complement(r) if negate else r

    def _class_item(self):
        c = self.peek()
        if c == "\\":
            return self.escape(in_class=True)  # a code point, or the ranges of \d \w \s ...
        self.i += 1
        return ord(c)


def parse(pattern: str):
    """The tree of a pattern (see the module's docstring)."""
    if not isinstance(pattern, str):
        raise GrammarError(f"ember: a regex must be a string, got {type(pattern).__name__}")
    return _Parser(pattern).parse()
