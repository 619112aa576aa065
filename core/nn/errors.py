"""The error a layer raises for constructor or call arguments it cannot honour."""
from __future__ import annotations

from ..errors import EmberError


class LayerError(EmberError, ValueError):
    """A layer's argument is out of range or inconsistent; the message names the layer, the argument and
    what it accepts (e.g. `MultiheadAttention: embed_dim 10 is not divisible by num_heads 3`)."""

    def __init__(self, layer: str, argument: str, problem: str):
        self.layer, self.argument = layer, argument
        super().__init__(f"ember: {layer}: {argument} {problem}")
