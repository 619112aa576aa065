"""Jinja's lexer, as transformers configures it for chat templates (trim_blocks, lstrip_blocks, newlines
normalized, no trailing newline kept): source -> a flat token list.

Tokens are (kind, value, line): "data" (text between tags), "var_begin"/"var_end" ({{ }}), "block_begin"/
"block_end" ({% %}), and inside tags "name", "string", "int", "float", "op". Comments vanish; `{% raw %}` bodies
become data. Whitespace control as Jinja: `{%-`/`-%}` (and `{{-`, `-}}`, `{#-`, `-#}`) strip all whitespace on
that side; lstrip_blocks removes the spaces and tabs before a block or comment tag that starts its line
(unless `{%+`); trim_blocks removes the first newline after a block or comment tag (unless `+%}`).
"""
from __future__ import annotations

import re

from .errors import TemplateSyntaxError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLOAT = re.compile(r"(\d(_?\d)*)?\.\d(_?\d)*([eE][+-]?\d(_?\d)*)?|\d(_?\d)*[eE][+-]?\d(_?\d)*")
_INT = re.compile(r"\d(_?\d)*")
_STRING = re.compile(r"'([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\"", re.S)
_OPS = ("//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", ".", ",", ":", "|",
        "(", ")", "[", "]", "{", "}")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_TAG = re.compile(r"\{[{%#]")
_SPACE = re.compile(r"\s+")
_RAW_END = re.compile(r"\{%(-?)\s*endraw\s*(-?)%\}")
_ESCAPES = re.compile(r"\\(N\{[^}]*\}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
                   "f": "\f", "v": "\v", "\n": ""}


def _unescape(body: str, name: str, line: int) -> str:
    """A string literal's body with Python's escapes (Jinja decodes them as 'unicode-escape')."""
    def one(m):
        e = m.group(1)
        if e in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[e]
        if e[0] in "uUx":
            code = int(e[1:], 16) if len(e) > 1 else -1  # -1: a truncated escape (\u without its 4 digits)
            if not 0 <= code <= 0x10FFFF:  # \UFFFFFFFF is no character (Python's decoder refuses both)
                raise TemplateSyntaxError(f"string escape {m.group(0)[:10]!r} is truncated or past U+10FFFF",
                                          name, line)
            return chr(code)
        if e[0] in "01234567":  # \8 and \9 are no octal escape: kept as written, as Python does
            return chr(int(e, 8))
        if e[0] == "N":
            import unicodedata
            try:
                return unicodedata.lookup(e[2:-1])
            except KeyError:
                raise TemplateSyntaxError(f"unknown character name {e!r} in a string", name, line) from None
        return "\\" + e  # an unknown escape stays as written
    return _ESCAPES.sub(one, body) if "\\" in body else body


def normalize(source: str) -> str:
    """Newlines as Jinja's lexer leaves them: every line break (str.splitlines' set) -> '\\n', and one trailing
    line break dropped (keep_trailing_newline=False)."""
    return "\n".join(source.splitlines())


