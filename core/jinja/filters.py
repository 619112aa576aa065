"""Jinja's built-in filters and tests (jinja2/filters.py, jinja2/tests.py, 3.1) that chat templates use, with
transformers' `tojson` (json.dumps without HTML escaping, ensure_ascii off), over the sandbox's plain data.
Each takes the renderer (for attribute lookups and limits) then Jinja's arguments."""
from __future__ import annotations

import json
import math
import re
from numbers import Number

from .errors import TemplateLimitError
from .values import Function, Lazy, Loop, Macro, Markup, Namespace, Undefined, html_escape, to_str


def _seq(r, v) -> list:
    if isinstance(v, Lazy):
        return list(v)
    if isinstance(v, dict):
        return list(v.keys())
    if isinstance(v, (list, tuple, str)):
        return list(v)
    if isinstance(v, Undefined):
        return []
    raise TypeError(f"{type(v).__name__} is not iterable")


def _key(r, attribute, case_sensitive):
    """The sort / unique key Jinja builds: an attribute path read by the sandbox, strings lowered unless
    case_sensitive."""
    def key(x):
        if attribute is not None:
            x = r.getattr_path(x, attribute)
        return x.lower() if isinstance(x, str) and not case_sensitive else x
    return key


def do_tojson(r, value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if isinstance(indent, int) and indent > 64:
        raise TemplateLimitError(f"tojson indent {indent} past 64")

    def default(o):
        if isinstance(o, Undefined):
            o.fail(" (tojson)")
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
    out = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                     default=default)
    r.limits.check_size(len(out))
    return out


def do_default(r, value, default_value="", boolean=False):
    if isinstance(value, Undefined) or (boolean and not value):
        return default_value
    return value


def do_trim(r, value, chars=None):
    return to_str(value).strip(chars)


def do_length(r, value):
    if isinstance(value, Lazy):
        raise TypeError("object of type 'generator' has no len()")
    return len(value)


def do_join(r, value, d="", attribute=None):
    items = _seq(r, value)
    if attribute is not None:
        items = [r.getattr_path(x, attribute) for x in items]
    parts = [to_str(x) for x in items]
    r.limits.check_size(sum(map(len, parts)) + len(to_str(d)) * len(parts))
    return to_str(d).join(parts)


_WORD_START = re.compile(r"([-\s({\[<]+)")


def do_title(r, s):
    return "".join(x[0].upper() + x[1:].lower() for x in _WORD_START.split(to_str(s)) if x)


def do_replace(r, s, old, new, count=None):
    s, old, new = to_str(s), to_str(old), to_str(new)
    n = s.count(old) if old else len(s) + 1
    r.limits.check_size(len(s) + min(n, count if count is not None and count >= 0 else n) * len(new))
    return s.replace(old, new, -1 if count is None else count)


def do_first(r, value):
    items = [next(iter(value), Undefined("the first item of an empty sequence"))] if isinstance(value, Lazy) \
        else _seq(r, value)
    return items[0] if items else Undefined("the first item of an empty sequence")


def do_last(r, value):
    if isinstance(value, Lazy):
        raise TypeError("'generator' object is not reversible")
    items = _seq(r, value)
    return items[-1] if items else Undefined("the last item of an empty sequence")


def do_items(r, value):
    if isinstance(value, Undefined):
        return []
    if not isinstance(value, dict):
        raise TypeError("the items filter needs a mapping")
    return list(value.items())


def do_dictsort(r, value, case_sensitive=False, by="key", reverse=False):
    if by not in ("key", "value"):
        raise ValueError("You can only sort by either 'key' or 'value'")
    pos = 0 if by == "key" else 1

    def key(kv):
        x = kv[pos]
        return x.lower() if isinstance(x, str) and not case_sensitive else x
    return sorted(value.items(), key=key, reverse=reverse)


def do_sort(r, value, reverse=False, case_sensitive=False, attribute=None):
    return sorted(_seq(r, value), key=_key(r, attribute, case_sensitive), reverse=reverse)


