"""The numpy backend: the reference implementation of every primitive (see ember/primitives.py).

Pure numpy, so it runs unchanged under Pyodide. Arrays are numpy arrays in storage dtype:
bfloat16 is uint16 bits, upcast to float32 for compute and rounded back (RNE).
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from .. import dtypes as D
from ..primitives import Backend

_BF16 = np.dtype(np.uint16)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
# Pyodide's numpy has no BLAS; there float32 einsum's kernels beat np.matmul's fallback ~1.5-6x, same bits
_NO_BLAS = sys.platform == "emscripten"
_EINSUM_ITER_MAX = (1 << 31) - 1  # numpy's einsum iterator (batch x M x K x N) counts in intp: 32-bit in wasm
_ATTN_BLOCK = 1 << 19  # (L, S) scores above this many elements are computed a block of query rows at a time
_GELU_CHUNK = 1 << 15  # elements per chunk of the fused GELU
_EINSUM_MAX = 1 << 22  # above this, multi-threaded BLAS streams a weight faster (32000x288 lm_head: 1.2 vs 1.5 ms)


def einsum_matmul(a, b):
    """a @ b by float32 einsum, for Pyodide (no BLAS). Its iterator spans batch x M x K x N, which must fit
    wasm's 32-bit intp ("iterator is too large" for a 256-token prompt times a 32000-word head), so large
    products go a block of rows at a time; numpy's own matmul loop (slower, unbounded) when a row is too big."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    per_row = math.prod(batch) * a.shape[-1] * b.shape[-1]
    if per_row * a.shape[-2] <= _EINSUM_ITER_MAX:
        return np.einsum("...ij,...jk->...ik", a, b)
    if per_row > _EINSUM_ITER_MAX:
        return np.matmul(a, b)
    rows = _EINSUM_ITER_MAX // per_row
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), np.result_type(a, b))
    for i in range(0, a.shape[-2], rows):
        out[..., i:i + rows, :] = np.einsum("...ij,...jk->...ik", a[..., i:i + rows, :], b)
    return out


def mm(a, b, out=None):
    """np.matmul; under Pyodide float32 einsum instead (1.6x faster there on attention, see einsum_matmul)."""
    if _NO_BLAS and a.dtype == np.float32 and b.dtype == np.float32:
        return einsum_matmul(a, b) if out is None else np.einsum("...ij,...jk->...ik", a, b, out=out)
    return np.matmul(a, b, out=out)


