"""Rendering a parsed template (parser.py) in the sandbox: a tree walk over plain data (values.py), with Jinja's
scoping (a for loop's assignments stay in the loop, `if` makes no scope, macros see the template's top level),
its Undefined, its operators, and bounds on everything a hostile template could grow: output characters, steps,
wall time, macro recursion, ranges and the size of any string or list it builds."""
from __future__ import annotations

import math
import operator
import re
import time

from . import filters as F
from .errors import (TemplateError, TemplateLimitError, TemplateRaised, TemplateSecurityError, TemplateSyntaxError,
                     UndefinedError)
from .values import Function, Lazy, Loop, Macro, Namespace, Undefined, attribute, check_name, item, to_str, type_name


class Limits:
    """Bounds of one render; every check raises TemplateLimitError naming the limit."""

    def __init__(self, max_output: int, max_seconds: float, max_steps: int, max_depth: int = 64):
        self.max_output, self.max_seconds, self.max_steps, self.max_depth = max_output, max_seconds, max_steps, max_depth
        self.deadline = time.monotonic() + max_seconds
        self.steps = 0

    def step(self):
        self.steps += 1
        if self.steps & 1023 == 0:
            if self.steps > self.max_steps:
                raise TemplateLimitError(f"more than {self.max_steps:,} evaluation steps")
            if time.monotonic() > self.deadline:
                raise TemplateLimitError(f"rendering took longer than {self.max_seconds} s")

    def check_size(self, n: int):
        if n > self.max_output:
            raise TemplateLimitError(f"a value of {n:,} characters/items exceeds the output limit of "
                                     f"{self.max_output:,}")


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "**": operator.pow}
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
        ">=": operator.ge}
_PERCENT_SPEC = re.compile(r"%[-#0 +]*(\*|\d{4,})")
MAX_INT_BITS = 4096


