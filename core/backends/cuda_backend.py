"""The CUDA backend: ember's primitives on NVIDIA GPUs through CuPy (`pip install ember[cuda]`).

Everything numpy-shaped runs through the reference ArrayModuleBackend with `xp = cupy` (cuBLAS for matmul,
CuPy's memory pool for allocations); the heavy composites run as fused CUDA kernels from
core/backends/cuda/*.cu: softmax, log_softmax, layer_norm, rms_norm, a flash-style attention, rotary
embeddings and quantized matmul over GGML blocks (Q4_0, Q8_0, Q4_K, Q6_K; the block layout comes with the
call, as a GGML type descriptor, so this layer does not import ember.quant).

`FusedKernels` holds the Python side of those kernels (argument layout, launch geometry, fallbacks)
and launches through one method, so CPU tests can run it over numpy with the kernels emulated;
`CudaBackend` binds it to CuPy, one GPU (`cuda:N`) and a stream per device.

Module API (re-exported as ember.cuda): allow_tf32, is_available(), device_count(), synchronize(),
memory_stats(), empty_cache().
"""
from __future__ import annotations

import functools
import math
import weakref

import numpy as np

from ..device import DeviceError
from . import cuda_kernels as K
from .array_module_backend import ArrayModuleBackend

try:  # CuPy is optional: without it the device reports itself unavailable, nothing else breaks
    import cupy
    _CUPY_ERROR = None
except Exception as e:  # ImportError, or a CuPy build whose CUDA libraries fail to load
    cupy, _CUPY_ERROR = None, e

allow_tf32 = False  # float32 matmuls may use TF32 tensor cores (10-bit mantissa) only when set True

_ROW_MAX_THREADS = 1024
_ATT_WARPS, _ATT_MAX_D = 4, 256        # as attention.cu
_QMV_MAX_M, _QMV_WARPS = 8, 4          # as quant.cu
_QUANT_KERNELS = {"Q4_0": "q4_0", "Q8_0": "q8_0", "Q4_K": "q4_k", "Q6_K": "q6_k"}
_DEQUANT_SLAB_BYTES = 64 << 20         # float32 slab of dequantized rows per cuBLAS call (prefill)
_MAX_GRID_Y = 65535


def _i32(v):
    return np.int32(v)


def _i64(v):
    return np.int64(v)


def _row_threads(n):
    """Threads per row: a multiple of 32 up to 1024 (block_reduce needs whole warps)."""
    return int(min(_ROW_MAX_THREADS, max(32, 32 * math.ceil(n / 32))))


