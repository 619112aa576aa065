"""What a sandboxed template can hold and touch: plain data (None, bool, int, float, str, list, tuple, dict) plus
a few objects of the sandbox's own (Undefined, Namespace, Loop, Macro, Method, Function), and the one gate through
which it reads attributes and items. No Python object's attribute is ever looked up: `x.y` on a dict reads its
key (or one of its read-only methods, as Jinja looks the attribute up first), on a str one of its methods, and
anything else is Undefined; a name starting with '_' is refused outright."""
from __future__ import annotations

import re

from .errors import TemplateLimitError, TemplateSecurityError, UndefinedError


class Undefined:
    """A name or attribute the data does not have (Jinja's default Undefined): prints as '', is false, iterates
    as empty, has length 0; an attribute of it, a call or arithmetic raises UndefinedError."""
    __slots__ = ("hint",)

    def __init__(self, hint: str):
        self.hint = hint

    def __str__(self):
        return ""

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __eq__(self, other):
        return isinstance(other, Undefined)

    def __ne__(self, other):
        return not isinstance(other, Undefined)

    def __hash__(self):
        return 0

    def fail(self, what: str = ""):
        raise UndefinedError(f"{self.hint} is undefined{what}")


class Lazy:
    """What Jinja's map / select / reject / selectattr / rejectattr return: a generator. It iterates once (then it
    is empty, as a spent generator), has no length, is always true, and prints as a generator."""
    __slots__ = ("gen",)

    def __init__(self, gen):
        self.gen = gen

    def __iter__(self):
        return self.gen

    def __bool__(self):
        return True

    def __str__(self):
        return "<generator object>"


class Markup(str):
    """What `safe` and `escape` return (markupsafe's Markup): a string whose `+` escapes the other operand for HTML,
    as it does in Jinja (a template that writes `'x'|safe + content` gets content escaped)."""
    __slots__ = ()

    def __add__(self, other):
        if isinstance(other, str):
            return Markup(str.__add__(self, html_escape(other)))
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, str):
            return Markup(str.__add__(html_escape(other), self))
        return NotImplemented

    def __mul__(self, n):
        return Markup(str.__mul__(self, n))

    def __mod__(self, args):
        args = tuple(html_escape(a) if isinstance(a, str) else a for a in (args if isinstance(args, tuple) else (args,)))
        return Markup(str.__mod__(self, args))


def html_escape(s) -> "Markup":
    if isinstance(s, Markup):
        return s
    return Markup(to_str(s).replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;")
                  .replace('"', "&#34;"))


class Namespace:
    """namespace(...): the one object a template may assign attributes to ({% set ns.x = ... %})."""
    __slots__ = ("attrs",)

    def __init__(self, attrs: dict):
        for k in attrs:
            check_name(k)
        self.attrs = dict(attrs)

    def __repr__(self):
        return f"<Namespace {self.attrs!r}>"


class Loop:
    """The `loop` variable inside a for loop."""
    __slots__ = ("items", "index0")

    def __init__(self, items):
        self.items, self.index0 = items, 0

    def get(self, name):
        i, n = self.index0, len(self.items)
        values = {"index0": i, "index": i + 1, "revindex0": n - i - 1, "revindex": n - i, "first": i == 0,
                  "last": i == n - 1, "length": n, "depth": 1, "depth0": 0}
        if name in values:
            return values[name]
        if name == "previtem":
            return self.items[i - 1] if i > 0 else Undefined("loop.previtem")
        if name == "nextitem":
            return self.items[i + 1] if i + 1 < n else Undefined("loop.nextitem")
        if name == "cycle":
            return Function("loop.cycle", lambda *args: args[self.index0 % len(args)] if args else
                            _raise(TemplateSecurityError("loop.cycle() needs at least one value")))
        return Undefined(f"loop.{name}")


class Function:
    """A function the sandbox provides (range, namespace, raise_exception, a read-only method ...)."""
    __slots__ = ("name", "fn")

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __repr__(self):
        return f"<function {self.name}>"


class Macro:
    __slots__ = ("name", "params", "body", "line")

    def __init__(self, name, params, body, line):
        self.name, self.params, self.body, self.line = name, params, body, line

    def __repr__(self):
        return f"<macro {self.name}>"


def _raise(e):
    raise e


def check_name(name):
    if isinstance(name, str) and name.startswith("_"):
        raise TemplateSecurityError(f"access to the attribute {name!r} is refused (names starting with '_' reach "
                                    f"Python internals)")


# ---------------------------------------------------------------------------- methods a template may call

DICT_METHODS = {"items": lambda d: list(d.items()), "keys": lambda d: list(d.keys()),
                "values": lambda d: list(d.values()), "get": lambda d, k, default=None: d.get(k, default),
                "copy": lambda d: dict(d)}
DICT_MUTATING = ("clear", "pop", "popitem", "setdefault", "update", "fromkeys")
LIST_METHODS = {"index": lambda s, *a: s.index(*a), "count": lambda s, x: s.count(x), "copy": lambda s: list(s)}
LIST_MUTATING = ("append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear")
STR_METHODS = ("strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper",
               "lower", "title", "capitalize", "swapcase", "casefold", "find", "rfind", "index", "rindex", "count",
               "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "istitle", "isnumeric",
               "isdecimal", "removeprefix", "removesuffix", "partition", "rpartition")
STR_SIZED = ("replace", "join", "center", "ljust", "rjust", "zfill", "format", "expandtabs")


