"""The reference backend: every primitive of ember/primitives.py written once against the numpy API, for an
array module `xp` that mirrors it (numpy or CuPy).

The CPU backend (numpy_backend.py) is this code with `xp = numpy` plus its CPU fast paths; the CUDA backend
(cuda_backend.py) is this code with `xp = cupy` plus its fused kernels. So the semantics of each primitive
are defined here, in code, for both:
- arrays are in storage dtype: bfloat16 is uint16 bits, upcast to float32 for compute and rounded back
  (round to nearest even, NaN stays a quiet NaN);
- float16 reductions, matmuls, convolutions and norms accumulate in float32 and round once (as torch CPU);
- torch's rules where numpy's differ: NaN is both the max and the min of argmax/argmin, float -> int casts
  truncate toward zero, sign(NaN) = 0.

Only calls that numpy and CuPy provide with the same meaning appear here; where they differ (erf, the host
copy, what a branch on a value costs) a small hook or flag says so. Dtypes are compared with `is`: arrays
of both modules carry numpy's builtin dtype singletons (CudaBackend checks this when it starts).
No np.errstate in the per-op paths: entering it costs ~2 us, more than an op on small tensors; IEEE
results (inf, nan) are what torch gives, numpy may print a RuntimeWarning once per site.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..primitives import Backend

_BF16 = np.dtype(np.uint16)  # ember.bfloat16's storage (ember has no uint16 dtype)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_HALF = (_BF16, _F16)
_CMP = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}
_UNARY = {"neg": "negative", "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "sqrt": "sqrt",
          "tanh": "tanh", "abs": "abs", "floor": "floor", "ceil": "ceil", "round": "round",  # half to even, as torch
          "not": "logical_not"}
_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide", "pow": "power",
           "maximum": "maximum", "minimum": "minimum", "fmod": "fmod", "floordiv": "floor_divide",
           "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal", "and": "logical_and", "or": "logical_or", "xor": "logical_xor"}
_REDUCE = {"sum": "sum", "max": "max", "min": "min", "prod": "prod"}


class ArrayModuleBackend(Backend):
    name = "xp"
    on_host = False  # True where reading a value back is free (numpy): branch on data instead of computing both

    def __init__(self, xp, index=0):
        self.xp, self.index, self._ndarray, self._asarray = xp, index, xp.ndarray, xp.asarray
        self._unary = {k: getattr(xp, v) for k, v in _UNARY.items()}
        self._unary.update(rsqrt=self._rsqrt, erf=self._erf, sign=self._sign, sigmoid=self._sigmoid,
                           recip=self._recip)
        self._binary = {k: getattr(xp, v) for k, v in _BINARY.items()}
        self._reduce = {k: getattr(xp, v) for k, v in _REDUCE.items()}

    def __repr__(self):
        return f"{type(self).__name__}({self.xp.__name__}, index={self.index})"

    # -- hooks where the array modules differ -----------------------------------------------------
    def _erf(self, x):
        return _erf(x)  # numpy has no erf: the float32 fit below (CUDA overrides with CuPy's)

    def _host(self, x):
        """Device array -> a numpy copy the caller may keep."""
        return np.array(x, copy=True)

    def _upload(self, a):
        """numpy array (already in storage dtype) -> device array; numpy keeps it (no copy)."""
        return self.xp.array(np.ascontiguousarray(a) if a.ndim else a, copy=True)

    def _mm(self, a, b, out=None):
        """The matmul of the composed fused ops (attention); the CPU backend's is cpu_matmul.mm."""
        return self.xp.matmul(a, b, out=out)

    # -- bfloat16 bits <-> float32 ----------------------------------------------------------------
    def _up(self, x):
        """bf16 bits -> float32 (exact); other arrays unchanged."""
        xp = self.xp
        return (x.astype(xp.uint32) << 16).view(xp.float32) if x.dtype is _BF16 else x

    def _down(self, y):
        """float32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN (as ember.dtypes), branch-free."""
        xp = self.xp
        u = xp.ascontiguousarray(xp.asarray(y, dtype=xp.float32)).view(xp.uint32)
        rounded = ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(xp.uint16)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return xp.asarray(xp.where(nan, ((u >> 16) | 0x0040).astype(xp.uint16), rounded))

    def _f32(self, x):
        """Half types compute in float32; float32/float64 (and None) stay as they are."""
        if x is None or x.dtype not in _HALF:
            return x
        return self._up(x).astype(self.xp.float32, copy=False)

    def _back(self, y, dtype):
        """A float32 result -> the input's storage dtype."""
        if dtype is _BF16:
            return self._down(y)
        return y if y.dtype is dtype else y.astype(dtype)

    def _bf16_scalar(self, value):
        return int(D.f32_to_bf16_bits(np.array([value], np.float32))[0])

    # -- transfer / creation ----------------------------------------------------------------------
    def from_numpy(self, a, dtype):
        a = np.asarray(a)
        if a.dtype != dtype.np:
            a = a.astype(dtype.np)
        elif a.dtype is not dtype.np:  # an equal dtype but another object (a reader's newbyteorder("<")): the
            a = a.view(dtype.np)       # backend's `dtype is float32` fast paths (BLAS, the wasm GEMM) need numpy's own
        return self._upload(a)

    def to_numpy(self, x):
        return self._host(x)

    def full(self, shape, value, dtype):
        if dtype is D.bfloat16:
            return self.xp.full(shape, self._bf16_scalar(value), self.xp.uint16)
        if isinstance(value, (int, float)) and value == 0:  # calloc'd: pages a loaded weight replaces are never touched
            return self.xp.zeros(shape, dtype.np)
        return self.xp.full(shape, value, dtype.np)

    def arange(self, start, stop, step, dtype):
        if dtype is D.bfloat16:
            return self._down(self.xp.arange(start, stop, step, dtype=self.xp.float32))
        return self.xp.arange(start, stop, step, dtype=dtype.np)

    # -- meta -------------------------------------------------------------------------------------
    def shape(self, x):
        return x.shape

    def dtype_of(self, x):
        return D.FROM_NP[x.dtype]

    # -- elementwise ------------------------------------------------------------------------------
    def _rsqrt(self, x):
        return 1.0 / self.xp.sqrt(x)

    def _sign(self, x):
        s = self.xp.sign(x)
        return self.xp.nan_to_num(s) if x.dtype.kind == "f" else s  # sign(NaN) = 0

    def _sigmoid(self, x):
        # 1 / (1 + e^-x) = 0.5 * tanh(x / 2) + 0.5: never overflows and, unlike a sign split with boolean
        # masks, runs in four in-place passes (27x faster on YOLO-sized activations); |err| < 6e-8. A small
        # array takes the same four operations out of place (numpy's in-place calls cost ~1 us more each)
        if x.size <= 1024:
            return self.xp.tanh(x * 0.5) * 0.5 + 0.5
        out = self.xp.multiply(x, 0.5)
        self.xp.tanh(out, out=out)
        out *= 0.5
        out += 0.5
        return out

    def _recip(self, x):
        return self.xp.reciprocal(x) if x.dtype.kind == "f" else 1 / x

    def unary(self, op, x):
        """op in UNARY_OPS; output dtype = input dtype ('not' takes and gives bool)."""
        if not x.ndim:  # the helpers use out= buffers, which 0-d ufunc results (numpy scalars) refuse
            return self.unary(op, x.reshape(1)).reshape(())
        if x.dtype is _BF16:
            return self._down(self._unary[op](self._up(x)))
        y = self._unary[op](x)
        return y if y.dtype is x.dtype or op == "not" else y.astype(x.dtype)

    def binary(self, op, a, b):
        barr = b.__class__ is self._ndarray
        if a.dtype is _BF16:
            y = self._binary[op](self._up(a), self._up(b) if barr else b)
            return self._asarray(y) if op in _CMP else self._down(y)
        if op == "pow" and a.dtype.kind in "iu" and not barr and b < 0:
            raise ValueError("ember: integer tensor to a negative integer power")
        y = self._binary[op](a, b)
        if y.__class__ is not self._ndarray:  # ufuncs on 0-d arrays return numpy scalars
            y = self._asarray(y)
        return y if y.dtype is a.dtype or op in _CMP else y.astype(a.dtype)

    def where(self, cond, a, b):
        y = self.xp.where(cond, a, b)
        return y if y.dtype is a.dtype else y.astype(a.dtype)

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
        # float -> int truncates toward zero (as torch); NaN/inf give an unspecified value, as torch
        with np.errstate(all="ignore"):
            return xp.trunc(src).astype(dtype.np)

    # -- reductions -------------------------------------------------------------------------------
    def reduce(self, op, x, axes, keepdim):
        f = self._reduce[op]
        if x.dtype is _F32:
            return self._asarray(f(x, axis=axes, keepdims=keepdim))
        if x.dtype is _BF16:
            return self._down(f(self._up(x), axis=axes, keepdims=keepdim))
        if x.dtype is _F16 and op in ("sum", "prod"):
            return self.xp.asarray(f(x.astype(self.xp.float32), axis=axes, keepdims=keepdim)).astype(_F16)
        return self.xp.asarray(f(x, axis=axes, keepdims=keepdim)).astype(x.dtype, copy=False)

    def arg_reduce(self, op, x, axis, keepdim):
        xp = self.xp
        x = self._up(x)
        y = xp.argmax(x, axis=axis) if op == "argmax" else xp.argmin(x, axis=axis)
        if x.dtype.kind == "f":  # torch: NaN is the max (and the min); numpy agrees only for argmax
            nan = xp.isnan(x)
            if not self.on_host or nan.any():  # (on a GPU branch-free: no device sync)
                y = xp.where(nan.any(axis=axis), xp.argmax(nan.astype(xp.int8), axis=axis), y)
        y = xp.asarray(y).astype(xp.int64, copy=False)
        return xp.expand_dims(y, axis) if keepdim else y

    def cumsum(self, x, axis):
        xp = self.xp
        if x.dtype is _BF16:
            return self._down(xp.cumsum(self._up(x), axis=axis))
        if x.dtype is _F16:
            return xp.cumsum(x.astype(xp.float32), axis=axis).astype(xp.float16)
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
        if x.dtype is _BF16:
            value = self._bf16_scalar(value)
        return self.xp.pad(x, pads, mode="constant", constant_values=value)

    def cat(self, xs, axis):
        return self.xp.concatenate(xs, axis=axis)

    def contiguous(self, x):
        return x if x.flags.c_contiguous else x.copy()  # (ascontiguousarray would make 0-d 1-d)

    # -- compute ----------------------------------------------------------------------------------
    def matmul(self, a, b):
        xp = self.xp
        if a.dtype is _BF16:
            return self._down(xp.matmul(self._up(a), self._up(b)))
        if a.dtype is _F16:  # accumulate in float32, round once (as torch CPU)
            return xp.matmul(a.astype(xp.float32), b.astype(xp.float32)).astype(xp.float16)
        return xp.matmul(a, b)

    def conv(self, x, w, stride, padding, dilation, groups):
        if x.dtype is _BF16:
            return self._down(self._conv(self._up(x), self._up(w), stride, padding, dilation, groups))
        if x.dtype is _F16:
            f32 = self.xp.float32
            return self._conv(x.astype(f32), w.astype(f32), stride, padding, dilation, groups).astype(_F16)
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
    # Indices are int64 tensors; numpy indexes with intp, which is 32-bit under Pyodide (wasm32) and
    # refuses a 'safe' int64 cast there, so convert explicitly (a no-op on 64-bit CPython and CuPy).
    def gather(self, x, axis, idx):
        return self.xp.take_along_axis(x, idx.astype(self.xp.intp, copy=False), axis=axis)

    def index_select(self, x, axis, idx):
        idx = idx.astype(self.xp.intp, copy=False)
        if x.flags.c_contiguous:
            # take: a C-contiguous result; indexing an inner axis gives a transposed layout, which every later
            # copy pays for (a nearest Resize's output concatenated with another map: 36 against 4 ms in YOLOv8s)
            return self.xp.take(x, idx, axis=axis)
        # indexing, not take: numpy's take copies a non-C-contiguous x whole first (see weight_layout)
        return x[(slice(None),) * axis + (idx,)]

    def scatter(self, x, axis, idx, src, reduce):
        xp = self.xp
        idx = idx.astype(xp.intp, copy=False)
        index = tuple(idx if i == axis else xp.arange(idx.shape[i]).reshape([-1 if j == i else 1 for j in range(idx.ndim)])
                      for i in range(idx.ndim))                           # open grids on the other axes
        src = xp.broadcast_to(src, idx.shape)
        if reduce is None:
            out = x.copy()
            out[index] = src
            return out
        if x.dtype in _HALF:  # accumulate in float32, round once
            acc = self._f32(x)  # (a fresh float32 array)
            xp.add.at(acc, index, self._f32(src))
            return self._back(acc, x.dtype)
        out = x.copy()
        xp.add.at(out, index, src)  # repeated indices accumulate
        return out

# ============================================================================ erf (numpy has none)

def _erf(x):
    """float32/float16: Numerical Recipes' erfc Chebyshev fit, one formula for all x, |abs err| < 1.2e-7
    (torch's float32 erf is ~1 ulp); float64: Cody's rational fits."""
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