def _blocked_attention(q, k, v):
    """softmax(q k^T) v for long sequences (q already scaled), a block of query rows at a time: each
    (rows, S) block of scores stays in cache through max/exp (Whisper's encoder: 2x faster than
    materialising the (L, S) scores of every head). v gets a column of ones, so the same matmul that
    weights the values also sums each row's exponentials: one pass fewer over the scores."""
    lead, (L, E), S, Ev = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    q3 = q.reshape(-1, L, E)                                                # (heads, L, E)
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2)).reshape(-1, E, S)     # (heads, E, S)
    dt = np.result_type(q, v)
    v1 = np.ones(v.shape[:-1] + (Ev + 1,), dt)
    v1[..., :Ev] = v
    v1 = v1.reshape(-1, S, Ev + 1)                                          # (heads, S, Ev | 1)
    out = np.empty((q3.shape[0], L, Ev), dt)                                # (heads, L, Ev)
    rows = max(16, min(L, _ATTN_BLOCK // S))
    buf, mx, acc = np.empty((rows, S), dt), np.empty((rows, 1), dt), np.empty((rows, Ev + 1), dt)
    for h in range(q3.shape[0]):
        for i in range(0, L, rows):
            n = min(rows, L - i)
            s, m, a = buf[:n], mx[:n], acc[:n]
            mm(q3[h, i:i + n], kt[h], out=s)                                 # (n, S)
            np.max(s, axis=-1, keepdims=True, out=m)
            s -= m
            np.exp(s, out=s)
            mm(s, v1[h], out=a)                                              # (n, Ev | row sum)
            np.divide(a[:, :Ev], a[:, Ev:], out=out[h, i:i + n])
    return out.reshape(lead + out.shape[1:])


# Abramowitz & Stegun 7.1.26: erfc(z) ~ t P(t) exp(-z^2), t = 1 / (1 + p z), |abs err| < 1.5e-7
_AS_P = 0.3275911 / math.sqrt(2)  # z = |x| / sqrt(2) folded in
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _gelu_erf(x, out):
    """out = x Phi(x) = relu(x) - |x| Phi(-|x|): no cancellation in the negative tail, and five terms
    instead of erf's ten (40% faster than x/2 (1 + erf)); |abs err| < 3.5e-7 vs float64, below
    torch's own float32 GELU (1.2e-6)."""
    t = np.dtype(x.dtype).type
    ax = np.abs(x)
    u = ax * t(_AS_P)
    u += 1
    np.reciprocal(u, out=u)                        # t
    p = u * t(_AS_A[4] * 0.5)
    for a in _AS_A[3::-1]:                         # Phi(-|x|) = erfc(|x| / sqrt 2) / 2 = t P(t) exp(-x^2 / 2) / 2
        p += t(a * 0.5)
        p *= u
    e = np.multiply(ax, ax)
    e *= t(-0.5)
    np.exp(e, out=e)
    p *= e
    p *= ax
    np.maximum(x, 0, out=out)
    out -= p


def _gelu_tanh(x, out):
    t = np.dtype(x.dtype).type
    e = np.tanh((x + t(0.044715) * x * x * x) * t(math.sqrt(2 / math.pi)))
    e += 1
    e *= x
    np.multiply(e, t(0.5), out=out)


def _erf(x):
    """numpy has no erf. float32/float16: Numerical Recipes' erfc Chebyshev fit, one formula for
    all x, |abs err| < 1.2e-7 (torch's float32 erf is ~1 ulp); float64: Cody's rational fits."""
    if x.dtype == np.float64:
        return _erf_cody(x)
    z = np.abs(x, dtype=np.float32)
    t = 1.0 / (1.0 + 0.5 * z)
    p = np.float32(0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
              1.00002368, -1.26551223):
        p = p * t
        p += np.float32(c)
    np.multiply(z, z, out=z)
    np.subtract(p, z, out=p)
    np.exp(p, out=p)
    p *= t                                         # erfc(|x|)
    np.subtract(1.0, p, out=p)
    np.copysign(p, x, out=p)
    return p.astype(x.dtype, copy=False)


def _erf_cody(x):
    # W. J. Cody's rational Chebyshev approximation (as in many libms): |err| < 1e-15 in float64.
    xd = x.astype(np.float64)
    ax = np.abs(xd)
    out = np.empty_like(xd)
    small = ax < 0.5
    if small.any():
        t = xd[small] ** 2
        p = ((((1.85777706184603153e-1 * t + 3.16112374387056560e0) * t + 1.13864154151050156e2) * t
              + 3.77485237685302021e2) * t + 3.20937758913846947e3)
        q = ((((t + 2.36012909523441209e1) * t + 2.44024637934444173e2) * t + 1.28261652607737228e3) * t
             + 2.84423683343917062e3)
        out[small] = xd[small] * p / q
    mid = (~small) & (ax < 4.0)
    if mid.any():
        y = ax[mid]
        p = (((((((2.15311535474403846e-8 * y + 5.64188496988670089e-1) * y + 8.88314979438837594e0) * y
                 + 6.61191906371416295e1) * y + 2.98635138197400131e2) * y + 8.81952221241769090e2) * y
              + 1.71204761263407058e3) * y + 2.05107837782607147e3) * y + 1.23033935479799725e3
        q = (((((((y + 1.57449261107098347e1) * y + 1.17693950891312499e2) * y + 5.37181101862009858e2) * y
                 + 1.62138957456669019e3) * y + 3.29079923573345963e3) * y + 4.36261909014324716e3) * y
              + 3.43936767414372164e3) * y + 1.23033935480374942e3
        r = np.exp(-y * y) * p / q
        out[mid] = np.sign(xd[mid]) * (1.0 - r)
    big = ~(small | mid)
    if big.any():
        y = ax[big]
        z = 1.0 / (y * y)
        p = ((((1.63153871373020978e-2 * z + 3.05326634961232344e-1) * z + 3.60344899949804439e-1) * z
              + 1.25781726111229246e-1) * z + 1.60837851487422766e-2) * z + 6.58749161529837803e-4
        q = ((((z + 2.56852019228982242e0) * z + 1.87295284992346725e0) * z + 5.27905102951428412e-1) * z
             + 6.05183413124413191e-2) * z + 2.33520497626869185e-3
        r = np.exp(-y * y) / y * (1 / math.sqrt(math.pi) - z * p / q)
        out[big] = np.sign(xd[big]) * (1.0 - r)
    out[np.isnan(xd)] = np.nan
    return out.astype(x.dtype)


def _sigmoid(x):
    # 1 / (1 + e^-x) = 0.5 * tanh(x / 2) + 0.5: never overflows and, unlike a sign split with boolean
    # masks, runs in four in-place passes (27x faster on YOLO-sized activations); |err| < 6e-8
    out = np.multiply(x, 0.5)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def _round(x):  # torch rounds half to even, as numpy does
    return np.round(x)


UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "erf": _erf,
    "abs": np.abs, "sign": lambda x: np.nan_to_num(np.sign(x)) if x.dtype.kind == "f" else np.sign(x), "floor": np.floor, "ceil": np.ceil, "round": _round,
    "sigmoid": _sigmoid, "recip": lambda x: np.reciprocal(x) if x.dtype.kind == "f" else 1 / x,
    "not": np.logical_not,
}


def _floordiv(a, b):
    return np.floor_divide(a, b)


def _fmod(a, b):
    return np.fmod(a, b)


def _int_pow(a, b):
    return np.power(a, b)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "fmod": _fmod, "floordiv": _floordiv,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
}
_CMP = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}
# ufunc.reduce directly: np.sum & co. add ~2 us of Python wrapping per call
REDUCE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "prod": np.multiply.reduce}