def tokenize(source: str, name: str = "template") -> list[tuple]:
    src = normalize(source)
    out: list[tuple] = []
    pos, line, n = 0, 1, len(src)
    strip_next = False      # the previous tag ended with '-': the whitespace that follows belongs to it
    trim_next = False       # the previous block/comment tag ended without '+': so does one newline that follows
    line_starting = True    # the previous tag (with what it took) ended a line, or nothing came before
    while pos < n:
        m = _TAG.search(src, pos)
        start = m.start() if m else n
        text = src[pos:start]
        if strip_next:
            kept = text.lstrip()
            line_starting = text[:len(text) - len(kept)].endswith("\n")
            text = kept
        elif trim_next and text.startswith("\n"):
            text, line_starting = text[1:], True
        if m is None:
            if text:
                out.append(("data", text, line))
            break
        kind = src[start + 1]                          # '{', '%' or '#'
        mark = src[start + 2:start + 3]
        if mark == "-":
            text = text.rstrip()
        elif kind in "%#" and mark != "+":             # lstrip_blocks: a tag that only whitespace precedes on its line
            cut = text.rfind("\n") + 1
            if (cut > 0 or line_starting) and _SPACE.fullmatch(text, cut):
                text = text[:cut]
        if text:
            out.append(("data", text, line))
        line += src.count("\n", pos, start)
        body_start = start + 2 + (mark in ("-", "+"))
        if kind == "#":
            end = src.find("#}", body_start)
            if end < 0:
                raise TemplateSyntaxError("unclosed comment", name, line)
            end_mark = src[end - 1] if end - 1 >= body_start and src[end - 1] in "-+" else ""
            line += src.count("\n", start, end)
            pos = end + 2
        else:
            toks, pos, end_mark, line = _tag(src, body_start, kind, name, line)
        strip_next, trim_next, line_starting = end_mark == "-", kind != "{" and end_mark == "", False
        if kind == "#":
            continue
        if kind == "%" and len(toks) == 1 and toks[0][:2] == ("name", "raw"):  # {% raw %} ... {% endraw %}
            r = _RAW_END.search(src, pos)
            if r is None:
                raise TemplateSyntaxError("missing {% endraw %}", name, line)
            raw = src[pos:r.start()]
            raw = raw.lstrip() if strip_next else (raw[1:] if trim_next and raw.startswith("\n") else raw)
            raw = raw.rstrip() if r.group(1) else raw
            if raw:
                out.append(("data", raw, line))
            line += src.count("\n", pos, r.end())
            pos = r.end()
            strip_next, trim_next = bool(r.group(2)), not r.group(2)
            continue
        out.append(("var_begin" if kind == "{" else "block_begin", None, line))
        out.extend(toks)
        out.append(("var_end" if kind == "{" else "block_end", None, line))
    return out


def _tag(src: str, i: int, kind: str, name: str, line: int):
    """The tokens of one tag body from i -> (tokens, position after the tag, '-' | '+' | '', line)."""
    close = "}}" if kind == "{" else "%}"
    toks, stack, n = [], [], len(src)
    while True:
        while i < n and src[i] in " \t\n\r":
            line += src[i] == "\n"
            i += 1
        if i >= n:
            raise TemplateSyntaxError(f"unclosed tag (expected {close!r})", name, line)
        if not stack:
            for mark in ("-", "+", ""):
                if src.startswith(mark + close, i) and (mark != "+" or kind == "%"):
                    return toks, i + len(mark) + 2, mark, line
        c = src[i]
        m = _STRING.match(src, i) if c in "'\"" else None
        if m:
            body = m.group(1) if m.group(1) is not None else m.group(2)
            toks.append(("string", _unescape(body, name, line), line))
            line += body.count("\n")
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit() and toks and toks[-1][0] != "name"):
            m = _FLOAT.match(src, i)
            if m and not (toks and toks[-1][1] == "." and toks[-1][0] == "op"):
                toks.append(("float", float(m.group(0).replace("_", "")), line))
                i = m.end()
                continue
            m = _INT.match(src, i)
            if m:
                toks.append(("int", int(m.group(0).replace("_", "")), line))
                i = m.end()
                continue
        m = _NAME.match(src, i)
        if m:
            toks.append(("name", m.group(0), line))
            i = m.end()
            continue
        for op in _OPS:
            if src.startswith(op, i):
                if op in _OPEN:
                    stack.append(_OPEN[op])
                elif op in (")", "]", "}"):
                    if not stack or stack.pop() != op:
                        raise TemplateSyntaxError(f"unexpected {op!r}", name, line)
                toks.append(("op", op, line))
                i += len(op)
                break
        else:
            raise TemplateSyntaxError(f"unexpected character {c!r}", name, line)
