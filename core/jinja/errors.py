"""The errors a template raises: all EmberErrors naming the template and, where known, the line."""
from __future__ import annotations

from ..errors import EmberError


class TemplateError(EmberError, ValueError):
    """A template that cannot be parsed or rendered (names the template and the line)."""

    def __init__(self, message: str, name: str = "template", line: int | None = None):
        where = f"{name}, line {line}" if line else name
        super().__init__(f"ember: {where}: {message}")
        self.template_message, self.template_name, self.line = message, name, line


class TemplateSyntaxError(TemplateError):
    """Source the subset does not parse (or a tag, filter or test it does not have)."""


class TemplateSecurityError(TemplateError):
    """What the sandbox refuses: underscore attributes, mutating methods, anything but plain data."""


class TemplateLimitError(TemplateError):
    """Output, time, steps, recursion or a range past the sandbox's bounds."""


class TemplateRaised(TemplateError):
    """The template itself raised (raise_exception('...'), as transformers' chat templates do)."""


class UndefinedError(TemplateError):
    """An undefined value used where a value is needed (an attribute of it, arithmetic, a call)."""