def do_unique(r, value, case_sensitive=False, attribute=None):
    key, seen, out = _key(r, attribute, case_sensitive), set(), []
    for x in _seq(r, value):
        k = key(x)
        if k not in seen:
            seen.add(k)
            out.append(x)
    return out


def _minmax(r, value, fn, case_sensitive, attribute):
    items = _seq(r, value)
    if not items:
        return Undefined("the min/max of an empty sequence")
    return fn(items, key=_key(r, attribute, case_sensitive))


def _lazy_input(r, value):
    """Jinja's map / select guard `if seq:`: a false value (None, Undefined, empty) maps to nothing."""
    return iter(_seq(r, value)) if (value if not isinstance(value, Lazy) else True) else iter(())


def do_map(r, value, *args, **kwargs):
    if "attribute" in kwargs or not args:
        attr, default = kwargs.get("attribute"), kwargs.get("default")

        def get(x):
            v = r.getattr_path(x, attr)
            return default if default is not None and isinstance(v, Undefined) else v
        return Lazy(get(x) for x in _lazy_input(r, value))
    name, rest = args[0], args[1:]
    fn = FILTERS.get(name)
    if fn is None:
        from .errors import TemplateSyntaxError
        raise TemplateSyntaxError(f"no filter named {name!r}", r.name)
    return Lazy(fn(r, x, *rest, **kwargs) for x in _lazy_input(r, value))


def _select(r, value, args, attr: bool, keep: bool):
    items = _lazy_input(r, value)
    if attr:
        if not args:
            raise TypeError("selectattr/rejectattr need an attribute")
        path, args = args[0], args[1:]
        get = (lambda x: r.getattr_path(x, path))
    else:
        get = (lambda x: x)
    if args:
        test = TESTS.get(args[0])
        if test is None:
            from .errors import TemplateSyntaxError
            raise TemplateSyntaxError(f"no test named {args[0]!r}", r.name)
        check = (lambda v: bool(test(r, v, *args[1:])))
    else:
        check = r.truthy
    return Lazy(x for x in items if check(get(x)) == keep)


def do_indent(r, s, width=4, first=False, blank=False):
    ind = width if isinstance(width, str) else " " * int(width)
    s = to_str(s)
    r.limits.check_size(len(s) + len(ind) * (s.count("\n") + 2))
    s += "\n"  # as Jinja: the quirk splitlines needs
    if blank:
        rv = ("\n" + ind).join(s.splitlines())
    else:
        lines = s.splitlines()
        rv = lines.pop(0)
        if lines:
            rv += "\n" + "\n".join(ind + line if line else line for line in lines)
    return ind + rv if first else rv


def do_center(r, s, width=80):
    if width > r.limits.max_output:
        raise TemplateLimitError(f"center({width}) past the output limit")
    return to_str(s).center(width)


def do_int(r, value, default=0, base=10):
    try:
        if isinstance(value, str):
            return int(value, base)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def do_float(r, value, default=0.0):
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def do_round(r, value, precision=0, method="common"):
    if method == "common":
        return round(value, precision)
    fn = {"ceil": math.ceil, "floor": math.floor}[method]
    return fn(value * 10 ** precision) / 10 ** precision


def do_sum(r, value, attribute=None, start=0):
    items = _seq(r, value)
    if attribute is not None:
        items = [r.getattr_path(x, attribute) for x in items]
    total = start
    for x in items:
        total = r.binop("+", total, x, None)
    return total


def do_escape(r, s):
    return html_escape(s)


def do_format(r, value, *args, **kwargs):
    if args and kwargs:
        raise TypeError("can't handle positional and keyword arguments at the same time")
    return r.binop("%", to_str(value), kwargs or tuple(args), None)


def do_wordcount(r, s):
    return len(re.findall(r"\w+", to_str(s)))


def do_list(r, value):
    return _seq(r, value)


def do_reverse(r, value):
    if isinstance(value, str):
        return value[::-1]
    return list(reversed(_seq(r, value)))


