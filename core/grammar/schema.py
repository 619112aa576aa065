"""JSON Schema -> the regex tree (regex.py) of the JSON texts ember generates for it: every text the tree accepts
parses and validates against the schema.

What is compiled: type (one or a list), enum, const, object (properties in their declared order, `required` ones
always, the others optional; no properties: any string keys, values by additionalProperties), array (items,
prefixItems, minItems, maxItems), string (minLength, maxLength, pattern, format date / time / date-time / uuid /
email / ipv4), integer (minimum, maximum, exclusive ones), number (integral bounds), boolean, null, anyOf / oneOf
(as alternatives: oneOf's branches must not overlap), allOf of one schema, $ref into $defs / definitions (not
recursive), and {} / true (any JSON value, nested at most ANY_DEPTH deep). What is refused, with a GrammarError
naming the keyword and its path: uniqueItems, not, if/then/else, dependent schemas, patternProperties, recursive
$refs, fractional number bounds, and schemas nested past MAX_DEPTH.

The JSON written is compact with an optional single space after ':' and ',' (small models like to write them);
strings use JSON's escapes; numbers have at most 15 significant digits.
"""
from __future__ import annotations

import json

from .errors import GrammarError
from .regex import (DIGIT, EMPTY, alt, cat, complement, cset, literal, normalize, opt, parse, rep, subtract)

MAX_DEPTH = 32
ANY_DEPTH = 3
MAX_ITEMS = 64          # a bounded array or string repetition is expanded copy by copy: at most this many copies
SP = opt(literal(" "))
QUOTE = literal('"')
# a JSON string's characters: anything but '"', '\\' and control characters, or an escape
_PLAIN = complement(normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))
_ESCAPE = cat(literal("\\"), alt(cset((0x22, 0x22), (0x5C, 0x5C), (0x2F, 0x2F), (0x62, 0x62), (0x66, 0x66),
                                      (0x6E, 0x6E), (0x72, 0x72), (0x74, 0x74)),
                                 cat(literal("u"), rep(cset((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)), 4, 4))))
JSON_CHAR = alt(("set", _PLAIN), _ESCAPE)
INT_DIGITS = 15
INTEGER = cat(opt(literal("-")), alt(literal("0"), cat(cset((0x31, 0x39)), rep(("set", DIGIT), 0, INT_DIGITS - 1))))
FRACTION = cat(literal("."), rep(("set", DIGIT), 1, INT_DIGITS))
EXPONENT = cat(cset((0x45, 0x45), (0x65, 0x65)), opt(cset((0x2B, 0x2B), (0x2D, 0x2D))), rep(("set", DIGIT), 1, 3))
NUMBER = cat(INTEGER, opt(FRACTION), opt(EXPONENT))
FORMATS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                 r"(\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "email": r"[a-zA-Z0-9._%+-]{1,32}@[a-zA-Z0-9-]{1,32}(\.[a-zA-Z0-9-]{1,16}){1,3}",
    "ipv4": r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
}
REFUSED = ("uniqueItems", "not", "if", "then", "else", "dependentSchemas", "dependentRequired", "patternProperties",
           "propertyNames", "contains", "minProperties", "maxProperties", "multipleOf", "unevaluatedProperties",
           "unevaluatedItems")


def json_literal(value) -> tuple:
    """The tree of one fixed JSON value (enum / const), written compactly."""
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def json_string(chars=None, lo: int = 0, hi: int | None = None) -> tuple:
    """A JSON string whose decoded characters are `chars` (a tree of one character each; default any)."""
    return cat(QUOTE, rep(JSON_CHAR if chars is None else chars, lo, hi), QUOTE)


def escape_for_json(node) -> tuple:
    """A pattern's tree over decoded characters -> the same over JSON string text: '"', '\\' and control
    characters become their escapes."""
    kind = node[0]
    if kind == "set":
        specials = [(lo, hi) for lo, hi in node[1] if lo <= 0x5C]
        plain = ("set", subtract(node[1], normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])))
        escapes = []
        for lo, hi in specials:
            for cp in range(lo, min(hi, 0x5C) + 1):
                if cp < 0x20 or cp in (0x22, 0x5C):
                    escapes.append(literal(json.dumps(chr(cp))[1:-1]))
        parts = ([plain] if plain[1] else []) + escapes
        return alt(*parts) if parts else ("set", ())
    if kind in ("cat", "alt"):
        return (kind, [escape_for_json(c) for c in node[1]])
    return ("rep", escape_for_json(node[1]), node[2], node[3])


# ---------------------------------------------------------------------------- integers in a range

