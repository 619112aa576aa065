"""The array-module backend's fused kernels (kernel-registry entries, ember.kernels), written once against the numpy
API for numpy (the CPU backend) and CuPy (the CUDA backend's fallbacks): softmax, log_softmax, layer_norm,
rms_norm, attention and copy_into, each a function of (backend, arrays...) in fewer passes than its composed form.
"""
from __future__ import annotations

import numpy as np

from .array_module_backend import _BF16, _HALF


def copy_into(be, dst, src, starts):
    """src written into dst at `starts`, in place; a read-only dst (a memory map, a broadcast view) is
    copied first."""
    if not getattr(dst.flags, "writeable", True):
        dst = dst.copy()
    dst[tuple(slice(a, a + n) for a, n in zip(starts, src.shape))] = src
    return dst


def softmax(be, x, axis):
    if not x.ndim:  # (in place below: a 0-d difference is a numpy scalar)
        return softmax(be, x.reshape(1), 0).reshape(())
    if x.dtype is _BF16:
        return be._down(softmax(be, be._up(x), axis))
    e = x - x.max(axis=axis, keepdims=True)
    be.xp.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def log_softmax(be, x, axis):
    if x.dtype is _BF16:
        return be._down(log_softmax(be, be._up(x), axis))
    s = x - x.max(axis=axis, keepdims=True)
    return s - be.xp.log(be.xp.exp(s).sum(axis=axis, keepdims=True))


def layer_norm(be, x, w, b, eps):
    if x.dtype in _HALF:
        return be._back(layer_norm(be, be._f32(x), be._f32(w), be._f32(b), eps), x.dtype)
    add = be._reduce["sum"]
    inv_n = 1.0 / x.shape[-1]
    xc = x - add(x, axis=-1, keepdims=True) * inv_n
    var = add(xc * xc, axis=-1, keepdims=True)
    var *= inv_n
    var += eps
    be.xp.sqrt(var, out=var)
    xc /= var
    if w is not None:
        xc *= w
    if b is not None:
        xc += b
    return xc


def rms_norm(be, x, w, eps):
    if x.dtype in _HALF:
        return be._back(rms_norm(be, be._f32(x), be._f32(w), eps), x.dtype)
    ms = be._reduce["sum"](x * x, axis=-1, keepdims=True)
    ms *= 1.0 / x.shape[-1]
    ms += eps
    be.xp.sqrt(ms, out=ms)
    y = x / ms
    if w is not None:
        y *= w
    return y


def attention(be, q, k, v, mask, scale, causal):
    """softmax(q k^T * scale + mask) v with numpy broadcasting of the batch dims; causal keeps key
    s <= query l (torch's top-left alignment); half types compute in float32."""
    if q.dtype in _HALF:
        y = attention(be, be._f32(q), be._f32(k), be._f32(v), be._f32(mask), scale, causal)
        return be._back(y, q.dtype)
    xp = be.xp
    # the scale goes into q and the normalisation into the (L, Ev) output: two fewer passes over
    # the (L, S) scores, which dominate long sequences (Whisper's encoder: 1500 x 1500 per head)
    q = q * xp.asarray(scale, q.dtype)
    s = be._mm(q, xp.swapaxes(k, -1, -2))                        # (..., L, S)
    if causal:
        L, S = s.shape[-2:]
        s[(Ellipsis,) + xp.triu_indices(L, 1, S)] = -np.inf       # keys after the query: torch's top-left alignment
    if mask is not None:
        s = s + mask
    s -= s.max(axis=-1, keepdims=True)
    xp.exp(s, out=s)
    out = be._mm(s, v)                                           # (..., L, Ev)
    out /= s.sum(axis=-1, keepdims=True)
    return out
