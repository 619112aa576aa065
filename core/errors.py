"""The one exception hierarchy for what ember is given: every parser, loader and argument check raises
an EmberError, so a caller handling untrusted input catches one class.

    EmberError                 anything ember refuses (also the base of StateDictError, TokenizerError ...)
     ├─ FormatError            a file, header or field that is malformed, unsupported or unsafe
     │   └─ LimitError         a well-formed value past the resource budget (ember.limits)
     ├─ SaveError              what no format can write: a value that is not a tensor, an extension, a dtype
     └─ SettingError           an EMBER_* environment variable whose value does not parse (ember.settings)

FormatError and SettingError are also ValueErrors, SaveError a TypeError and a ValueError (and StateDictError
a KeyError) so code written against the older, per-module classes keeps catching them. A save that fails
writing (a full disk) raises the OSError it got, its message naming the destination.
"""
from __future__ import annotations


class EmberError(Exception):
    """ember refuses an input; the message names the file, the field and what was expected."""


class FormatError(EmberError, ValueError):
    """A file is malformed, unsupported, or unsafe; the message names file, field (tensor, chunk, key)."""


class LimitError(FormatError):
    """A value in an input exceeds ember's resource budget (see ember.limits).

    where: the file (or '<N bytes>'); field: what was too big; value, limit: the two numbers;
    below: the value is under a minimum; setting: the attribute of ember.limits.budget (and its environment variable) that raises the limit."""

    def __init__(self, where: str, field: str, value, limit, setting: str | None = None, unit: str = "",
                 below: bool = False):
        self.where, self.field, self.value, self.limit, self.setting = where, field, value, limit, setting
        how = ""
        if setting:
            from .limits import env_name
            how = (f" ({'lower' if below else 'raise'} ember.limits.budget.{setting} or ${env_name(setting)} "
                   "if the input is trusted)")
        side = "under the minimum" if below else "over the limit"
        super().__init__(f"ember: {where}: {field} is {value}{unit}, {side} of {limit}{unit}{how}")


class SaveError(EmberError, TypeError, ValueError):
    """ember.save refuses its arguments: the message names the destination or tensor and what was expected."""


class SettingError(EmberError, ValueError):
    """An EMBER_* environment variable holds a value its setting does not accept; the message names the
    variable, the value and what it accepts (ember.settings)."""


class CustomOpError(EmberError):
    """An ember.custom_op that cannot run as declared: a kernel that fails to compile, a binding the kernel
    never reads, an output of the wrong shape, a missing backward. The message names the op and the backend."""
