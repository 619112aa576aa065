"""Whisper's decoder, one token in one call, where the model's device has a kernel for the registry's
`xattn_decoder_plan` op (ember.kernels; the CPU backend's compiled kernels: cpu_kernels/decode_xattn.c). A token
of tiny.en is ~170 small tensor ops in Python; the fused step is one call plus the output projection.

The decoder describes its layers backend-free (numpy arrays of its float32 weights, ints); anything else (a
prompt of several tokens, a batch of beams, gradients, float16 weights, a device without the kernel) runs the
layers op by op, the composed path the fused one is tested against (tests/test_whisper_fused_decode.py).
"""
from __future__ import annotations

import operator

import numpy as np

import ember
from ember import kernels, nn


def _linear(m, sources):
    """(data, type, rows, cols, bias) of a float32 nn.Linear as decode_xattn.c reads it: (out, in) rows (type 0)
    or the CPU backend's input-major layout (type -1); None otherwise."""
    if not isinstance(m, nn.Linear) or m.weight.dtype is not ember.float32 or \
            m.bias is not None and m.bias.dtype is not ember.float32:
        return None
    a = m.weight._data
    if not isinstance(a, np.ndarray):
        return None
    bias = None if m.bias is None else m.bias._data
    sources.append((m, "weight", m.weight, a))
    if m.bias is not None:
        sources.append((m, "bias", m.bias, bias))
    rows, cols = a.shape
    if a.flags.c_contiguous:
        return a, 0, rows, cols, bias
    if a.T.flags.c_contiguous:
        return a.T, -1, rows, cols, bias
    return None


def _norm(m, sources):
    if type(m) is not nn.LayerNorm or m.weight is None or m.weight.dtype is not ember.float32:
        return None
    sources.append((m, "weight", m.weight, m.weight._data))
    if m.bias is not None:
        sources.append((m, "bias", m.bias, m.bias._data))
    return m.weight._data, None if m.bias is None else m.bias._data


def unchanged(sources):
    """A check of whether every module still holds the tensors, with the same arrays, the plan was built from:
    () -> bool. It runs twice a decoded token (the step and the head), so it compares whole columns with map()
    (no Python frame an entry: ~90 entries for tiny's decoder)."""
    mods, attrs, tensors, arrays = (list(c) for c in zip(*sources)) if sources else ([], [], [], [])
    data, is_not = operator.attrgetter("_data"), operator.is_not

    def check() -> bool:
        return not (any(map(is_not, map(getattr, mods, attrs), tensors))
                    or any(map(is_not, map(data, tensors), arrays)))
    return check


def decoder_spec(decoder, sources):
    """The spec of a TextDecoder's layers for the xattn_decoder_plan op, or None."""
    layers, eps = [], set()
    for block in decoder.layers:
        sa, xa = block.self_attn, getattr(block, "encoder_attn", None)
        if xa is None or sa.fused or sa.qk_norm or sa.n_kv != sa.n_heads:
            return None
        parts = {"ln1": _norm(block.self_attn_layer_norm, sources), "ln2": _norm(block.encoder_attn_layer_norm, sources),
                 "ln3": _norm(block.final_layer_norm, sources)}
        for key, m in (("q", sa.q_proj), ("k", sa.k_proj), ("v", sa.v_proj), ("o", sa.out_proj), ("xq", xa.q_proj),
                       ("xo", xa.out_proj), ("fc1", block.fc1), ("fc2", block.fc2)):
            parts[key] = _linear(m, sources)
        if any(v is None for v in parts.values()):
            return None
        eps.update(n.eps for n in (block.self_attn_layer_norm, block.encoder_attn_layer_norm, block.final_layer_norm))
        layers.append(parts)
    norm = _norm(decoder.layer_norm, sources)
    if norm is None or len(eps | {decoder.layer_norm.eps}) != 1:
        return None
    sa = decoder.layers[0].self_attn
    head = decoder.embed_tokens.weight._data  # (n_vocab, d): the tied output projection (its sources: the caller's)
    return {"dim": sa.n_heads * sa.hd, "heads": sa.n_heads, "head_dim": sa.hd, "hidden": decoder.layers[0].fc1.out_features,
            "act": "gelu", "eps": float(eps.pop()), "scale": float(np.float32(sa.scale if sa.scale is not None else sa.hd ** -0.5)),
            "norm": norm, "layers": layers, "head": head if isinstance(head, np.ndarray) else None}


class FusedXattnDecoder:
    """A TextDecoder's plan (built once per device and set of weights) and the step that runs a token through it."""

    def __init__(self, decoder):
        self.decoder, self._plan, self._unchanged, self._like = decoder, None, None, None

    # a copied or unpickled decoder starts without a plan: a plan holds addresses of arrays a copy does not own
    def __getstate__(self):
        return {"decoder": self.decoder}

    def __setstate__(self, state):
        self.__init__(state["decoder"])

    def plan(self):
        """The device's plan for the decoder's current weights, or None (no kernel here, or switched off)."""
        d = self.decoder
        build = kernels.bound("xattn_decoder_plan", d.embed_tokens.weight.device.backend)
        if build is None:
            return None
        if self._unchanged is not None and self._unchanged():
            return self._plan
        sources = []
        tables = (d.embed_tokens.weight, d.embed_positions.weight)
        spec = None if any(t.dtype is not ember.float32 for t in tables) else decoder_spec(d, sources)
        sources += [(m, "weight", m.weight, m.weight._data) for m in (d.embed_tokens, d.embed_positions)]
        self._plan = None if spec is None else build(spec)
        self._unchanged = unchanged(sources) if self._plan is not None else None
        return self._plan

    def logits(self, hidden):
        """hidden (1, 1, d) float32 -> logits (1, 1, n_vocab) where the device's plan runs the head (the page's
        kernel pool), else None (the decoder's matmul)."""
        if hidden.shape[:2] != (1, 1) or hidden.dtype is not ember.float32 or ember.is_grad_enabled() or \
                not isinstance(hidden._data, np.ndarray):
            return None
        plan = self.plan()
        y = None if plan is None else plan.logits(hidden._data.reshape(-1))
        return None if y is None else ember.tensor(y.reshape(1, 1, -1))

    def step(self, plan, token: int, cross, cache):
        """One token at position cache.pos -> its hidden state (1, 1, d) after the final norm; the cache advances."""
        d = self.decoder
        pos = cache.pos
        x = np.array(d.embed_tokens.weight._data[token], np.float32) + d.embed_positions.weight._data[pos]  # (d,)
        if self._like is None:
            self._like = ember.zeros(1, d.n_head, 1, d.head_dim)
        caches = []
        for i in range(len(d.layers)):
            kbuf, vbuf, slot, length = cache.slot(i, self._like)
            caches.append((kbuf._data, vbuf._data, slot, length))
        plan.step(x, caches, [(k._data, v._data) for k, v in cross], cache.writes)
        cache.pos += 1
        return ember.tensor(x.reshape(1, 1, -1))
