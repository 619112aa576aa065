"""Reductions composed from the reduce/arg_reduce/cumsum/argsort primitives (torch semantics)."""
from __future__ import annotations

import builtins
import math
from collections import namedtuple

import numpy as np

from . import autograd as A
from . import dtypes as D
from .ops_movement import norm_dim

_ND = np.ndarray
_HOST_FLOAT = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _axes(x, dim):
    if dim.__class__ is int:
        return (norm_dim(dim, len(x.shape)),)
    if dim.__class__ is tuple and len(dim) == 1 and dim[0].__class__ is int and x.ndim:  # (one axis: ONNX's)
        return (norm_dim(dim[0], x.ndim),)
    if dim is None:
        return tuple(range(x.ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    out = tuple(sorted({norm_dim(d, x.ndim) for d in dims}))
    return out if x.ndim else ()


def _reduce(op, x, dim, keepdim):
    axes = _axes(x, dim)
    if not axes:
        return x
    if op == "max" or op == "min":
        shape = x.shape
        for a in axes:
            if shape[a] == 0:
                raise ValueError(f"ember: {op}() of an empty dimension {a} in shape {shape}")
    return A.prim_reduce(op, x, axes, keepdim)


def sum(x, dim=None, keepdim=False, dtype=None):
    d = x._data
    if dtype is None and dim.__class__ is int and d.__class__ is _ND and d.dtype in _HOST_FLOAT and \
            -d.ndim <= dim < d.ndim and not (A._GRAD[0] and x.requires_grad):  # host floats, one axis, no gradient
        return x._new(x.device._backend.reduce("sum", d, (dim % d.ndim,), keepdim))
    if dtype is not None:
        x = A.prim_cast(x, D.get(dtype))
    elif not x.dtype.is_float:
        x = A.prim_cast(x, D.int64)  # torch sums bool/ints in int64
    return _reduce("sum", x, dim, keepdim)


def prod(x, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = A.prim_cast(x, D.get(dtype))
    elif not x.dtype.is_float:
        x = A.prim_cast(x, D.int64)
    return _reduce("prod", x, dim, keepdim)


def mean(x, dim=None, keepdim=False, dtype=None):
    d = x._data
    if dtype is None and d.__class__ is _ND and d.dtype in _HOST_FLOAT and not (A._GRAD[0] and x.requires_grad):
        axes = _axes(x, dim)  # host floats, no gradient: the sum primitive and the scale, as below, on the arrays
        if axes:
            n = math.prod(d.shape[a] for a in axes)
            y = np.multiply(x.device._backend.reduce("sum", d, axes, keepdim), 1.0 / n if n else float("nan"))
            return x._new(y if y.__class__ is _ND else np.asarray(y))
    if dtype is not None:
        x = A.prim_cast(x, D.get(dtype))
    if not x.dtype.is_float:
        raise TypeError(f"ember: mean() needs a floating-point tensor, got {x.dtype}; use .float() first")
    axes = _axes(x, dim)
    n = math.prod(x.shape[a] for a in axes)
    s = _reduce("sum", x, dim, keepdim)
    return s * (1.0 / n) if n else s * float("nan")


def var(x, dim=None, unbiased=None, keepdim=False, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = _axes(x, dim)
    n = math.prod(x.shape[a] for a in axes)
    mu = mean(x, axes, keepdim=True)
    d = x - mu
    return sum(d * d, axes, keepdim) / builtins.max(n - correction, 0)


def std(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return var(x, dim, unbiased, keepdim, correction).sqrt()


def var_mean(x, dim=None, unbiased=None, keepdim=False, correction=None):
    return var(x, dim, unbiased, keepdim, correction), mean(x, dim, keepdim)


def amax(x, dim=None, keepdim=False):
    return _reduce("max", x, dim, keepdim)


def amin(x, dim=None, keepdim=False):
    return _reduce("min", x, dim, keepdim)


def _minmax(op, x, dim, keepdim, other):
    if other is not None:  # torch.max(a, b) is maximum
        from .ops_elementwise import maximum, minimum
        return maximum(x, other) if op == "max" else minimum(x, other)
    if dim is None:
        return _reduce(op, x, None, False)
    d = norm_dim(dim, x.ndim)
    idx = A.prim_arg_reduce("arg" + op, x, d, True)
    vals = A.prim_gather(x, d, idx)  # gradient flows to the selected index, as torch
    if not keepdim:
        vals, idx = A.prim_reshape(vals, _drop(vals.shape, d)), A.prim_reshape(idx, _drop(idx.shape, d))
    return ValuesIndices(vals, idx)


def _drop(shape, d):
    return shape[:d] + shape[d + 1:]


def max(x, dim=None, keepdim=False, other=None):
    if dim is not None and not isinstance(dim, int) and hasattr(dim, "shape"):
        return _minmax("max", x, None, keepdim, dim)
    return _minmax("max", x, dim, keepdim, other)


def min(x, dim=None, keepdim=False, other=None):
    if dim is not None and not isinstance(dim, int) and hasattr(dim, "shape"):
        return _minmax("min", x, None, keepdim, dim)
    return _minmax("min", x, dim, keepdim, other)


def argmax(x, dim=None, keepdim=False):
    if dim is None:
        return A.prim_arg_reduce("argmax", A.prim_reshape(x, (x.numel(),)), 0, False)
    return A.prim_arg_reduce("argmax", x, norm_dim(dim, x.ndim), keepdim)


def argmin(x, dim=None, keepdim=False):
    if dim is None:
        return A.prim_arg_reduce("argmin", A.prim_reshape(x, (x.numel(),)), 0, False)
    return A.prim_arg_reduce("argmin", x, norm_dim(dim, x.ndim), keepdim)


def all(x, dim=None, keepdim=False):
    return _reduce("min", A.prim_cast(x, D.bool_), dim, keepdim) if x.numel() else x.new_ones((), D.bool_)


def any(x, dim=None, keepdim=False):
    return _reduce("max", A.prim_cast(x, D.bool_), dim, keepdim) if x.numel() else x.new_zeros((), D.bool_)


def count_nonzero(x, dim=None):
    return sum(x != 0, dim)


def cumsum(x, dim, dtype=None):
    if dtype is not None:
        x = A.prim_cast(x, D.get(dtype))
    elif not x.dtype.is_float:
        x = A.prim_cast(x, D.int64)
    return A.prim_cumsum(x, norm_dim(dim, x.ndim))


def logsumexp(x, dim, keepdim=False):
    m = amax(x, dim, keepdim=True).detach()
    m = m.where(m.abs() != float("inf"), 0.0)  # all -inf rows give -inf, not NaN
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(_axes(x, dim))


def softmax(x, dim=-1, dtype=None):
    if dtype is not None:
        x = x.to(dtype)
    d = norm_dim(dim, x.ndim)
    k = A.fused_kernel("softmax", x)
    return A.prim_fused(k, x, d) if k is not None else softmax_composed(x, d)


def softmax_composed(x, axis):
    e = (x - x.amax(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)


def log_softmax(x, dim=-1, dtype=None):
    if dtype is not None:
        x = x.to(dtype)
    d = norm_dim(dim, x.ndim)
    k = A.fused_kernel("log_softmax", x)
    return A.prim_fused(k, x, d) if k is not None else log_softmax_composed(x, d)


def log_softmax_composed(x, axis):
    s = x - x.amax(axis, keepdim=True).detach()
    return s - s.exp().sum(axis, keepdim=True).log()


def norm(x, p=2, dim=None, keepdim=False):
    if p == 2 or p == "fro":
        return sum(x * x, dim, keepdim).sqrt()
    if p == 1:
        return sum(x.abs(), dim, keepdim)
    if p == float("inf"):
        return amax(x.abs(), dim, keepdim)
    return sum(x.abs() ** p, dim, keepdim) ** (1.0 / p)


def argsort(x, dim=-1, descending=False, stable=True):
    return A.prim_argsort(x, norm_dim(dim, x.ndim), descending)


def sort(x, dim=-1, descending=False, stable=True):
    d = norm_dim(dim, x.ndim)
    idx = A.prim_argsort(x, d, descending)
    return ValuesIndices(A.prim_gather(x, d, idx), idx)


def topk(x, k, dim=-1, largest=True, sorted=True):
    d = norm_dim(dim, x.ndim)
    if not 0 <= k <= x.shape[d]:
        raise ValueError(f"ember: topk k={k} out of range for dim {d} of size {x.shape[d]}")
    idx = A.prim_argsort(x, d, largest)
    idx = idx.narrow(d, 0, k)
    return ValuesIndices(A.prim_gather(x, d, idx), idx)