class Renderer:
    def __init__(self, name: str, globals_: dict, limits: Limits):
        self.name, self.limits = name, limits
        self.frames = [dict(globals_), {}]   # [globals + caller data, template top level, nested scopes ...]
        self.out_len = 0
        self.macro_depth = 0

    # ------------------------------------------------------------------ names
    def lookup(self, name):
        for f in reversed(self.frames):
            if name in f:
                return f[name]
        return Undefined(f"{name!r}")

    def assign(self, target, value, line):
        kind = target[0]
        if kind == "target":
            self.frames[-1][target[2]] = value
        elif kind == "targets":
            names = target[2]
            vals = self.iterate(value, line)
            if len(vals) != len(names):
                self.fail(f"cannot unpack {len(vals)} values into {len(names)} names", line)
            for n, v in zip(names, vals):
                self.frames[-1][n] = v
        else:  # nsattr
            ns = self.lookup(target[2])
            if not isinstance(ns, Namespace):
                raise TemplateSecurityError(f"cannot assign an attribute of {target[2]!r}: only a namespace() "
                                            f"takes attributes", self.name, line)
            check_name(target[3])
            ns.attrs[target[3]] = value

    def fail(self, msg, line, cls=TemplateError):
        raise cls(msg, self.name, line)

    # ------------------------------------------------------------------ statements
    def render(self, body) -> str:
        out: list[str] = []
        self.run(body, out)
        return "".join(out)

    def emit(self, out, s: str):
        self.out_len += len(s)
        if self.out_len > self.limits.max_output:
            raise TemplateLimitError(f"output past {self.limits.max_output:,} characters", self.name)
        out.append(s)

    def run(self, body, out):
        for node in body:
            self.limits.step()
            kind = node[0]
            if kind == "data":
                self.emit(out, node[2])
            elif kind == "print":
                self.emit(out, to_str(self.eval(node[2])))
            elif kind == "if":
                for cond, branch in node[2]:
                    if self.truthy(self.eval(cond)):
                        self.run(branch, out)
                        break
                else:
                    if node[3] is not None:
                        self.run(node[3], out)
            elif kind == "for":
                self.run_for(node, out)
            elif kind == "set":
                self.assign(node[2], self.eval(node[3]), node[1])
            elif kind == "setblock":
                value = self.capture(node[3])
                for fname, args, kwargs, line in node[4] or ():
                    value = self.apply_filter(fname, value, args, kwargs, line)
                self.assign(node[2], value, node[1])
            elif kind == "macro":
                self.frames[-1][node[2]] = Macro(node[2], node[3], node[4], node[1])
            elif kind == "break":
                raise _Break()
            elif kind == "continue":
                raise _Continue()
            elif kind == "block":
                self.run(node[2], out)
            elif kind == "filterblock":
                value = self.capture(node[3])
                for fname, args, kwargs, line in node[2]:
                    value = self.apply_filter(fname, value, args, kwargs, line)
                self.emit(out, to_str(value))
            else:
                self.fail(f"unknown node {kind!r}", node[1])

    def capture(self, body) -> str:
        buf: list[str] = []
        self.run(body, buf)
        return "".join(buf)

    def run_for(self, node, out):
        """A for loop: each iteration runs in a fresh scope (what the body sets is gone at the next iteration and
        after the loop, as in Jinja), holding the target names and `loop`."""
        _, line, target, it, cond, body, else_body = node
        items = self.iterate(self.eval(it), line)
        if cond is not None:  # the filter runs before the loop: loop.index counts the kept items
            kept = []
            for x in items:
                self.limits.step()
                self.frames.append({})
                try:
                    self.assign(target, x, line)
                    if self.truthy(self.eval(cond)):
                        kept.append(x)
                finally:
                    self.frames.pop()
            items = kept
        loop = Loop(items)
        for i, x in enumerate(items):
            self.limits.step()
            loop.index0 = i
            self.frames.append({"loop": loop})
            try:
                self.assign(target, x, line)
                self.run(body, out)
            except _Continue:
                continue
            except _Break:
                break
            finally:
                self.frames.pop()
        if not items and else_body is not None:
            self.run(else_body, out)

    def iterate(self, v, line) -> list:
        if isinstance(v, (list, tuple, str, Lazy)):
            return list(v)
        if isinstance(v, dict):
            return list(v.keys())
        if isinstance(v, Undefined):
            return []
        self.fail(f"a {type_name(v)} is not iterable", line)

    # ------------------------------------------------------------------ expressions
    def truthy(self, v) -> bool:
        if isinstance(v, (Namespace, Loop, Macro, Function, Lazy)):
            return True
        return bool(v)

    def eval(self, node):
        self.limits.step()
        kind = node[0]
        if kind == "const":
            return node[2]
        if kind == "name":
            return self.lookup(node[2])
        if kind == "getattr":
            return attribute(self.eval(node[2]), node[3], self.limits)
        if kind == "getitem":
            obj = self.eval(node[2])
            key = node[3]
            if key[0] == "slice":
                parts = [None if p is None else self.eval(p) for p in key[2:]]
                for p in parts:
                    if p is not None and not isinstance(p, int):
                        self.fail(f"slice indices must be integers, got {type_name(p)}", node[1])
                return item(obj, slice(*parts), self.limits)
            return item(obj, self.eval(key), self.limits)
        if kind == "binop":
            return self.binop(node[2], self.eval(node[3]), self.eval(node[4]), node[1])
        if kind == "cmp":
            return self.compare(node)
        if kind == "and":
            a = self.eval(node[2])
            return self.eval(node[3]) if self.truthy(a) else a
        if kind == "or":
            a = self.eval(node[2])
            return a if self.truthy(a) else self.eval(node[3])
        if kind == "not":
            return not self.truthy(self.eval(node[2]))
        if kind in ("neg", "pos"):
            v = self.eval(node[2])
            if isinstance(v, Undefined):
                v.fail(" (unary operator)")
            if not isinstance(v, (int, float)):
                self.fail(f"bad operand type for unary {'-' if kind == 'neg' else '+'}: {type_name(v)}", node[1])
            return -v if kind == "neg" else +v
        if kind == "cond":
            if self.truthy(self.eval(node[2])):
                return self.eval(node[3])
            return self.eval(node[4]) if node[4] is not None else Undefined("the else branch")
        if kind == "list":
            return [self.eval(x) for x in node[2]]
        if kind == "tuple":
            return tuple(self.eval(x) for x in node[2])
        if kind == "dict":
            d = {}
            for k, v in node[2]:
                key = self.eval(k)
                try:
                    d[key] = self.eval(v)
                except TypeError:
                    self.fail(f"a {type_name(key)} cannot be a dict key", node[1])
            return d
        if kind == "call":
            return self.call(node)
        if kind == "filter":
            return self.apply_filter(node[3], self.eval(node[2]), node[4], node[5], node[1])
        if kind == "test":
            result = self.apply_test(node[3], self.eval(node[2]), node[4], node[5], node[1])
            return not result if node[6] else result
        self.fail(f"unknown expression {kind!r}", node[1])

    def compare(self, node):
        left = self.eval(node[2])
        for op, expr in node[3]:
            right = self.eval(expr)
            if op in ("in", "notin"):
                if isinstance(right, Lazy):
                    right = list(right)
                if isinstance(right, Undefined):
                    ok = False
                elif not isinstance(right, (str, list, tuple, dict)):
                    self.fail(f"'in' needs a string, list or mapping on its right, got {type_name(right)}", node[1])
                elif isinstance(right, str) and not isinstance(left, str):
                    self.fail(f"'in <string>' needs a string on its left, got {type_name(left)}", node[1])
                else:
                    try:
                        ok = left in right
                    except TypeError:
                        ok = False
                ok = ok if op == "in" else not ok
            else:
                if op not in ("==", "!=") and (isinstance(left, Undefined) or isinstance(right, Undefined)):
                    (left if isinstance(left, Undefined) else right).fail(f" (compared with {op})")
                try:
                    ok = _CMP[op](left, right)
                except TypeError:
                    self.fail(f"'{op}' is not supported between a {type_name(left)} and a {type_name(right)}",
                              node[1])
            if not ok:
                return False
            left = right
        return True

    def binop(self, op, a, b, line):
        for v in (a, b):
            if isinstance(v, Undefined) and op != "~":
                v.fail(f" (operator {op})")
        if op == "~":  # Jinja joins as plain strings (str_join): no Markup escaping here
            s = "".join((to_str(a), to_str(b)))
            self.limits.check_size(len(s))
            return s
        if op == "*":  # repetition: its size is known before it is built
            seq, n = (a, b) if isinstance(a, (str, list, tuple)) else (b, a)
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                self.limits.check_size(len(seq) * max(n, 0))
        if op == "%" and isinstance(a, str):
            if _PERCENT_SPEC.search(a):
                raise TemplateLimitError("%-formatting with a '*' or 4+ digit width", self.name, line)
            r = a % (b if isinstance(b, (tuple, dict)) else (b,))
            self.limits.check_size(len(r))
            return r
        if op == "**" and isinstance(a, int) and isinstance(b, int) and b > 0 and \
                abs(a) > 1 and b * math.log2(abs(a)) > MAX_INT_BITS:
            raise TemplateLimitError(f"{a} ** {b} is larger than {MAX_INT_BITS} bits", self.name, line)
        try:
            r = _ARITH[op](a, b)
        except ZeroDivisionError:
            self.fail("division by zero", line)
        except (TypeError, OverflowError, ValueError) as e:
            self.fail(f"operator {op} on a {type_name(a)} and a {type_name(b)}: {e}", line)
        if isinstance(r, (str, list, tuple)):
            self.limits.check_size(len(r))
        elif isinstance(r, int) and r.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"an integer past {MAX_INT_BITS} bits", self.name, line)
        return r

    def args(self, args, kwargs):
        return [self.eval(a) for a in args], {k: self.eval(v) for k, v in kwargs}

    def call(self, node):
        fn = self.eval(node[2])
        args, kwargs = self.args(node[3], node[4])
        if isinstance(fn, Macro):
            return self.call_macro(fn, args, kwargs, node[1])
        if isinstance(fn, Function):
            try:
                r = fn.fn(*args, **kwargs)
            except TemplateError:
                raise
            except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
                self.fail(f"{fn.name}(): {type(e).__name__}: {e}", node[1])
            if isinstance(r, (str, list, tuple)):
                self.limits.check_size(len(r))
            return r
        if isinstance(fn, Undefined):
            fn.fail(" (called)")
        raise TemplateSecurityError(f"a {type_name(fn)} is not callable", self.name, node[1])

    def call_macro(self, m: Macro, args, kwargs, line):
        if len(args) > len(m.params):
            self.fail(f"macro {m.name!r} takes {len(m.params)} arguments, got {len(args)}", line)
        self.macro_depth += 1
        if self.macro_depth > self.limits.max_depth:
            raise TemplateLimitError(f"macro calls nested deeper than {self.limits.max_depth}", self.name, line)
        scope = {}
        for i, (pname, default) in enumerate(m.params):
            if i < len(args):
                scope[pname] = args[i]
            elif pname in kwargs:
                scope[pname] = kwargs.pop(pname)
            else:
                scope[pname] = self.eval(default) if default is not None else Undefined(f"argument {pname!r}")
        if kwargs:
            self.fail(f"macro {m.name!r} got unexpected keyword arguments {sorted(kwargs)}", line)
        saved = self.frames
        self.frames = self.frames[:2] + [scope]  # a macro sees the globals and the template's top level
        try:
            return self.capture(m.body)
        finally:
            self.frames = saved
            self.macro_depth -= 1

    def apply_filter(self, name, value, args, kwargs, line):
        fn = F.FILTERS.get(name)
        if fn is None:
            raise TemplateSyntaxError(f"no filter named {name!r}", self.name, line)
        a, k = self.args(args, kwargs)
        try:
            r = fn(self, value, *a, **k)
        except TemplateError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError) as e:
            self.fail(f"filter {name!r}: {type(e).__name__}: {e}", line)
        if isinstance(r, (str, list, tuple)):
            self.limits.check_size(len(r))
        return r

    def apply_test(self, name, value, args, kwargs, line):
        fn = F.TESTS.get(name)
        if fn is None:
            raise TemplateSyntaxError(f"no test named {name!r}", self.name, line)
        a, k = self.args(args, kwargs)
        try:
            return bool(fn(self, value, *a, **k))
        except TemplateError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
            self.fail(f"test {name!r}: {type(e).__name__}: {e}", line)

    # ------------------------------------------------------------------ used by filters
    def getattr_path(self, obj, path):
        """'a.b.0' attribute / item lookups, as Jinja's attribute filters read them."""
        for part in str(path).split("."):
            obj = item(obj, int(part), self.limits) if part.isdigit() else attribute(obj, part, self.limits)
        return obj


def raise_exception(message):
    raise TemplateRaised(str(message))


__all__ = ["Limits", "Renderer", "UndefinedError", "raise_exception"]
