"""Greedy generation through a decoder exported with its KV cache as inputs and outputs, the layout Optimum,
transformers.js, onnxruntime-genai and torch.onnx exports share:

    inputs   input_ids (B, S), attention_mask (B, past + S)?, position_ids (B, S)?,
             past_key_values.<i>.key / .value (B, heads, past, head size)  [or past_key_values.<i>.decoder.key ...,
             or past_<i> (2, B, heads, past, head size), onnxruntime's fused GPT-2 Attention]
             anything else (encoder_hidden_states, use_cache_branch ...) from the caller or known defaults
    outputs  logits (B, S, vocab), present.<i>.key / .value (or present.<i>.decoder.*, present_<i>)

    dec = Decoder(InferenceSession("decoder_model.onnx"))
    tokens = dec.generate([50258, 50259], max_new_tokens=24, eos_token_id=50257, feeds={"encoder_hidden_states": h})

Each step feeds the new token alone with the presents of the last step as the pasts: the cache lives in the
session's outputs, as in onnxruntime's generation loops.
"""
from __future__ import annotations

import re

import numpy as np

from .wire import OnnxFormatError

_PAST = re.compile(r"^past_key_values\.(\d+)\.(.+)$|^past_(\d+)$|^past$")


def _present_name(past: str) -> list[str]:
    """The output names a past input's present may have, most common first."""
    m = _PAST.match(past)
    if m.group(1) is not None:
        i, rest = m.group(1), m.group(2)
        return [f"present.{i}.{rest}", f"present_key_values.{i}.{rest}", f"present.{i}.{rest.replace('.', '_')}"]
    if m.group(3) is not None:
        return [f"present_{m.group(3)}", f"present.{m.group(3)}"]
    return ["present"]


class Decoder:
    """A session over a decoder export with KV inputs: `step(ids)` -> logits, `generate(prompt, ...)` -> tokens."""

    def __init__(self, session):
        """session: ember's InferenceSession, or anything with its get_inputs / get_outputs / run (onnxruntime's,
        for a reference run of the same loop)."""
        from .session import InferenceSession
        self.session = session
        self.where = session.where if isinstance(session, InferenceSession) else "the decoder"
        self.inputs = {a.name: a for a in session.get_inputs()}
        outs = [o.name for o in session.get_outputs()]
        if "input_ids" not in self.inputs:
            raise OnnxFormatError(f"ember: {self.where}: a decoder export takes input_ids; this model takes "
                                  f"{sorted(self.inputs)}")
        self.logits = "logits" if "logits" in outs else outs[0]
        self.pasts = {}  # past input -> present output
        for name in self.inputs:
            if _PAST.match(name):
                present = next((p for p in _present_name(name) if p in outs), None)
                if present is None:
                    raise OnnxFormatError(f"ember: {self.where}: past input {name!r} has no present output "
                                          f"(looked for {_present_name(name)})")
                self.pasts[name] = present
        self.cache = None
        self.length = 0

    def reset(self):
        self.cache, self.length = None, 0

    def _empty_past(self, name, batch):
        shape = self.inputs[name].shape or []
        dims, seen_seq = [], False
        for i, d in enumerate(shape):
            if isinstance(d, int) and d > 0:
                dims.append(d)
            elif i == 0 or (name == "past" or name.startswith("past_")) and i == 1:
                dims.append(batch)
            elif not seen_seq:  # the first symbolic dimension past the batch is the sequence: empty
                dims.append(0)
                seen_seq = True
            else:
                raise OnnxFormatError(f"ember: {self.where}: past input {name!r} has more than one "
                                      f"symbolic dimension besides the batch ({shape}); pass its first value")
        return np.zeros(dims, _np_type(self.inputs[name].type))

    def step(self, ids, feeds=None) -> np.ndarray:
        """ids (B, S) -> logits (B, S, vocab) for those tokens after the cached ones; the cache grows by S."""
        ids = np.asarray(ids, np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        b, s = ids.shape
        f = {"input_ids": ids.astype(_np_type(self.inputs["input_ids"].type))}
        total = self.length + s
        if "attention_mask" in self.inputs:
            f["attention_mask"] = np.ones((b, total), _np_type(self.inputs["attention_mask"].type))
        if "position_ids" in self.inputs:
            f["position_ids"] = np.broadcast_to(np.arange(self.length, total), (b, s)).astype(
                _np_type(self.inputs["position_ids"].type))
        if "use_cache_branch" in self.inputs:
            f["use_cache_branch"] = np.array([self.length > 0])
        for name in self.pasts:
            f[name] = self.cache[name] if self.cache is not None else self._empty_past(name, b)
        f.update(feeds or {})
        missing = sorted(set(self.inputs) - set(f))
        if missing:
            raise OnnxFormatError(f"ember: {self.where}: the decoder also needs {missing}; pass them as "
                                  "feeds")
        names = [self.logits] + list(self.pasts.values())
        outs = self.session.run(names, f)
        self.cache = dict(zip(self.pasts, outs[1:]))
        self.length = total
        return outs[0]

    def generate(self, prompt, max_new_tokens=24, eos_token_id=None, feeds=None, on_token=None) -> list[int]:
        """Greedy: the prompt's ids in one step, then one token at a time; stops at eos_token_id (an int or a
        collection), returns the new tokens. on_token(id) sees each as it comes."""
        self.reset()
        eos = set() if eos_token_id is None else {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id)
        logits = self.step(np.asarray(prompt, np.int64).reshape(1, -1), feeds)
        out = []
        for _ in range(max_new_tokens):
            tok = int(np.argmax(logits[0, -1]))
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            if tok in eos:
                break
            logits = self.step(np.array([[tok]], np.int64), feeds)
        return out


_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
          "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(double)": np.float64}


def _np_type(t):
    return _TYPES.get(t, np.float32)
