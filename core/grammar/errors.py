"""The one error a grammar raises: a pattern or schema it cannot compile, or one past its size/time bounds."""
from __future__ import annotations

from ..errors import EmberError


class GrammarError(EmberError, ValueError):
    """A regex, schema or choice list that cannot be compiled to a token mask (names what and why)."""
