"""Outputs shaped as transformers' (`model(input_ids).logits`, `.past_key_values`,
`.encoder_last_hidden_state`) that are still the logits tensor itself, so code written against ember's
earlier return value (`model(ids).numpy()`, a loss on `model(x)`, generation) keeps working unchanged.

An output is a Tensor sharing the logits' storage and autograd node (no copy); `logits` returns it. Ops on
it give plain Tensors, so the extra fields live only on the returned object.
"""
from __future__ import annotations

from ember import Tensor


class LMOutput(Tensor):
    """The logits (batch, T, vocab) of a language model, answering transformers' ModelOutput field names:
    past_key_values (the KVCache the call advanced, or None) and, for an encoder-decoder,
    encoder_last_hidden_state (batch, S, dim)."""

    __slots__ = ("past_key_values", "encoder_last_hidden_state")

    @classmethod
    def of(cls, logits: Tensor, past_key_values=None, encoder_last_hidden_state=None) -> LMOutput:
        out = object.__new__(cls)
        out._data, out.device, out.requires_grad = logits._data, logits.device, logits.requires_grad
        out.grad, out._ctx = None, logits._ctx
        out.past_key_values, out.encoder_last_hidden_state = past_key_values, encoder_last_hidden_state
        return out

    @property
    def logits(self) -> LMOutput:
        return self

    def __repr__(self):
        return "LMOutput(logits=" + super().__repr__() + ")"
