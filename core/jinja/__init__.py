"""A sandboxed subset of Jinja2 for the templates models carry (chat templates in tokenizer_config.json and GGUF
metadata), written for ember so that rendering needs no jinja2 (which is not a runtime dependency, and is absent
in Pyodide) and reaches nothing but the data it is given.

    t = Template("{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}{% endfor %}", "chat_template")
    t.render(messages=[{"role": "user", "content": " hi "}])           # '<|user|>hi'

What it renders as Jinja2 does (tested against jinja2's ImmutableSandboxedEnvironment on the chat templates of the
major model families): whitespace control with trim_blocks and lstrip_blocks (transformers' settings), if / for
(loop variables, filters, else, break, continue) / set (namespaces, blocks) / macro, Jinja's operators and
precedence, Undefined, the filters and tests chat templates use. What it refuses (an ember TemplateError naming
the template and line): any '_' attribute, mutating methods, calling anything but its own functions and macros,
extends / include / import; and what it bounds (TemplateLimitError): output characters, evaluation steps, wall
time, macro recursion, range() and the size of any string or list built (ember.limits.budget: template_chars,
template_seconds, template_steps).
"""
from __future__ import annotations

from .errors import (TemplateError, TemplateLimitError, TemplateRaised, TemplateSecurityError, TemplateSyntaxError,
                     UndefinedError)
from .parser import parse
from .runtime import Limits, Renderer, raise_exception
from .values import Function, Namespace, Undefined, plain

MAX_RANGE = 100_000  # as jinja2.sandbox.MAX_RANGE
MAX_SOURCE = 1 << 20


def _range(*args):
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise TemplateLimitError(f"range() of {len(r):,} items (at most {MAX_RANGE:,})")
    return list(r)


def _namespace(*args, **kwargs):
    return Namespace(dict(*args, **kwargs))


def _dict(*args, **kwargs):
    return dict(*args, **kwargs)


def default_globals() -> dict:
    return {"range": Function("range", _range), "namespace": Function("namespace", _namespace),
            "dict": Function("dict", _dict), "raise_exception": Function("raise_exception", raise_exception)}


class Template:
    def __init__(self, source: str, name: str = "template"):
        if not isinstance(source, str):
            raise TemplateSyntaxError(f"a template must be a string, got {type(source).__name__}", name)
        if len(source) > MAX_SOURCE:
            raise TemplateLimitError(f"{len(source):,} characters of source (at most {MAX_SOURCE:,})", name)
        self.name, self.source = name, source
        try:
            self.body = parse(source, name)
        except RecursionError:
            raise TemplateLimitError("source nested too deeply to parse", name) from None

    def render(self, globals_: dict | None = None, **data) -> str:
        """The output for `data` (plain data: copied as transformers does, other objects become placeholders);
        globals_: functions to add (Function objects) beside range, namespace, dict and raise_exception."""
        from ember.limits import budget
        limits = Limits(budget.template_chars, budget.template_seconds, budget.template_steps)
        env = {**default_globals(), **(globals_ or {}), **{k: plain(v) for k, v in data.items()}}
        r = Renderer(self.name, env, limits)
        try:
            return r.render(self.body)
        except TemplateError as e:
            if e.template_name == "template" and self.name != "template":  # raised where the name was not known
                raise type(e)(e.template_message, self.name, e.line) from None
            raise
        except RecursionError:
            raise TemplateLimitError("nested too deeply to render", self.name) from None


__all__ = ["Function", "Template", "TemplateError", "TemplateLimitError", "TemplateRaised", "TemplateSecurityError",
           "TemplateSyntaxError", "Undefined", "UndefinedError"]