def _up(x):
    """bf16 bits -> float32 (compute type); other arrays unchanged."""
    return D.bf16_bits_to_f32(x) if x.dtype is _BF16 else x


def _down(y):
    return D.f32_to_bf16_bits(y)  # always an ndarray (reductions may hand back numpy scalars)


def _keep_freed_memory():
    """glibc hands every freed block past its mmap threshold (128 KB, rising to at most 32 MB) back to the
    OS, so the next activation of that size lands on fresh pages: a page fault per 4 KB at ~2 us here, as
    costly as the op that fills them (Whisper's encoder bias adds ran 4x slower). Keep blocks up to 32 MB in
    the heap for reuse and trim it only past 128 MB free, as a caching allocator would (Whisper tiny.en
    end to end 7% faster). Linux/glibc only; EMBER_MALLOC_TUNING=0 leaves malloc alone."""
    if sys.platform != "linux" or os.environ.get("EMBER_MALLOC_TUNING", "1") == "0":
        return
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass  # another libc (musl): nothing to tune


class NumpyBackend(Backend):
    name = "cpu"

    def __init__(self, index=0):
        self.index = index
        _keep_freed_memory()

    # -- transfer / creation ------------------------------------------------------------------
    def from_numpy(self, a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype.np:
            a = a.astype(dtype.np)
        return a

    def to_numpy(self, x):
        return np.array(x, copy=True)

    def full(self, shape, value, dtype):
        if dtype is D.bfloat16:
            return np.full(shape, D.f32_to_bf16_bits(np.array([value], np.float32))[0], np.uint16)
        return np.full(shape, value, dtype.np)

    def arange(self, start, stop, step, dtype):
        if dtype is D.bfloat16:
            return _down(np.arange(start, stop, step, dtype=np.float32))
        return np.arange(start, stop, step, dtype=dtype.np)

    # -- meta -----------------------------------------------------------------------------------
    def shape(self, x):
        return x.shape

    def dtype_of(self, x):
        return D.FROM_NP[x.dtype]

    # -- elementwise ----------------------------------------------------------------------------
    # No np.errstate here: entering it costs ~2 us, more than the op on small tensors. IEEE
    # results (inf, nan) are what torch gives; numpy may print a RuntimeWarning once per site.
    def unary(self, op, x):
        if not x.ndim:  # helpers below use out= buffers, which 0-d ufunc results (numpy scalars) refuse
            return self.unary(op, x.reshape(1)).reshape(())
        if x.dtype is _BF16:
            return _down(UNARY[op](_up(x)))
        y = UNARY[op](x)
        if y.__class__ is not np.ndarray:  # ufuncs on 0-d arrays return numpy scalars
            y = np.asarray(y)
        return y if y.dtype is x.dtype or op == "not" else y.astype(x.dtype)

    def binary(self, op, a, b):
        if a.dtype is _BF16:
            y = BINARY[op](_up(a), _up(b) if b.__class__ is np.ndarray else b)
            return np.asarray(y) if op in _CMP else _down(y)
        if op == "pow" and a.dtype.kind in "iu" and b.__class__ is not np.ndarray and b < 0:
            raise ValueError("ember: integer tensor to a negative integer power")
        y = BINARY[op](a, b)
        if y.__class__ is not np.ndarray:
            y = np.asarray(y)
        if y.dtype is a.dtype or op in _CMP:
            return y
        return y.astype(a.dtype)

    def where(self, cond, a, b):
        if a.dtype is _BF16 or (isinstance(b, np.ndarray) and b.dtype == _BF16):
            return np.where(cond, a, b).astype(np.uint16)
        y = np.where(cond, a, b)
        return y if y.dtype == a.dtype else y.astype(a.dtype)

    def cast(self, x, dtype):
        if x.dtype == dtype.np:
            return x
        if dtype is D.bfloat16:
            return _down(x.astype(np.float32))
        src = _up(x)
        if dtype is D.bool_:
            return src != 0
        if dtype.is_float or src.dtype.kind not in "f":
            with np.errstate(all="ignore"):
                return src.astype(dtype.np)
        # float -> int truncates toward zero (as torch); NaN/inf give an unspecified value as torch
        with np.errstate(all="ignore"):
            return np.trunc(src).astype(dtype.np)

    # -- reductions -----------------------------------------------------------------------------
    def reduce(self, op, x, axes, keepdim):
        f = REDUCE[op]
        if x.dtype is _F32:
            return np.asarray(f(x, axis=axes, keepdims=keepdim))
        if x.dtype is _BF16:
            return _down(f(_up(x), axis=axes, keepdims=keepdim))
        if x.dtype is _F16 and op in ("sum", "prod"):
            return np.asarray(f(x.astype(np.float32), axis=axes, keepdims=keepdim), dtype=np.float16)
        y = f(x, axis=axes, keepdims=keepdim)
        return np.asarray(y, dtype=x.dtype)

    def arg_reduce(self, op, x, axis, keepdim):
        x = _up(x)
        y = np.argmax(x, axis=axis) if op == "argmax" else np.argmin(x, axis=axis)
        if x.dtype.kind == "f":  # torch: NaN is the max (and the min); numpy agrees only for argmax
            nan = np.isnan(x)
            if nan.any():
                y = np.where(nan.any(axis=axis), np.argmax(nan, axis=axis), y)
        y = np.asarray(y, dtype=np.int64)
        return np.expand_dims(y, axis) if keepdim else y

    def cumsum(self, x, axis):
        if x.dtype is _BF16:
            return _down(np.cumsum(_up(x), axis=axis))
        if x.dtype is _F16:
            return np.cumsum(x.astype(np.float32), axis=axis).astype(np.float16)
        return np.cumsum(x, axis=axis, dtype=x.dtype)

    def argsort(self, x, axis, descending):
        x = _up(x)
        if descending:
            # stable descending: sort the reversed axis ascending on negated keys would break ties
            # wrongly; instead sort keys that order descending and keep index order for ties
            if x.dtype.kind == "f":
                key = -x
            elif x.dtype.kind == "b":
                key = ~x
            elif x.dtype.kind == "u":
                key = np.iinfo(x.dtype).max - x
            else:
                key = -x.astype(np.int64) if x.dtype != np.int64 else np.where(x == np.iinfo(np.int64).min, np.iinfo(np.int64).max, -x)
            return np.argsort(key, axis=axis, kind="stable").astype(np.int64)
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64)

    # -- movement -------------------------------------------------------------------------------
    def reshape(self, x, shape):
        return x.reshape(shape)

    def permute(self, x, order):
        return x.transpose(order)

    def expand(self, x, shape):
        return np.broadcast_to(x, shape)

    def slice(self, x, starts, stops, steps):
        return x[tuple(slice(a, None if (b < 0) else b, s) for a, b, s in zip(starts, stops, steps))]

    def pad(self, x, pads, value):
        if x.dtype is _BF16:
            value = int(D.f32_to_bf16_bits(np.array([value], np.float32))[0])
        return np.pad(x, pads, mode="constant", constant_values=value)

    def cat(self, xs, axis):
        return np.concatenate(xs, axis=axis)

    def contiguous(self, x):
        return x if x.flags.c_contiguous else x.copy()  # (np.ascontiguousarray would make 0-d 1-d)

    def weight_layout(self, w):
        # input-major storage makes w.T C-contiguous: OpenBLAS then streams a decoding step's
        # row-vector x weight product 1.2-2x faster than from the (out, in) rows (bench_llama)
        # (not under Pyodide: there einsum reads the (out, in) rows as fast, the 32000-word head 20% faster)
        if not _NO_BLAS and w.ndim == 2 and w.dtype.kind == "f" and w.flags.c_contiguous and w.size >= 16384:
            return np.ascontiguousarray(w.T).T
        return w

    # -- compute --------------------------------------------------------------------------------
    def matmul(self, a, b):
        if a.dtype is _BF16:
            return _down(mm(_up(a), _up(b)))
        if a.dtype is _F16:  # no f16 BLAS: accumulate in float32, round once (as torch CPU)
            return mm(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        if a.dtype is _F32:
            if _NO_BLAS:
                return einsum_matmul(a, b)
            if a.shape[-2] == 1 and b.ndim == 2 and 16384 <= b.size <= _EINSUM_MAX and not b.flags.c_contiguous:
                # row vector x an (out, in) weight's transposed view (one not re-stored by weight_layout,
                # e.g. while training): memory-bound, and numpy's SIMD einsum loop streams that layout
                # ~1.4-2.2x faster than OpenBLAS's M=1 gemm (bench_llama)
                return np.einsum("...ij,jk->...ik", a, b)
        return np.matmul(a, b)

    def conv(self, x, w, stride, padding, dilation, groups):
        from .numpy_conv import conv
        if x.dtype is _BF16:
            return _down(conv(_up(x), _up(w), stride, padding, dilation, groups))
        if x.dtype is _F16:
            return conv(x.astype(np.float32), w.astype(np.float32), stride, padding, dilation, groups).astype(np.float16)
        return conv(x, w, stride, padding, dilation, groups)

    # -- indexing -------------------------------------------------------------------------------
    # Indices are int64 tensors; numpy indexes with intp, which is 32-bit under Pyodide (wasm32)
    # and refuses a 'safe' int64 cast there, so convert explicitly (a no-op on 64-bit CPython).
    def gather(self, x, axis, idx):
        return np.take_along_axis(x, idx.astype(np.intp, copy=False), axis=axis)

    def index_select(self, x, axis, idx):
        # indexing, not np.take: take copies a non-C-contiguous x whole first (see weight_layout)
        return x[(slice(None),) * axis + (idx.astype(np.intp, copy=False),)]

    def scatter(self, x, axis, idx, src, reduce):
        idx = idx.astype(np.intp, copy=False)
        out = np.array(x, copy=True)
        if reduce is None:
            np.put_along_axis(out, idx, src, axis=axis)
            return out
        # scatter-add with repeated indices: build full index tuples and use np.add.at
        grids = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        if out.dtype == _BF16:
            acc = _up(out)
            np.add.at(acc, tuple(grids), _up(src))
            return _down(acc)
        np.add.at(out, tuple(grids), src)
        return out

    # -- fused (optional): fast paths for the heavy composite ops ----------------------------
    def softmax(self, x, axis):
        if x.dtype is _BF16:
            return _down(self.softmax(_up(x), axis))
        e = x - x.max(axis=axis, keepdims=True)
        np.exp(e, out=e)
        e /= e.sum(axis=axis, keepdims=True)
        return e

    def log_softmax(self, x, axis):
        if x.dtype is _BF16:
            return _down(self.log_softmax(_up(x), axis))
        s = x - x.max(axis=axis, keepdims=True)
        return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))

    def layer_norm(self, x, w, b, eps):
        if x.dtype in (_BF16, _F16):
            y = self.layer_norm(_up(x).astype(np.float32), None if w is None else _up(w).astype(np.float32),
                                None if b is None else _up(b).astype(np.float32), eps)
            return _down(y) if x.dtype is _BF16 else y.astype(np.float16)
        inv_n = 1.0 / x.shape[-1]
        xc = x - np.add.reduce(x, axis=-1, keepdims=True) * inv_n
        var = np.add.reduce(xc * xc, axis=-1, keepdims=True)
        var *= inv_n
        var += eps
        np.sqrt(var, out=var)
        xc /= var
        if w is not None:
            xc *= w
        if b is not None:
            xc += b
        return xc

    def attention(self, q, k, v, mask, scale, causal):
        if q.dtype in (_BF16, _F16):
            f = (lambda a: None if a is None else _up(a).astype(np.float32))
            y = self.attention(f(q), f(k), f(v), f(mask), scale, causal)
            return _down(y) if q.dtype is _BF16 else y.astype(np.float16)
        # the scale goes into q and the normalisation into the (L, Ev) output: two fewer passes over
        # the (L, S) scores, which dominate long sequences (Whisper's encoder: 1500 x 1500 per head)
        q = q * np.asarray(scale, q.dtype)
        if mask is None and not causal and q.shape[-2] * k.shape[-2] > _ATTN_BLOCK \
                and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
            return _blocked_attention(q, k, v)
        s = mm(q, np.swapaxes(k, -1, -2))                             # (..., L, S)
        if causal:  # top-left aligned, as torch
            L, S = s.shape[-2:]
            s[..., np.triu(np.ones((L, S), bool), 1)] = -np.inf
        if mask is not None:
            s = s + mask
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        out = mm(s, v)                                                 # (..., L, Ev)
        out /= s.sum(axis=-1, keepdims=True)
        return out

    def _add_bias(self, y, b):
        """y + b for a fresh product y: in place (a new array's page faults cost as much as the add),
        except bf16 bits / f16, which take the rounding add of `binary`."""
        if y.dtype not in (_F32, np.dtype(np.float64)):
            return self.binary("add", y, b)
        y += b
        return y

    def linear(self, x, w, b):
        return self._add_bias(self.matmul(x, w.T), b)                      # (..., out)

    def conv_bias(self, x, w, b, stride, padding, dilation, groups):
        y = self.conv(x, w, stride, padding, dilation, groups)             # (N, O, *out)
        return self._add_bias(y, b.reshape((-1,) + (1,) * (y.ndim - 2)))

    def silu(self, x):
        if x.dtype in (_BF16, _F16):
            y = self.silu(_up(x).astype(np.float32))
            return _down(y) if x.dtype is _BF16 else y.astype(np.float16)
        out = _sigmoid(x)  # one fresh array, then in place (YOLO: every conv is followed by a SiLU)
        out *= x
        return out

    def gelu(self, x, approximate):
        if x.dtype in (_BF16, _F16):
            y = self.gelu(_up(x).astype(np.float32), approximate)
            return _down(y) if x.dtype is _BF16 else y.astype(np.float16)
        # in cache-sized chunks: the ~20 passes stay in L2 (2x faster on Whisper's (1500, 1536) MLP).
        # (Splitting the chunks across threads gains little in a model: OpenBLAS's workers spin ~0.1 s
        # after every matmul and keep the other core.)
        xf = np.ascontiguousarray(x).reshape(-1)
        of = np.empty_like(xf)
        f = _gelu_tanh if approximate == "tanh" else _gelu_erf
        for a in range(0, xf.size, _GELU_CHUNK):
            f(xf[a:a + _GELU_CHUNK], of[a:a + _GELU_CHUNK])
        return of.reshape(x.shape)

    def rms_norm(self, x, w, eps):
        if x.dtype in (_BF16, _F16):
            y = self.rms_norm(_up(x).astype(np.float32), None if w is None else _up(w).astype(np.float32), eps)
            return _down(y) if x.dtype is _BF16 else y.astype(np.float16)
        ms = np.add.reduce(x * x, axis=-1, keepdims=True)   # (ufunc.reduce: np.mean adds ~3 us of wrapping)
        ms *= 1.0 / x.shape[-1]
        ms += eps
        np.sqrt(ms, out=ms)
        y = x / ms
        if w is not None:
            y *= w
        return y