def do_attr(r, obj, name):
    from .values import attribute
    return attribute(obj, name, r.limits)


FILTERS = {
    "tojson": do_tojson, "default": do_default, "d": do_default, "trim": do_trim, "length": do_length,
    "count": do_length, "string": lambda r, v: to_str(v), "join": do_join, "upper": lambda r, s: to_str(s).upper(),
    "lower": lambda r, s: to_str(s).lower(), "title": do_title, "capitalize": lambda r, s: to_str(s).capitalize(),
    "replace": do_replace, "first": do_first, "last": do_last, "items": do_items, "dictsort": do_dictsort,
    "sort": do_sort, "unique": do_unique, "list": do_list, "reverse": do_reverse,
    "min": lambda r, v, case_sensitive=False, attribute=None: _minmax(r, v, min, case_sensitive, attribute),
    "max": lambda r, v, case_sensitive=False, attribute=None: _minmax(r, v, max, case_sensitive, attribute),
    "map": do_map, "select": lambda r, v, *a: _select(r, v, a, False, True),
    "reject": lambda r, v, *a: _select(r, v, a, False, False),
    "selectattr": lambda r, v, *a: _select(r, v, a, True, True),
    "rejectattr": lambda r, v, *a: _select(r, v, a, True, False),
    "indent": do_indent, "center": do_center, "int": do_int, "float": do_float, "abs": lambda r, v: abs(v),
    "round": do_round, "sum": do_sum, "safe": lambda r, v: Markup(to_str(v)), "escape": do_escape, "e": do_escape,
    "forceescape": do_escape, "format": do_format, "wordcount": do_wordcount, "attr": do_attr,
}


# ---------------------------------------------------------------------------- tests

def _is_number(v):
    return isinstance(v, Number)


def test_iterable(r, v):
    return isinstance(v, (str, list, tuple, dict, Lazy, Undefined))


def test_sequence(r, v):
    return isinstance(v, (str, list, tuple, dict)) or isinstance(v, Undefined)


TESTS = {
    "defined": lambda r, v: not isinstance(v, Undefined), "undefined": lambda r, v: isinstance(v, Undefined),
    "none": lambda r, v: v is None, "boolean": lambda r, v: v is True or v is False,
    "false": lambda r, v: v is False, "true": lambda r, v: v is True,
    "integer": lambda r, v: isinstance(v, int) and v is not True and v is not False,
    "float": lambda r, v: isinstance(v, float), "number": lambda r, v: _is_number(v),
    "string": lambda r, v: isinstance(v, str), "mapping": lambda r, v: isinstance(v, dict),
    "iterable": test_iterable, "sequence": test_sequence,
    "callable": lambda r, v: isinstance(v, (Function, Macro)),
    "sameas": lambda r, v, other: v is other, "escaped": lambda r, v: False,
    "odd": lambda r, v: v % 2 == 1, "even": lambda r, v: v % 2 == 0,
    "divisibleby": lambda r, v, n: v % n == 0,
    "lower": lambda r, v: to_str(v).islower(), "upper": lambda r, v: to_str(v).isupper(),
    "in": lambda r, v, seq: v in seq,
    "eq": lambda r, a, b: a == b, "equalto": lambda r, a, b: a == b, "==": lambda r, a, b: a == b,
    "ne": lambda r, a, b: a != b, "!=": lambda r, a, b: a != b,
    "lt": lambda r, a, b: a < b, "lessthan": lambda r, a, b: a < b, "<": lambda r, a, b: a < b,
    "le": lambda r, a, b: a <= b, "<=": lambda r, a, b: a <= b,
    "gt": lambda r, a, b: a > b, "greaterthan": lambda r, a, b: a > b, ">": lambda r, a, b: a > b,
    "ge": lambda r, a, b: a >= b, ">=": lambda r, a, b: a >= b,
    "filter": lambda r, v: v in FILTERS, "test": lambda r, v: v in TESTS,
}

__all__ = ["FILTERS", "TESTS", "Loop", "Namespace"]
