"""Jinja's grammar (the part chat templates use) -> a tree of tuples `(kind, line, ...)`, with Jinja's operator
precedence (jinja2/parser.py): conditional expressions < or < and < not < comparisons / in < + - < ~ < * / // %
< ** < unary - + < filters and tests < postfix (.attr, [key], (call)) < primaries.

Statements: if / elif / else, for (tuple targets, an `if` filter, else), set (names, tuples, `ns.attr`, blocks),
macro, break / continue, filter blocks, transformers' `generation` block. Anything else (extends, include,
import, call blocks, custom tags) is a TemplateSyntaxError naming it: a template cannot reach other files.
"""
from __future__ import annotations

from .errors import TemplateSyntaxError
from .lexer import tokenize

MAX_DEPTH = 200  # nesting of expressions and blocks: deeper source is refused, not a RecursionError
COMPARE = ("==", "!=", "<", "<=", ">", ">=")
END_OF_TEST_ARG = ("else", "or", "and")


class Parser:
    def __init__(self, source: str, name: str = "template"):
        self.name = name
        self.toks = tokenize(source, name)
        self.i = 0
        self.depth = 0

    # ------------------------------------------------------------------ token helpers
    @property
    def cur(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", None, self.toks[-1][2] if self.toks else 1)

    def fail(self, msg, line=None):
        raise TemplateSyntaxError(msg, self.name, line if line is not None else self.cur[2])

    def next(self):
        t = self.cur
        self.i += 1
        return t

    def is_op(self, *ops):
        t = self.cur
        return t[0] == "op" and t[1] in ops

    def is_name(self, *names):
        t = self.cur
        return t[0] == "name" and t[1] in names

    def expect_op(self, op):
        if not self.is_op(op):
            self.fail(f"expected {op!r}, got {self._show()}")
        return self.next()

    def expect_name(self, word=None):
        t = self.cur
        if t[0] != "name" or (word is not None and t[1] != word):
            self.fail(f"expected {word or 'a name'}, got {self._show()}")
        return self.next()[1]

    def expect_end(self):
        if self.cur[0] != "block_end":
            self.fail(f"expected the end of the tag, got {self._show()}")
        self.next()

    def _show(self):
        k, v, _ = self.cur
        return {"eof": "the end of the template", "block_end": "'%}'", "var_end": "'}}'"}.get(k, repr(v))

    def _deeper(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"nesting deeper than {MAX_DEPTH}")

    # ------------------------------------------------------------------ template structure
    def parse(self):
        body, end = self.body(())
        if end is not None:
            self.fail(f"unexpected {{% {end} %}}")
        return body

    def body(self, ends: tuple):
        """Nodes up to a block tag named in `ends` -> (nodes, that tag's name); the tag's name is consumed."""
        self._deeper()
        out = []
        while True:
            kind, value, line = self.cur
            if kind == "eof":
                if ends:
                    self.fail(f"missing {{% {ends[-1]} %}}")
                self.depth -= 1
                return out, None
            if kind == "data":
                self.next()
                out.append(("data", line, value))
            elif kind == "var_begin":
                self.next()
                out.append(("print", line, self.tuple_expr()))
                if self.cur[0] != "var_end":
                    self.fail(f"expected '}}}}', got {self._show()}")
                self.next()
            else:  # block_begin
                self.next()
                if self.cur[0] != "name":
                    self.fail(f"expected a tag name, got {self._show()}")
                word = self.cur[1]
                if word in ends:
                    self.next()
                    self.depth -= 1
                    return out, word
                out.append(self.statement())

    def statement(self):
        line = self.cur[2]
        word = self.next()[1]
        handler = getattr(self, f"stmt_{word}", None)
        if handler is None:
            self.fail(f"unknown tag {word!r} (ember's template sandbox has if, for, set, macro, break, continue, "
                      f"filter, generation, raw)", line)
        return handler(line)

    def stmt_if(self, line):
        branches, else_body = [], None
        cond = self.expr()
        self.expect_end()
        while True:
            body, end = self.body(("elif", "else", "endif"))
            branches.append((cond, body))
            if end == "elif":
                cond = self.expr()
                self.expect_end()
                continue
            if end == "else":
                self.expect_end()
                else_body, _ = self.body(("endif",))
            self.expect_end()
            return ("if", line, branches, else_body)

    def stmt_for(self, line):
        target = self.assign_target(allow_attr=False)
        self.expect_name("in")
        it = self.tuple_expr(with_cond=False)
        cond = None
        if self.is_name("if"):
            self.next()
            cond = self.expr()
        if self.is_name("recursive"):
            self.fail("recursive loops are not supported")
        self.expect_end()
        body, end = self.body(("else", "endfor"))
        else_body = None
        if end == "else":
            self.expect_end()
            else_body, _ = self.body(("endfor",))
        self.expect_end()
        return ("for", line, target, it, cond, body, else_body)

    def stmt_set(self, line):
        target = self.assign_target(allow_attr=True)
        if self.is_op("="):
            self.next()
            value = self.tuple_expr()
            self.expect_end()
            return ("set", line, target, value)
        filters = self.filter_chain(None) if self.is_op("|") else None
        self.expect_end()
        body, _ = self.body(("endset",))
        self.expect_end()
        return ("setblock", line, target, body, filters)

    def stmt_macro(self, line):
        name = self.expect_name()
        self.expect_op("(")
        params = []
        while not self.is_op(")"):
            if params:
                self.expect_op(",")
                if self.is_op(")"):
                    break
            pname = self.expect_name()
            default = None
            if self.is_op("="):
                self.next()
                default = self.expr()
            elif params and params[-1][1] is not None:
                self.fail(f"macro {name!r}: parameter {pname!r} without a default follows one with a default")
            params.append((pname, default))
        self.next()
        self.expect_end()
        body, _ = self.body(("endmacro",))
        self.expect_end()
        return ("macro", line, name, params, body)

    def stmt_break(self, line):
        self.expect_end()
        return ("break", line)

    def stmt_continue(self, line):
        self.expect_end()
        return ("continue", line)

    def stmt_generation(self, line):
        self.expect_end()
        body, _ = self.body(("endgeneration",))
        self.expect_end()
        return ("block", line, body)

    def stmt_filter(self, line):
        name = self.expect_name()  # the first filter has no '|'
        args, kwargs = self.call_args() if self.is_op("(") else ([], [])
        filters = [(name, args, kwargs, line)] + self.filter_chain(None)
        self.expect_end()
        body, _ = self.body(("endfilter",))
        self.expect_end()
        return ("filterblock", line, filters, body)

    def assign_target(self, allow_attr: bool):
        """A name, `name.attr` (a namespace's attribute, in set only) or names separated by commas."""
        line = self.cur[2]
        names = []
        while True:
            n = self.expect_name()
            if allow_attr and self.is_op("."):
                self.next()
                attr = self.expect_name()
                if names:
                    self.fail("a namespace attribute cannot be part of a tuple target")
                return ("nsattr", line, n, attr)
            names.append(n)
            if not self.is_op(","):
                break
            self.next()
        return ("target", line, names[0]) if len(names) == 1 else ("targets", line, names)

    # ------------------------------------------------------------------ expressions
    def tuple_expr(self, with_cond=True):
        """An expression, or a tuple of them written with commas (no parentheses)."""
        line = self.cur[2]
        first = self.expr(with_cond)
        if not self.is_op(","):
            return first
        items = [first]
        while self.is_op(","):
            self.next()
            if self.cur[0] in ("var_end", "block_end") or self.is_op(")") or self.is_name("if", "in"):
                break
            items.append(self.expr(with_cond))
        return ("tuple", line, items)

    def expr(self, with_cond=True):
        self._deeper()
        node = self.cond_expr() if with_cond else self.or_expr()
        self.depth -= 1
        return node

    def cond_expr(self):
        node = self.or_expr()
        while self.is_name("if"):
            line = self.next()[2]
            test = self.or_expr()
            other = None
            if self.is_name("else"):
                self.next()
                other = self.cond_expr()
            node = ("cond", line, test, node, other)
        return node

    def or_expr(self):
        node = self.and_expr()
        while self.is_name("or"):
            line = self.next()[2]
            node = ("or", line, node, self.and_expr())
        return node

    def and_expr(self):
        node = self.not_expr()
        while self.is_name("and"):
            line = self.next()[2]
            node = ("and", line, node, self.not_expr())
        return node

    def not_expr(self):
        if self.is_name("not"):
            line = self.next()[2]
            return ("not", line, self.not_expr())
        return self.compare()

    def compare(self):
        line = self.cur[2]
        node = self.math1()
        ops = []
        while True:
            if self.is_op(*COMPARE):
                op = self.next()[1]
            elif self.is_name("in"):
                self.next()
                op = "in"
            elif self.is_name("not") and self.i + 1 < len(self.toks) and self.toks[self.i + 1][:2] == ("name", "in"):
                self.i += 2
                op = "notin"
            else:
                break
            ops.append((op, self.math1()))
        return ("cmp", line, node, ops) if ops else node

    def math1(self):
        node = self.concat()
        while self.is_op("+", "-"):
            tok = self.next()
            node = ("binop", tok[2], tok[1], node, self.concat())
        return node

    def concat(self):
        node = self.math2()
        while self.is_op("~"):
            line = self.next()[2]
            node = ("binop", line, "~", node, self.math2())
        return node

    def math2(self):
        node = self.power()
        while self.is_op("*", "/", "//", "%"):
            tok = self.next()
            node = ("binop", tok[2], tok[1], node, self.power())
        return node

    def power(self):
        node = self.unary()
        while self.is_op("**"):
            line = self.next()[2]
            node = ("binop", line, "**", node, self.unary())
        return node

    def unary(self, with_filter=True):
        self._deeper()
        line = self.cur[2]
        if self.is_op("-"):
            self.next()
            node = ("neg", line, self.unary(False))
        elif self.is_op("+"):
            self.next()
            node = ("pos", line, self.unary(False))
        else:
            node = self.primary()
        node = self.postfix(node)
        if with_filter:
            node = self.filter_expr(node)
        self.depth -= 1
        return node

    def primary(self):
        kind, value, line = self.cur
        if kind == "name":
            self.next()
            if value in ("true", "True"):
                return ("const", line, True)
            if value in ("false", "False"):
                return ("const", line, False)
            if value in ("none", "None"):
                return ("const", line, None)
            return ("name", line, value)
        if kind == "string":
            self.next()
            parts = [value]
            while self.cur[0] == "string":  # adjacent literals join, as in Python
                parts.append(self.next()[1])
            return ("const", line, "".join(parts))
        if kind in ("int", "float"):
            self.next()
            return ("const", line, value)
        if self.is_op("("):
            self.next()
            if self.is_op(")"):
                self.next()
                return ("tuple", line, [])
            node = self.tuple_expr()
            self.expect_op(")")
            return node
        if self.is_op("["):
            self.next()
            items = []
            while not self.is_op("]"):
                if items:
                    self.expect_op(",")
                    if self.is_op("]"):
                        break
                items.append(self.expr())
            self.next()
            return ("list", line, items)
        if self.is_op("{"):
            self.next()
            pairs = []
            while not self.is_op("}"):
                if pairs:
                    self.expect_op(",")
                    if self.is_op("}"):
                        break
                k = self.expr()
                self.expect_op(":")
                pairs.append((k, self.expr()))
            self.next()
            return ("dict", line, pairs)
        self.fail(f"unexpected {self._show()}")

    def postfix(self, node):
        while True:
            line = self.cur[2]
            if self.is_op("."):
                self.next()
                t = self.next()
                if t[0] == "name":
                    node = ("getattr", line, node, t[1])
                elif t[0] == "int":
                    node = ("getitem", line, node, ("const", line, t[1]))
                else:
                    self.fail(f"expected an attribute name after '.', got {t[1]!r}")
            elif self.is_op("["):
                self.next()
                node = ("getitem", line, node, self.subscript())
                self.expect_op("]")
            elif self.is_op("("):
                args, kwargs = self.call_args()
                node = ("call", line, node, args, kwargs)
            else:
                return node

    def subscript(self):
        line = self.cur[2]
        parts, cur = [], None
        if not self.is_op(":"):
            cur = self.expr()
            if not self.is_op(":"):
                return cur
        parts.append(cur)
        while self.is_op(":") and len(parts) < 3:
            self.next()
            parts.append(None if self.is_op(":", "]") else self.expr())
        while len(parts) < 3:
            parts.append(None)
        return ("slice", line, *parts)

    def call_args(self):
        self.expect_op("(")
        args, kwargs = [], []
        while not self.is_op(")"):
            if args or kwargs:
                self.expect_op(",")
                if self.is_op(")"):
                    break
            if self.cur[0] == "name" and self.i + 1 < len(self.toks) and self.toks[self.i + 1][:2] == ("op", "="):
                key = self.next()[1]
                self.next()
                kwargs.append((key, self.expr()))
            else:
                if kwargs:
                    self.fail("a positional argument follows a keyword argument")
                args.append(self.expr())
        self.next()
        return args, kwargs

    def filter_chain(self, node):
        """`| name(args)` repeated; with node None -> the list of (name, args, kwargs, line) (filter blocks)."""
        chain = []
        while self.is_op("|"):
            line = self.next()[2]
            name = self.expect_name()
            while self.is_op("."):  # dotted filter names
                self.next()
                name += "." + self.expect_name()
            args, kwargs = self.call_args() if self.is_op("(") else ([], [])
            chain.append((name, args, kwargs, line))
        if node is None:
            return chain
        for name, args, kwargs, line in chain:
            node = ("filter", line, node, name, args, kwargs)
        return node

    def filter_expr(self, node):
        while True:
            if self.is_op("|"):
                node = self.filter_chain(node)
            elif self.is_name("is"):
                line = self.next()[2]
                negate = False
                if self.is_name("not"):
                    self.next()
                    negate = True
                name = self.expect_name()
                while self.is_op("."):
                    self.next()
                    name += "." + self.expect_name()
                args, kwargs = [], []
                if self.is_op("("):
                    args, kwargs = self.call_args()
                elif (self.cur[0] in ("name", "string", "int", "float") or self.is_op("[", "{")) and \
                        not self.is_name(*END_OF_TEST_ARG):
                    if self.is_name("is"):
                        self.fail("tests cannot be chained with 'is'")
                    args = [self.postfix(self.primary())]
                node = ("test", line, node, name, args, kwargs, negate)
            else:
                return node


def parse(source: str, name: str = "template"):
    return Parser(source, name).parse()