def attribute(obj, name, limits):
    """obj.name in the sandbox (see the module's docstring)."""
    check_name(name)
    if isinstance(obj, Undefined):
        obj.fail(f" (reading .{name})")
    if isinstance(obj, dict):
        if name in DICT_METHODS:
            return Function(f"dict.{name}", lambda *a, **k: DICT_METHODS[name](obj, *a, **k))
        if name in DICT_MUTATING:
            return _refused("dict", name)
        return obj[name] if name in obj else Undefined(f"attribute {name!r}")
    if isinstance(obj, Namespace):
        return obj.attrs[name] if name in obj.attrs else Undefined(f"namespace attribute {name!r}")
    if isinstance(obj, Loop):
        return obj.get(name)
    if isinstance(obj, str):
        if name in STR_METHODS:
            return Function(f"str.{name}", getattr(obj, name))
        if name in STR_SIZED:
            return Function(f"str.{name}", lambda *a, **k: sized_str_method(obj, name, a, k, limits))
    if isinstance(obj, (list, tuple)):
        if name in LIST_METHODS:
            return Function(f"list.{name}", lambda *a: LIST_METHODS[name](obj, *a))
        if name in LIST_MUTATING:
            return _refused(type(obj).__name__, name)
    return Undefined(f"attribute {name!r} of a {type_name(obj)}")


def _refused(kind, name):
    def call(*a, **k):
        raise TemplateSecurityError(f"{kind}.{name}() would change the data; templates are rendered read-only")
    return Function(f"{kind}.{name}", call)


def item(obj, key, limits):
    """obj[key] in the sandbox: a dict's key, a sequence's index or slice, else the attribute of that name."""
    if isinstance(obj, Undefined):
        obj.fail(f" (reading [{key!r}])")
    if isinstance(key, slice):
        if isinstance(obj, (str, list, tuple)):
            return obj[key]
        return Undefined(f"a slice of a {type_name(obj)}")
    if isinstance(obj, dict):
        try:
            if key in obj:
                return obj[key]
        except TypeError:  # an unhashable key
            pass
    elif isinstance(obj, (list, tuple, str)) and isinstance(key, int) and not isinstance(key, bool):
        return obj[key] if -len(obj) <= key < len(obj) else Undefined(f"index {key}")
    if isinstance(key, str) and not key.startswith("_"):
        return attribute(obj, key, limits)
    return Undefined(f"item {key!r}")


_FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def safe_format(fmt: str, args, kwargs) -> str:
    """str.format with plain fields only ({}, {0}, {name}, with a conversion or spec): no attribute or index
    lookups, which is how str.format reaches Python internals."""
    out, auto, pos = [], 0, 0
    for m in _FORMAT_FIELD.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok in ("{{", "}}"):
            out.append(tok[0])
            continue
        if m.group(1) is None:
            raise TemplateSecurityError(f"str.format: unmatched {tok!r} in {fmt[:40]!r}")
        field, _, spec = m.group(1).partition(":")
        field, _, conv = field.partition("!")
        if any(c in field for c in ".[") or any(c in spec for c in "{}"):
            raise TemplateSecurityError(f"str.format: the field {m.group(0)!r} looks up an attribute or item")
        if field == "":
            value, auto = (args[auto] if auto < len(args) else _raise(IndexError("format index"))), auto + 1
        elif field.isdigit():
            value = args[int(field)]
        else:
            value = kwargs[field]
        value = {"r": repr, "s": str, "a": ascii, "": lambda v: v}.get(conv, lambda v: v)(value)
        if re.search(r"\d{5,}", spec):
            raise TemplateLimitError(f"str.format: the width in {spec!r} is too large")
        out.append(format(value, spec))
    out.append(fmt[pos:])
    return "".join(out)


def sized_str_method(s: str, name: str, args, kwargs, limits):
    """A str method whose result can be far larger than its inputs, with the size checked before it is built."""
    cap = limits.max_output
    if name in ("center", "ljust", "rjust", "zfill"):
        if args and isinstance(args[0], int) and args[0] > cap:
            raise TemplateLimitError(f"str.{name}({args[0]}) exceeds the output limit of {cap:,} characters")
    elif name == "expandtabs":
        if args and isinstance(args[0], int) and args[0] > 64:
            raise TemplateLimitError("str.expandtabs: tab size past 64")
    elif name == "replace":
        old, new = (list(args) + [None, None])[:2]
        if isinstance(old, str) and isinstance(new, str):
            n = s.count(old) if old else len(s) + 1
            limits.check_size(len(s) + n * len(new))
    elif name == "join":
        seq = list(args[0]) if args else []
        limits.check_size(sum(len(x) if isinstance(x, str) else 0 for x in seq) + len(s) * len(seq))
        return s.join(seq)
    elif name == "format":
        out = safe_format(s, args, kwargs)
        limits.check_size(len(out))
        return out
    out = getattr(s, name)(*args, **kwargs)
    limits.check_size(len(out))
    return out


def type_name(v) -> str:
    return {type(None): "none", bool: "boolean", int: "integer", float: "float", str: "string", list: "list",
            tuple: "tuple", dict: "mapping"}.get(type(v), type(v).__name__)


def to_str(v) -> str:
    """What {{ v }} prints: Python's str of plain data; Undefined prints nothing."""
    if isinstance(v, str):
        return v
    if isinstance(v, Undefined):
        return ""
    return str(v)


def plain(value, depth: int = 0):
    """Caller data as the template sees it: JSON-like types rebuilt (subclasses back to the base type), anything
    else a placeholder naming its type, as transformers' _plain_template_data."""
    if depth > 100:
        raise TemplateLimitError("template data nested deeper than 100")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v, depth + 1) for v in value)
    if hasattr(value, "item") and callable(value.item) and type(value).__module__ == "numpy":
        return plain(value.item(), depth + 1)
    return f"<{type(value).__name__}>"