class FusedKernels(ArrayModuleBackend):
    """ArrayModuleBackend plus the fused kernels; `_launch(file, kernel, grid, block, args)` runs one."""

    def _launch(self, src, kernel, grid, block, args):
        raise NotImplementedError

    def _suffix(self, x):
        return K.SUFFIX.get(self.dtype_of(x).name)

    # -- ember.custom_op kernels ----------------------------------------------------------------------
    def custom_kernel(self, kernel, inputs, out_shape, out_dtype, attrs):
        """An ember.CUDA descriptor's kernel: (out, in0, ..., long long n, *params), inputs contiguous (None as
        a one-element dummy), ints passed as int and floats as float; default grid one thread per element."""
        xp = self.xp
        inputs = [None if a is None else xp.ascontiguousarray(a) for a in inputs]
        params = list(kernel.params(*inputs, **attrs)) if kernel.params is not None else []
        grid = kernel.grid(out_shape, *inputs, **attrs) if kernel.grid is not None else None
        arrays = [xp.zeros(1, xp.float32) if a is None else a for a in inputs]
        out = xp.empty(tuple(out_shape), dtype=np.uint16 if out_dtype.name == "bfloat16" else out_dtype.np)
        n = out.size
        if n:
            scalars = [np.float32(v) if isinstance(v, float) else _i32(v) for v in params]
            blocks = tuple(grid) if grid is not None else (math.ceil(n / kernel.block),)
            self._launch_source(kernel, blocks, (kernel.block,), (out, *arrays, _i64(n), *scalars))
        return out

    def _launch_source(self, kernel, grid, block, args):
        raise NotImplementedError

    # -- softmax family and norms: one block per row of the last axis --------------------------------
    def _rows(self, x, axis):
        """x with `axis` moved last, contiguous -> (array, n, rows)."""
        xp = self.xp
        if axis != x.ndim - 1:
            x = xp.moveaxis(x, axis, -1)
        x = xp.ascontiguousarray(x)
        n = x.shape[-1] if x.ndim else 1
        return x, n, (x.size // n if n else 0)

    def _softmax(self, x, axis, log):
        suf = self._suffix(x)
        if suf is None or x.size == 0 or x.ndim == 0:
            return (ArrayModuleBackend.log_softmax if log else ArrayModuleBackend.softmax)(self, x, axis)
        xr, n, rows = self._rows(x, axis)
        y = self.xp.empty_like(xr)
        self._launch("rows.cu", f"{'log_softmax' if log else 'softmax'}_{suf}", (rows,), (_row_threads(n),),
                     (xr, y, _i32(n)))
        return y if axis == x.ndim - 1 else self.xp.moveaxis(y, -1, axis)

    def softmax(self, x, axis):
        return self._softmax(x, axis, False)

    def log_softmax(self, x, axis):
        return self._softmax(x, axis, True)

    def _param(self, p, x, n, fill):
        """weight/bias in x's dtype and contiguous; a missing one is ones/zeros (exact no-ops)."""
        if p is None:
            return self.full((n,), fill, self.dtype_of(x))
        if p.dtype != x.dtype:
            p = self.cast(p, self.dtype_of(x))
        return self.xp.ascontiguousarray(p.reshape(n))

    def layer_norm(self, x, w, b, eps):
        suf = self._suffix(x)
        if suf is None or x.size == 0:
            return ArrayModuleBackend.layer_norm(self, x, w, b, eps)
        xr, n, rows = self._rows(x, x.ndim - 1)
        y = self.xp.empty_like(xr)
        self._launch("rows.cu", f"layer_norm_{suf}", (rows,), (_row_threads(n),),
                     (xr, self._param(w, x, n, 1.0), self._param(b, x, n, 0.0), y, _i32(n), np.float32(eps)))
        return y

    def rms_norm(self, x, w, eps):
        suf = self._suffix(x)
        if suf is None or x.size == 0:
            return ArrayModuleBackend.rms_norm(self, x, w, eps)
        xr, n, rows = self._rows(x, x.ndim - 1)
        y = self.xp.empty_like(xr)
        self._launch("rows.cu", f"rms_norm_{suf}", (rows,), (_row_threads(n),),
                     (xr, self._param(w, x, n, 1.0), y, _i32(n), np.float32(eps)))
        return y

    # -- rotary embedding -----------------------------------------------------------------------------
    def rope(self, x, cos, sin):
        """x (B, T, H, D) rotate-half rotary embedding; cos, sin (T, D/2) -> (B, T, H, D) in x's dtype."""
        xp = self.xp
        if x.ndim != 4 or x.shape[-1] % 2 or tuple(cos.shape) != (x.shape[1], x.shape[3] // 2) \
                or tuple(sin.shape) != tuple(cos.shape):
            raise ValueError(f"ember: rope needs x (B, T, H, D) with even D and cos/sin (T, D/2); got x "
                             f"{tuple(x.shape)}, cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
        suf = self._suffix(x)
        if suf is None:
            raise TypeError(f"ember: rope on cuda supports float32/float16/bfloat16, got {self.dtype_of(x).name}")
        b, t, h, d = x.shape
        xc = xp.ascontiguousarray(x)
        c = xp.ascontiguousarray(self._f32(cos).astype(xp.float32, copy=False))
        s = xp.ascontiguousarray(self._f32(sin).astype(xp.float32, copy=False))
        y = xp.empty_like(xc)
        total = b * t * h * (d // 2)
        if total:
            self._launch("rows.cu", f"rope_{suf}", (math.ceil(total / 256),), (256,),
                         (xc, c, s, y, _i64(total), _i32(t), _i32(h), _i32(d)))
        return y

    # -- attention ------------------------------------------------------------------------------------
    def attention(self, q, k, v, mask, scale, causal):
        """softmax(q k^T * scale + mask) v; q (..., L, D), k (..., S, D), v (..., S, Dv), additive mask
        broadcastable to (..., L, S); causal keeps key s <= query l (torch's top-left alignment)."""
        xp = self.xp
        suf = self._suffix(q)
        L, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                          () if mask is None else mask.shape[:-2]))  # as the composed path
        bh = math.prod(batch)
        if suf is None or D > _ATT_MAX_D or Dv > _ATT_MAX_D or min(L, S, D, bh) == 0 or bh > _MAX_GRID_Y \
                or k.dtype != q.dtype or v.dtype != q.dtype:
            return ArrayModuleBackend.attention(self, q, k, v, mask, scale, causal)  # the composed math
        qc = xp.ascontiguousarray(xp.broadcast_to(q, batch + (L, D))).reshape(bh, L, D)
        kc = xp.ascontiguousarray(xp.broadcast_to(k, batch + (S, D))).reshape(bh, S, D)
        vc = xp.ascontiguousarray(xp.broadcast_to(v, batch + (S, Dv))).reshape(bh, S, Dv)
        out = xp.empty((bh, L, Dv), q.dtype)
        if mask is None:
            m, has, strides = xp.zeros(1, xp.float32), 0, (0, 0, 0, 0)
        else:
            h2 = batch[-1] if batch else 1
            m = self._f32(mask).astype(xp.float32, copy=False)
            m = xp.broadcast_to(m, batch + (L, S)).reshape(bh // h2, h2, L, S)  # a view where it can be
            has, strides = 1, tuple(st // 4 for st in m.strides)
        self._launch("attention.cu", f"attention_{suf}", (math.ceil(L / _ATT_WARPS), bh), (32 * _ATT_WARPS,),
                     (qc, kc, vc, m, out, _i32(L), _i32(S), _i32(D), _i32(Dv), np.float32(scale),
                      _i32(bool(causal)), _i32(has), _i32(batch[-1] if batch else 1),
                      *(_i64(st) for st in strides)))
        return out.reshape(batch + (L, Dv))

    # -- quantized matmul over GGML blocks --------------------------------------------------------------
    def qmatmul(self, x, raw, qtype, shape):
        """x (..., K) float -> (..., N) float32 = x @ dequantize(W).T; W (N, K) as GGML blocks `raw`
        (uint8 (N, row_bytes), host or device) of the GGML type descriptor `qtype` (ember.quant.GGMLType).
        Q4_0/Q8_0/Q4_K/Q6_K dequantize inside the kernels; other types are dequantized on the host once
        (by the descriptor's own dequantize_rows) and kept on the device as float32."""
        xp = self.xp
        t = qtype
        n_out, k_in = (int(s) for s in shape)
        if x.shape[-1] != k_in:
            raise ValueError(f"ember: quantized matmul: input of shape {tuple(x.shape)} does not match the "
                             f"weight of shape {(n_out, k_in)} (last dim must be {k_in})")
        lead = tuple(x.shape[:-1])
        x2 = xp.ascontiguousarray(self._f32(x).astype(xp.float32, copy=False).reshape(-1, k_in))  # (m, K)
        m = x2.shape[0]
        name = _QUANT_KERNELS.get(t.name)
        if name is None:
            w = self._device_weight(raw, t, shape, dequantize=True)              # (N, K) float32
            return xp.matmul(x2, w.T).reshape(lead + (n_out,))
        w = self._device_weight(raw, t, shape, dequantize=False)                 # (N, row_bytes) uint8
        row_bytes = t.row_bytes(k_in)
        y = xp.empty((m, n_out), xp.float32)
        if m == 0 or n_out == 0:
            return y.reshape(lead + (n_out,))
        if m <= 4 * _QMV_MAX_M:  # decode: the fused matvec, up to 8 input rows per launch
            for m0 in range(0, m, _QMV_MAX_M):
                xs = xp.ascontiguousarray(x2[m0:m0 + _QMV_MAX_M])                # (<= 8, K)
                ys = xp.empty((xs.shape[0], n_out), xp.float32)
                self._launch("quant.cu", f"qmatvec_{name}", (math.ceil(n_out / _QMV_WARPS),), (32 * _QMV_WARPS,),
                             (w, xs, ys, _i32(n_out), _i32(k_in), _i64(row_bytes), _i32(xs.shape[0])))
                y[m0:m0 + _QMV_MAX_M] = ys
        else:  # prefill: dequantize a slab of rows in the kernel, multiply it with cuBLAS
            step = max(1, _DEQUANT_SLAB_BYTES // (4 * k_in))
            for r0 in range(0, n_out, step):
                rows = min(step, n_out - r0)
                slab = xp.empty((rows, k_in), xp.float32)                          # (rows, K)
                self._launch("quant.cu", f"dequant_{name}", (math.ceil(rows * k_in / 256),), (256,),
                             (w, slab, _i64(r0), _i64(rows), _i32(k_in), _i64(row_bytes)))
                y[:, r0:r0 + rows] = xp.matmul(x2, slab.T)
        return y.reshape(lead + (n_out,))

    def _device_weight(self, raw, t, shape, dequantize):
        """The weight's blocks (or float32 values) on this device, uploaded once per host array."""
        if not isinstance(raw, np.ndarray):  # already a device array
            if not dequantize:
                return raw
            raw = self._host(raw)
        cache = self.__dict__.setdefault("_weights", {})
        key = (id(raw), dequantize)
        hit = cache.get(key)
        if hit is not None and hit[0]() is raw:
            return hit[1]
        rows = np.asarray(raw)                                                  # (N, row_bytes) uint8
        want = (int(shape[0]), t.row_bytes(int(shape[1])))
        if rows.dtype != np.uint8 or rows.shape != want:
            raise ValueError(f"ember: quantized matmul: {t.name} weight of shape {tuple(shape)} needs uint8 blocks "
                             f"of shape {want}, got {rows.dtype} {rows.shape}")
        dev = self.xp.array(t.dequantize_rows(rows) if dequantize else rows, copy=True)
        cache[key] = (weakref.ref(raw, lambda _, c=cache, k=key: c.pop(k, None)), dev)
        return dev


# ================================================================================ CuPy binding

def _on_device(f):
    @functools.wraps(f)
    def run(self, *args):
        with self._device, self._stream:  # cuda:N's context and its stream, for every op
            return f(self, *args)
    return run


class CudaBackend(FusedKernels):
    name = "cuda"

    def __init__(self, index=0):
        where = "cuda" if index == 0 else f"cuda:{index}"
        if cupy is None:
            raise DeviceError(f"ember: device '{where}' is not available: CuPy is not installed ({_CUPY_ERROR}); "
                              "install ember[cuda] (pip install cupy-cuda12x)")
        n = device_count()
        if n == 0:
            raise DeviceError(f"ember: device '{where}' is not available: no CUDA GPU found ({_count_error()})")
        if not 0 <= index < n:
            raise DeviceError(f"ember: device '{where}' is not available: this machine has {n} CUDA GPU(s) "
                              f"(cuda:0 .. cuda:{n - 1})")
        super().__init__(cupy, index)
        self._device = cupy.cuda.Device(index)
        with self._device:
            self._stream = cupy.cuda.Stream(non_blocking=True)
            probe = cupy.empty(0, cupy.uint16)
        if probe.dtype is not np.dtype(np.uint16) or type(probe) is not cupy.ndarray:  # what the reference's `is` tests assume
            raise DeviceError(f"ember: this CuPy ({cupy.__version__}) gives arrays of {type(probe).__name__} with "
                              "non-singleton dtypes, which ember's cuda backend does not support")
        self._tf32 = None  # compute type last set for float32 GEMMs

    def __repr__(self):
        return f"CudaBackend(cuda:{self.index})"

    def _launch(self, src, kernel, grid, block, args):
        K.function(cupy, self.index, src, kernel)(grid, block, args)

    def _launch_source(self, kernel, grid, block, args):
        from ..errors import CustomOpError
        try:
            fn = K.custom_function(cupy, self.index, kernel.source(), kernel.name)
        except Exception as e:  # NVRTC's compile log, or a kernel name the source does not define
            raise CustomOpError(f"ember: custom op {kernel.op!r} (cuda): kernel {kernel.name!r} failed to "
                                f"compile: {e}") from e
        fn(grid, block, args)

    # -- hooks ----------------------------------------------------------------------------------------
    def _erf(self, x):
        from cupyx.scipy.special import erf
        return erf(x.astype(cupy.float32)).astype(x.dtype) if x.dtype == np.float16 else erf(x)

    def _host(self, x):
        return x.get(stream=self._stream)  # blocking copy ordered after this device's queued work

    def synchronize(self):
        self._stream.synchronize()

    # -- cuBLAS ---------------------------------------------------------------------------------------
    def _gemm_mode(self):
        """(Re)apply the user's TF32 choice before float32 GEMMs."""
        if self._tf32 is not allow_tf32:
            from cupy._core import _routines_linalg as blas
            blas.set_compute_type(cupy.float32, blas.COMPUTE_TYPE_TF32 if allow_tf32 else blas.COMPUTE_TYPE_FP32)
            blas.set_compute_type(cupy.float16, blas.COMPUTE_TYPE_FP32)  # f16 in, f32 accumulate, as torch
            self._tf32 = allow_tf32

    def _mm(self, a, b, out=None):
        self._gemm_mode()
        return cupy.matmul(a, b, out=out)

    def matmul(self, a, b):
        self._gemm_mode()
        if a.dtype == np.float16:
            return cupy.matmul(a, b)  # tensor cores, float32 accumulation (compute type above)
        return ArrayModuleBackend.matmul(self, a, b)  # float32 direct; bfloat16 through float32


for _name in ("from_numpy", "to_numpy", "full", "arange", "unary", "binary", "where", "cast", "reduce",
              "arg_reduce", "cumsum", "argsort", "reshape", "permute", "expand", "slice", "pad", "cat",
              "contiguous", "matmul", "conv", "gather", "index_select", "scatter", "softmax", "log_softmax",
              "layer_norm", "rms_norm", "attention", "rope", "qmatmul", "custom_kernel"):
    setattr(CudaBackend, _name, _on_device(getattr(CudaBackend, _name)))


# ================================================================================ module API

def _count_error():
    try:
        cupy.cuda.runtime.getDeviceCount()
        return "0 devices"
    except Exception as e:  # no driver, driver too old, no device: CuPy raises CUDARuntimeError
        return str(e)


def device_count() -> int:
    """Number of CUDA GPUs CuPy can use (0 without CuPy, a driver or a GPU; never raises)."""
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def is_available() -> bool:
    return device_count() > 0


def _backends():
    from ..device import _BACKENDS
    return [be for (kind, _), be in list(_BACKENDS.items()) if kind == "cuda"]


def synchronize(device=None) -> None:
    """Wait for the queued work of one CUDA device (an index, 'cuda:N' or ember.device) or of all."""
    if device is None:
        for be in _backends():
            be.synchronize()
        return
    from ..device import device as _device
    d = _device(f"cuda:{device}" if isinstance(device, int) else device)
    if d.type != "cuda":
        raise DeviceError(f"ember: cuda.synchronize() got a {d.type} device")
    d.backend.synchronize()


def memory_stats() -> dict:
    """CuPy memory pool: bytes in use by arrays and bytes held by the pool (all devices)."""
    if cupy is None:
        return {"used_bytes": 0, "pool_bytes": 0}
    pool = cupy.get_default_memory_pool()
    return {"used_bytes": int(pool.used_bytes()), "pool_bytes": int(pool.total_bytes())}


def empty_cache() -> None:
    """Return the pool's unused blocks to the driver (as torch.cuda.empty_cache)."""
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
