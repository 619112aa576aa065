"""Every primitive written once against the numpy API, for any array module `xp` that mirrors it.

The CUDA backend runs this code with `xp = cupy`; CPU tests run the very same code with
`xp = numpy` (ArrayModuleBackend(numpy)) through the whole op parity suite, so the logic that the
GPU path shares is checked on machines without a GPU. Semantics follow the numpy backend
(numpy_backend.py, the reference): storage dtypes (bfloat16 = uint16 bits, computed in float32 and
rounded back to nearest even), float16 reductions/matmuls accumulating in float32, torch's NaN rules.

Only calls that numpy and CuPy both provide with the same meaning appear here; the two that
differ (erf, the device -> host copy) are small hooks a subclass overrides.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..primitives import Backend

_BF16 = np.dtype(np.uint16)  # ember.bfloat16's storage (ember has no uint16 dtype)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_CMP = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}
_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide", "pow": "power",
           "maximum": "maximum", "minimum": "minimum", "fmod": "fmod", "floordiv": "floor_divide",
           "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal", "and": "logical_and", "or": "logical_or", "xor": "logical_xor"}
_REDUCE = {"sum": "sum", "max": "max", "min": "min", "prod": "prod"}


class ArrayModuleBackend(Backend):
    name = "xp"

    def __init__(self, xp, index=0):
        self.xp, self.index = xp, index
        u = {n: getattr(xp, n) for n in ("negative", "exp", "log", "sin", "cos", "sqrt", "tanh", "abs",
                                         "floor", "ceil", "round", "logical_not")}
        self._unary = {"neg": u["negative"], "exp": u["exp"], "log": u["log"], "sin": u["sin"], "cos": u["cos"],
                       "sqrt": u["sqrt"], "rsqrt": self._rsqrt, "tanh": u["tanh"], "erf": self._erf,
                       "abs": u["abs"], "sign": self._sign, "floor": u["floor"], "ceil": u["ceil"],
                       "round": u["round"], "sigmoid": self._sigmoid, "recip": self._recip, "not": u["logical_not"]}
        self._binary = {k: getattr(xp, v) for k, v in _BINARY.items()}
        self._reduce = {k: getattr(xp, v) for k, v in _REDUCE.items()}

    def __repr__(self):
        return f"{type(self).__name__}({self.xp.__name__}, index={self.index})"

    # -- hooks where numpy and CuPy differ ---------------------------------------------------------
    def _erf(self, x):
        from .numpy_backend import _erf  # the reference's float32 fit (numpy has no erf)
        return _erf(x.reshape(1)).reshape(()) if x.ndim == 0 else _erf(x)  # (it uses out= buffers: no 0-d)

    def _host(self, x):
        return np.array(x, copy=True)

    # -- bfloat16 bits <-> float32 ----------------------------------------------------------------
    def _up(self, x):
        """bf16 bits -> float32 (exact); other arrays unchanged."""
        xp = self.xp
        return (x.astype(xp.uint32) << 16).view(xp.float32) if x.dtype == _BF16 else x

    def _down(self, y):
        """float32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN (as ember.dtypes)."""
        xp = self.xp
        u = xp.ascontiguousarray(xp.asarray(y, dtype=xp.float32)).view(xp.uint32)
        rounded = ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(xp.uint16)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return xp.asarray(xp.where(nan, ((u >> 16) | 0x0040).astype(xp.uint16), rounded))

    def _bf16_scalar(self, value):
        return int(D.f32_to_bf16_bits(np.array([value], np.float32))[0])

    # -- transfer / creation ----------------------------------------------------------------------
    def from_numpy(self, a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype.np:
            a = a.astype(dtype.np)
        return self.xp.array(np.ascontiguousarray(a) if a.ndim else a, copy=True)

    def to_numpy(self, x):
        return self._host(x)

    def full(self, shape, value, dtype):
        if dtype is D.bfloat16:
            return self.xp.full(shape, self._bf16_scalar(value), self.xp.uint16)
        return self.xp.full(shape, value, dtype.np)

    def arange(self, start, stop, step, dtype):
        if dtype is D.bfloat16:
            return self._down(self.xp.arange(start, stop, step, dtype=self.xp.float32))
        return self.xp.arange(start, stop, step, dtype=dtype.np)

    # -- meta -------------------------------------------------------------------------------------
    def shape(self, x):
        return tuple(x.shape)

    def dtype_of(self, x):
        return D.FROM_NP[x.dtype]

    # -- elementwise ------------------------------------------------------------------------------
    def _rsqrt(self, x):
        return 1.0 / self.xp.sqrt(x)

    def _sign(self, x):
        s = self.xp.sign(x)
        return self.xp.nan_to_num(s) if x.dtype.kind == "f" else s  # as the reference: sign(NaN) = 0

    def _sigmoid(self, x):
        # exp of -|x| never overflows; pick the matching branch per element
        xp = self.xp
        e = xp.exp(-xp.abs(x))
        return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

    def _recip(self, x):
        return self.xp.reciprocal(x) if x.dtype.kind == "f" else 1 / x

    def unary(self, op, x):
        if x.dtype == _BF16:
            return self._down(self._unary[op](self._up(x)))
        y = self.xp.asarray(self._unary[op](x))  # numpy ufuncs hand back scalars for 0-d input
        return y if y.dtype == x.dtype or op == "not" else y.astype(x.dtype)

    def binary(self, op, a, b):
        xp = self.xp
        barr = isinstance(b, xp.ndarray)
        if a.dtype == _BF16:
            y = self._binary[op](self._up(a), self._up(b) if barr else b)
            return xp.asarray(y) if op in _CMP else self._down(y)
        if op == "pow" and a.dtype.kind in "iu" and not barr and b < 0:
            raise ValueError("ember: integer tensor to a negative integer power")
        y = xp.asarray(self._binary[op](a, b))
        return y if y.dtype == a.dtype or op in _CMP else y.astype(a.dtype)

    def where(self, cond, a, b):
        y = self.xp.where(cond, a, b)
        return y if y.dtype == a.dtype else y.astype(a.dtype)

    def cast(self, x, dtype):
        xp = self.xp
        if x.dtype == dtype.np:
            return x
        if dtype is D.bfloat16:
            return self._down(x.astype(xp.float32))
        src = self._up(x)
        if dtype is D.bool_:
            return src != 0
        if dtype.is_float or src.dtype.kind != "f":
            with np.errstate(all="ignore"):
                return src.astype(dtype.np)
        with np.errstate(all="ignore"):  # float -> int truncates toward zero, as torch
            return xp.trunc(src).astype(dtype.np)

    # -- reductions -------------------------------------------------------------------------------
    def reduce(self, op, x, axes, keepdim):
        xp, f = self.xp, self._reduce[op]
        if x.dtype == _BF16:
            return self._down(f(self._up(x), axis=axes, keepdims=keepdim))
        if x.dtype == _F16 and op in ("sum", "prod"):
            return xp.asarray(f(x, axis=axes, keepdims=keepdim, dtype=xp.float32)).astype(xp.float16)
        return xp.asarray(f(x, axis=axes, keepdims=keepdim)).astype(x.dtype, copy=False)

    def arg_reduce(self, op, x, axis, keepdim):
        xp = self.xp
        x = self._up(x)
        y = xp.argmax(x, axis=axis) if op == "argmax" else xp.argmin(x, axis=axis)
        if x.dtype.kind == "f":  # torch: NaN is the max and the min; branch-free (no device sync)
            nan = xp.isnan(x)
            y = xp.where(nan.any(axis=axis), xp.argmax(nan.astype(xp.int8), axis=axis), y)
        y = xp.asarray(y).astype(xp.int64, copy=False)
        return xp.expand_dims(y, axis) if keepdim else y

    def cumsum(self, x, axis):
        xp = self.xp
        if x.dtype == _BF16:
            return self._down(xp.cumsum(self._up(x), axis=axis))
        if x.dtype == _F16:
            return xp.cumsum(x, axis=axis, dtype=xp.float32).astype(xp.float16)
        return xp.cumsum(x, axis=axis, dtype=x.dtype)

    def argsort(self, x, axis, descending):
        xp = self.xp
        x = self._up(x)
        if descending:  # keys that sort descending while a stable ascending sort keeps ties in order
            if x.dtype.kind == "f":
                x = -x
            elif x.dtype.kind == "b":
                x = ~x
            elif x.dtype.kind == "u":
                x = np.iinfo(x.dtype).max - x
            elif x.dtype == np.int64:
                lo = np.iinfo(np.int64)
                x = xp.where(x == lo.min, lo.max, -x)
            else:
                x = -x.astype(xp.int64)
        return xp.argsort(x, axis=axis, kind="stable").astype(xp.int64)

    # -- movement ---------------------------------------------------------------------------------
    def reshape(self, x, shape):
        return x.reshape(shape)

    def permute(self, x, order):
        return x.transpose(order)

    def expand(self, x, shape):
        return self.xp.broadcast_to(x, shape)

    def slice(self, x, starts, stops, steps):
        return x[tuple(slice(a, None if b < 0 else b, s) for a, b, s in zip(starts, stops, steps))]

    def pad(self, x, pads, value):
        if x.dtype == _BF16:
            value = self._bf16_scalar(value)
        return self.xp.pad(x, pads, mode="constant", constant_values=value)

    def cat(self, xs, axis):
        return self.xp.concatenate(xs, axis=axis)

    def contiguous(self, x):
        return x if x.flags.c_contiguous else x.copy()

    # -- compute ----------------------------------------------------------------------------------
    def matmul(self, a, b):
        xp = self.xp
        if a.dtype == _BF16:
            return self._down(xp.matmul(self._up(a), self._up(b)))
        if a.dtype == _F16:  # accumulate in float32, round once (as torch CPU and the reference)
            return xp.matmul(a.astype(xp.float32), b.astype(xp.float32)).astype(xp.float16)
        return xp.matmul(a, b)

    def conv(self, x, w, stride, padding, dilation, groups):
        if x.dtype == _BF16:
            return self._down(self._conv(self._up(x), self._up(w), stride, padding, dilation, groups))
        if x.dtype == _F16:
            f32 = self.xp.float32
            return self._conv(x.astype(f32), w.astype(f32), stride, padding, dilation, groups).astype(x.dtype)
        return self._conv(x, w, stride, padding, dilation, groups)

    def _conv(self, x, w, stride, padding, dilation, groups):
        """im2col from one strided slice per kernel offset (no sliding_window_view, which CuPy
        lacks in older releases), then one batched matmul: x (N, C, *S), w (O, C/g, *K)."""
        xp = self.xp
        nd = x.ndim - 2
        n, c = x.shape[:2]
        o, k = w.shape[0], tuple(w.shape[2:])
        if any(padding):
            x = xp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
        s = x.shape[2:]
        out = tuple((s[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd))
        if any(v <= 0 for v in out):
            raise ValueError(f"ember: conv input spatial size {tuple(s)} (padded) is smaller than the "
                             f"dilated kernel {tuple(dilation[i] * (k[i] - 1) + 1 for i in range(nd))}")
        taps = []
        for off in np.ndindex(*k):  # one (N, C, *out) view per kernel position
            sl = tuple(slice(off[i] * dilation[i], off[i] * dilation[i] + stride[i] * (out[i] - 1) + 1, stride[i])
                       for i in range(nd))
            taps.append(x[(slice(None), slice(None)) + sl])
        g, cg, og = groups, c // groups, o // groups
        cols = xp.stack(taps, axis=2)                                     # (N, C, K, *out)
        cols = cols.reshape(n, g, cg * math.prod(k), math.prod(out))      # (N, g, Cg*K, P)
        y = xp.matmul(w.reshape(g, og, -1)[None], cols)                   # (N, g, Og, P)
        return y.reshape((n, o) + out)

    # -- indexing ---------------------------------------------------------------------------------
    def gather(self, x, axis, idx):
        return self.xp.take_along_axis(x, idx, axis=axis)

    def index_select(self, x, axis, idx):
        return self.xp.take(x, idx, axis=axis)

    def _grids(self, idx, axis):
        """Full index tuple for `idx` along `axis` (open grids on the other axes)."""
        xp = self.xp
        nd = idx.ndim
        return tuple(idx if i == axis else xp.arange(idx.shape[i]).reshape([-1 if j == i else 1 for j in range(nd)])
                     for i in range(nd))

    def scatter(self, x, axis, idx, src, reduce):
        xp = self.xp
        index = self._grids(idx, axis)
        src = xp.broadcast_to(src, idx.shape)
        if reduce is None:
            out = x.copy()
            out[index] = src
            return out
        if x.dtype in (_BF16, _F16):  # accumulate in float32, round once
            acc = self._up(x).astype(xp.float32)
            self.xp.add.at(acc, index, self._up(src).astype(xp.float32))
            return self._down(acc) if x.dtype == _BF16 else acc.astype(xp.float16)
        out = x.copy()
        self.xp.add.at(out, index, src)  # repeated indices accumulate
        return out

    # -- fused (optional) -------------------------------------------------------------------------
    def softmax(self, x, axis):
        if x.dtype == _BF16:
            return self._down(self.softmax(self._up(x), axis))
        e = self.xp.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def log_softmax(self, x, axis):
        if x.dtype == _BF16:
            return self._down(self.log_softmax(self._up(x), axis))
        s = x - x.max(axis=axis, keepdims=True)
        return s - self.xp.log(self.xp.exp(s).sum(axis=axis, keepdims=True))

    def _f32(self, x):
        """Half types compute in float32 (as the reference); float32/float64 stay as they are."""
        if x is None or x.dtype not in (_BF16, _F16):
            return x
        return self._up(x).astype(self.xp.float32, copy=False)

    def layer_norm(self, x, w, b, eps):
        xf = self._f32(x)
        xc = xf - xf.mean(axis=-1, keepdims=True)
        y = xc * (1.0 / self.xp.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps))
        if w is not None:
            y = y * self._f32(w)
        if b is not None:
            y = y + self._f32(b)
        return self._back(y, x.dtype)

    def rms_norm(self, x, w, eps):
        xf = self._f32(x)
        y = xf * (1.0 / self.xp.sqrt((xf * xf).mean(axis=-1, keepdims=True) + eps))
        if w is not None:
            y = y * self._f32(w)
        return self._back(y, x.dtype)

    def _back(self, y, dtype):
        """float32 result -> the input's storage dtype."""
        if dtype == _BF16:
            return self._down(y)
        return y if y.dtype == dtype else y.astype(dtype)


def on_numpy(index=0) -> ArrayModuleBackend:
    """This code over numpy: the CPU stand-in that tests run the op parity suite through."""
    return ArrayModuleBackend(np, index)