def _digits_range(lo: str, hi: str) -> tuple:
    """Decimal strings of equal length from lo to hi (lo <= hi), no sign."""
    if lo.strip("0") == "" and hi.strip("9") == "":  # every string of that length: no recursion (it would branch)
        return rep(("set", DIGIT), len(lo), len(lo))
    if len(lo) == 1:
        return cset((ord(lo), ord(hi)))
    if lo[0] == hi[0]:
        return cat(literal(lo[0]), _digits_range(lo[1:], hi[1:]))
    n = len(lo) - 1
    parts = [cat(literal(lo[0]), _digits_range(lo[1:], "9" * n))]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(cat(cset((ord(lo[0]) + 1, ord(hi[0]) - 1)), rep(("set", DIGIT), n, n)))
    parts.append(cat(literal(hi[0]), _digits_range("0" * n, hi[1:])))
    return alt(*parts)


def natural_range(lo: int, hi: int | None) -> tuple:
    """Decimal numerals (no leading zeros) of lo <= n <= hi, lo >= 0; hi None: unbounded (at most INT_DIGITS)."""
    top = hi if hi is not None else 10 ** INT_DIGITS - 1
    parts = []
    for d in range(len(str(lo)), len(str(top)) + 1):
        a, b = max(lo, 10 ** (d - 1) if d > 1 else 0), min(top, 10 ** d - 1)
        if a <= b:
            parts.append(_digits_range(str(a).zfill(d), str(b)))
    return alt(*parts)


def integer_range(lo: int | None, hi: int | None) -> tuple:
    if lo is not None and hi is not None and lo > hi:
        raise GrammarError(f"ember: no integer lies in [{lo}, {hi}]")
    lim = 10 ** INT_DIGITS - 1
    lo = max(lo, -lim) if lo is not None else -lim
    parts = []
    if hi is None or hi >= 0:
        parts.append(natural_range(max(lo, 0), hi))
    if lo < 0:
        parts.append(cat(literal("-"), natural_range(max(1, -(hi if hi is not None and hi < 0 else -1)), -lo)))
    return alt(*parts)


# ---------------------------------------------------------------------------- schemas

class SchemaCompiler:
    def __init__(self, root):
        self.root = root
        self.refs: list[str] = []

    def fail(self, path, msg):
        raise GrammarError(f"ember: JSON schema at {path or '#'}: {msg}")

    def count(self, s, key, path):
        """s[key] as a non-negative integer (None when absent); a string, a list, true or 2.5 is refused."""
        v = s.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or int(v) != v:
            self.fail(path, f"{key} must be a non-negative integer, got {json.dumps(v)[:40]}")
        return int(v)

    def bound(self, s, key, path):
        """s[key] as a finite number (None when absent)."""
        v = s.get(key)
        if v is None or (isinstance(v, bool) and key.startswith("exclusive")):  # draft 4: refused by the caller
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            self.fail(path, f"{key} must be a finite number, got {json.dumps(v)[:40]}")
        return v

    def resolve(self, ref, path):
        if not isinstance(ref, str) or not ref.startswith("#/"):
            self.fail(path, f"$ref {ref!r}: only local references (#/$defs/...) are supported")
        node = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                self.fail(path, f"$ref {ref!r} points nowhere")
            node = node[part]
        return node

    def value(self, s, path="", depth=0):
        if depth > MAX_DEPTH:
            self.fail(path, f"nested deeper than {MAX_DEPTH}")
        if s is True or s == {}:
            return self.any_value(ANY_DEPTH)
        if not isinstance(s, dict):
            self.fail(path, f"a schema must be an object or true, got {json.dumps(s)[:40]}")
        for k in REFUSED:
            if k in s and not (k == "uniqueItems" and s[k] is False):
                self.fail(path, f"the keyword {k!r} is not supported by ember's grammar compiler")
        if "$ref" in s:
            ref = s["$ref"]
            if ref in self.refs:
                self.fail(path, f"$ref {ref!r} is recursive; ember compiles finite grammars only")
            self.refs.append(ref)
            try:
                return self.value(self.resolve(ref, path), f"{path}/$ref", depth + 1)
            finally:
                self.refs.pop()
        if "const" in s:
            return json_literal(s["const"])
        if "enum" in s:
            if not isinstance(s["enum"], list) or not s["enum"]:
                self.fail(path, "enum must be a non-empty list")
            return alt(*[json_literal(v) for v in s["enum"]])
        for key in ("anyOf", "oneOf"):
            if key in s:
                base = {k: v for k, v in s.items() if k != key}
                if not isinstance(s[key], list) or not s[key]:
                    self.fail(path, f"{key} must be a non-empty list")
                return alt(*[self.value({**base, **sub} if isinstance(sub, dict) else sub, f"{path}/{key}/{i}",
                                        depth + 1) for i, sub in enumerate(s[key])])
        if "allOf" in s:
            if not isinstance(s["allOf"], list) or len(s["allOf"]) != 1 or not isinstance(s["allOf"][0], dict):
                self.fail(path, "allOf is supported with exactly one schema (an object)")
            base = {k: v for k, v in s.items() if k != "allOf"}
            return self.value({**base, **s["allOf"][0]}, f"{path}/allOf/0", depth + 1)
        t = s.get("type")
        if isinstance(t, list):
            return alt(*[self.value({**s, "type": x}, path, depth + 1) for x in t])
        if t is None:
            t = "object" if "properties" in s else "array" if "items" in s else None
        if t is None:
            return self.any_value(ANY_DEPTH)
        fn = {"object": self.object, "array": self.array, "string": self.string, "integer": self.integer,
              "number": self.number, "boolean": lambda s, p, d: alt(literal("true"), literal("false")),
              "null": lambda s, p, d: literal("null")}.get(t) if isinstance(t, str) else None
        if fn is None:
            self.fail(path, f"unknown type {t!r}")
        return fn(s, path, depth)

    def object(self, s, path, depth):
        props = s.get("properties") or {}
        required = s.get("required") or []
        if not isinstance(props, dict) or not isinstance(required, list) or \
                not all(isinstance(r, str) for r in required):
            self.fail(path, "properties must be an object and required a list of names")
        missing = [r for r in required if r not in props]
        if missing and props:
            self.fail(path, f"required {missing} are not among the properties")
        open_, close = cat(literal("{"), SP), cat(SP, literal("}"))
        if not props:
            extra = s.get("additionalProperties", True)
            if extra is False:
                return literal("{}")
            member = cat(json_string(), SP, literal(":"), SP,
                         self.value(extra, f"{path}/additionalProperties", depth + 1))
            return cat(open_, opt(cat(member, rep(cat(literal(","), SP, member)))), close)
        members = [(cat(json_literal(k), SP, literal(":"), SP, self.value(v, f"{path}/properties/{k}", depth + 1)),
                    k in required) for k, v in props.items()]
        # tail[i]: members i.. once one was written (each ", member", optional ones optional); first[i]: members
        # i.. before any was written (a choice of which comes first): O(n^2) tree nodes however many are optional
        n = len(members)
        tail, first = [EMPTY] * (n + 1), [EMPTY] * (n + 1)
        for i in range(n - 1, -1, -1):
            m, req = members[i]
            step = cat(literal(","), SP, m)
            tail[i] = cat(step if req else opt(step), tail[i + 1])
            here = cat(m, tail[i + 1])
            first[i] = here if req else alt(here, first[i + 1])
        return cat(open_, first[0], close)

    def array(self, s, path, depth):
        lo, hi = self.count(s, "minItems", path) or 0, self.count(s, "maxItems", path)
        if hi is not None and hi < lo:
            self.fail(path, f"maxItems {hi} < minItems {lo}")
        if lo > MAX_ITEMS or (hi is not None and hi > MAX_ITEMS):
            self.fail(path, f"minItems/maxItems past {MAX_ITEMS}")
        items = s.get("items", True)
        item = None if items is False else self.value(items, f"{path}/items", depth + 1)
        sep = cat(literal(","), SP)
        open_, close = cat(literal("["), SP), cat(SP, literal("]"))
        prefix_items = s.get("prefixItems") or []
        if not isinstance(prefix_items, list):
            self.fail(path, "prefixItems must be a list of schemas")
        prefix = [self.value(p, f"{path}/prefixItems/{i}", depth + 1) for i, p in enumerate(prefix_items)]
        if prefix:  # all the prefix items, then (items allowing) more
            k = len(prefix)
            if (hi is not None and hi < k) or (item is None and k < lo):
                self.fail(path, "prefixItems do not fit minItems/maxItems")
            body = cat(*[x for i, p in enumerate(prefix) for x in ((sep, p) if i else (p,))])
            if item is not None and (hi is None or hi > k):
                body = cat(body, rep(cat(sep, item), max(lo - k, 0), None if hi is None else hi - k))
            return cat(open_, body, close)
        if item is None or hi == 0:
            if lo:
                self.fail(path, "no items allowed, yet minItems > 0")
            return cat(open_, close)
        body = cat(item, rep(cat(sep, item), max(lo - 1, 0), None if hi is None else max(hi - 1, 0)))
        return cat(open_, opt(body) if lo == 0 else body, close)

    def string(self, s, path, depth):
        lo, hi = self.count(s, "minLength", path) or 0, self.count(s, "maxLength", path)
        if hi is not None and hi < lo:
            self.fail(path, f"maxLength {hi} < minLength {lo}")
        if lo > MAX_ITEMS * 4 or (hi is not None and hi > MAX_ITEMS * 4):
            self.fail(path, f"minLength/maxLength past {MAX_ITEMS * 4}")
        if "pattern" in s:
            if "minLength" in s or "maxLength" in s:
                self.fail(path, "pattern together with minLength/maxLength is not supported")
            if not isinstance(s["pattern"], str):
                self.fail(path, "pattern must be a string")
            return cat(QUOTE, escape_for_json(parse(s["pattern"])), QUOTE)
        fmt = s.get("format")
        if fmt is not None and not isinstance(fmt, str):
            self.fail(path, f"format must be a string, got {json.dumps(fmt)[:40]}")
        if fmt in FORMATS:
            return cat(QUOTE, parse(FORMATS[fmt]), QUOTE)
        return json_string(None, lo, hi)

    def _bounds(self, s, path, integral: bool):
        lo, hi = self.bound(s, "minimum", path), self.bound(s, "maximum", path)
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            v = self.bound(s, key, path)
            if isinstance(v, bool):
                self.fail(path, f"{key} as a boolean (draft 4) is not supported")
            if v is not None:
                if integral and float(v) == int(v):
                    if key == "exclusiveMinimum":
                        lo = int(v) + 1 if lo is None else max(lo, int(v) + 1)
                    else:
                        hi = int(v) - 1 if hi is None else min(hi, int(v) - 1)
                else:
                    self.fail(path, f"{key} on a number is not supported")
        for name, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (not isinstance(v, (int, float)) or float(v) != int(v)):
                if integral:
                    lo, hi = (int(-(-lo // 1)) if lo is not None else None), (int(hi // 1) if hi is not None else None)
                    return lo, hi
                self.fail(path, f"{name} {v}: fractional bounds are not supported")
        return (None if lo is None else int(lo)), (None if hi is None else int(hi))

    def integer(self, s, path, depth):
        lo, hi = self._bounds(s, path, True)
        if lo is None and hi is None:
            return INTEGER
        return integer_range(lo, hi)

    def number(self, s, path, depth):
        lo, hi = self._bounds(s, path, False)
        if lo is None and hi is None:
            return NUMBER
        frac = opt(FRACTION)
        zeros = opt(cat(literal("."), rep(literal("0"), 1, INT_DIGITS)))
        parts = []
        top = hi if hi is not None else None
        if top is None or top >= 0:  # [max(lo, 0), hi]: below hi any fraction, at hi only .0...
            a = max(lo, 0) if lo is not None else 0
            if top is None:
                parts.append(cat(natural_range(a, None), frac))
            else:
                if a <= top - 1:
                    parts.append(cat(natural_range(a, top - 1), frac))
                if a <= top:
                    parts.append(cat(natural_range(top, top), zeros))
        if lo is None or lo < 0:  # -x with x in (max(-hi, 0), -lo]
            b = max(-top, 0) if top is not None else 0
            bottom = -lo if lo is not None else None
            neg = []
            if bottom is None:
                neg.append(cat(natural_range(b, None), frac))
            else:
                if b <= bottom - 1:
                    neg.append(cat(natural_range(b, bottom - 1), frac))
                neg.append(cat(natural_range(bottom, bottom), zeros))
            parts.append(cat(literal("-"), alt(*neg)))
        if not parts:
            self.fail(path, f"no number lies in [{lo}, {hi}]")
        return alt(*parts)

    def any_value(self, depth):
        scalars = [json_string(), NUMBER, literal("true"), literal("false"), literal("null")]
        if depth <= 0:
            return alt(*scalars)
        inner = self.any_value(depth - 1)
        sep = cat(literal(","), SP)
        member = cat(json_string(), SP, literal(":"), SP, inner)
        obj = cat(literal("{"), SP, opt(cat(member, rep(cat(sep, member)))), SP, literal("}"))
        arr = cat(literal("["), SP, opt(cat(inner, rep(cat(sep, inner)))), SP, literal("]"))
        return alt(obj, arr, *scalars)


def schema_tree(schema) -> tuple:
    """The tree of the JSON texts for `schema` (a dict, or true)."""
    return SchemaCompiler(schema).value(schema)


def json_object_tree(depth: int = ANY_DEPTH) -> tuple:
    """Any JSON object (response_format {"type": "json_object"}), nested at most `depth` deep."""
    c = SchemaCompiler({})
    inner = c.any_value(depth - 1)
    sep = cat(literal(","), SP)
    member = cat(json_string(), SP, literal(":"), SP, inner)
    return cat(literal("{"), SP, opt(cat(member, rep(cat(sep, member)))), SP, literal("}"))
