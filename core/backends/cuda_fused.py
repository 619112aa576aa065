"""The CUDA backend's fused kernels (kernel-registry entries, ember.kernels): the Python side of
core/backends/cuda/*.cu (argument layout, launch geometry, fallbacks to the array-module kernels), each a
function of (backend, arrays...) that launches through the backend's one `_launch(file, kernel, grid, block,
args)`, so CPU tests run it over numpy with the kernels emulated (tests/test_cuda_emulated.py).

Kernels: softmax, log_softmax, layer_norm, rms_norm (rows.cu, one block per row of the last axis), rope
(rows.cu), a flash-style attention (attention.cu) and quantized matmul over GGML blocks (quant.cu: Q4_0, Q8_0,
Q4_K, Q6_K decoded in the kernels; other types dequantized on the host once and multiplied by cuBLAS).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from . import array_module_fused as AM
from .cuda_backend import _i32, _i64
from . import cuda_kernels as K

_ROW_MAX_THREADS = 1024
_ATT_WARPS, _ATT_MAX_D = 4, 256        # as attention.cu
_QMV_MAX_M, _QMV_WARPS = 8, 4          # as quant.cu
_QUANT_KERNELS = {"Q4_0": "q4_0", "Q8_0": "q8_0", "Q4_K": "q4_k", "Q6_K": "q6_k"}
_DEQUANT_SLAB_BYTES = 64 << 20         # float32 slab of dequantized rows per cuBLAS call (prefill)
_MAX_GRID_Y = 65535


def _row_threads(n):
    """Threads per row: a multiple of 32 up to 1024 (block_reduce needs whole warps)."""
    return int(min(_ROW_MAX_THREADS, max(32, 32 * math.ceil(n / 32))))


def _suffix(be, x):
    return K.SUFFIX.get(be.dtype_of(x).name)


# ====================================================================== softmax family and norms: one block per row of the last axis

def _rows(be, x, axis):
    """x with `axis` moved last, contiguous -> (array, n, rows)."""
    xp = be.xp
    if axis != x.ndim - 1:
        x = xp.moveaxis(x, axis, -1)
    x = xp.ascontiguousarray(x)
    n = x.shape[-1] if x.ndim else 1
    return x, n, (x.size // n if n else 0)


def _softmax(be, x, axis, log):
    suf = _suffix(be, x)
    if suf is None or x.size == 0 or x.ndim == 0:
        return (AM.log_softmax if log else AM.softmax)(be, x, axis)
    xr, n, rows = _rows(be, x, axis)
    y = be.xp.empty_like(xr)
    be._launch("rows.cu", f"{'log_softmax' if log else 'softmax'}_{suf}", (rows,), (_row_threads(n),),
                 (xr, y, _i32(n)))
    return y if axis == x.ndim - 1 else be.xp.moveaxis(y, -1, axis)


def softmax(be, x, axis):
    return _softmax(be, x, axis, False)


def log_softmax(be, x, axis):
    return _softmax(be, x, axis, True)


def _param(be, p, x, n, fill):
    """weight/bias in x's dtype and contiguous; a missing one is ones/zeros (exact no-ops)."""
    if p is None:
        return be.full((n,), fill, be.dtype_of(x))
    if p.dtype != x.dtype:
        p = be.cast(p, be.dtype_of(x))
    return be.xp.ascontiguousarray(p.reshape(n))


def layer_norm(be, x, w, b, eps):
    suf = _suffix(be, x)
    if suf is None or x.size == 0:
        return AM.layer_norm(be, x, w, b, eps)
    xr, n, rows = _rows(be, x, x.ndim - 1)
    y = be.xp.empty_like(xr)
    be._launch("rows.cu", f"layer_norm_{suf}", (rows,), (_row_threads(n),),
                 (xr, _param(be, w, x, n, 1.0), _param(be, b, x, n, 0.0), y, _i32(n), np.float32(eps)))
    return y


def rms_norm(be, x, w, eps):
    suf = _suffix(be, x)
    if suf is None or x.size == 0:
        return AM.rms_norm(be, x, w, eps)
    xr, n, rows = _rows(be, x, x.ndim - 1)
    y = be.xp.empty_like(xr)
    be._launch("rows.cu", f"rms_norm_{suf}", (rows,), (_row_threads(n),),
                 (xr, _param(be, w, x, n, 1.0), y, _i32(n), np.float32(eps)))
    return y


# ====================================================================== rotary embedding

def rope(be, x, cos, sin):
    """x (B, T, H, D) rotate-half rotary embedding; cos, sin (T, D/2) -> (B, T, H, D) in x's dtype."""
    xp = be.xp
    if x.ndim != 4 or x.shape[-1] % 2 or tuple(cos.shape) != (x.shape[1], x.shape[3] // 2) \
            or tuple(sin.shape) != tuple(cos.shape):
        raise ValueError(f"ember: rope needs x (B, T, H, D) with even D and cos/sin (T, D/2); got x "
                         f"{tuple(x.shape)}, cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    suf = _suffix(be, x)
    if suf is None:
        raise TypeError(f"ember: rope on cuda supports float32/float16/bfloat16, got {be.dtype_of(x).name}")
    b, t, h, d = x.shape
    xc = xp.ascontiguousarray(x)
    c = xp.ascontiguousarray(be._f32(cos).astype(xp.float32, copy=False))
    s = xp.ascontiguousarray(be._f32(sin).astype(xp.float32, copy=False))
    y = xp.empty_like(xc)
    total = b * t * h * (d // 2)
    if total:
        be._launch("rows.cu", f"rope_{suf}", (math.ceil(total / 256),), (256,),
                     (xc, c, s, y, _i64(total), _i32(t), _i32(h), _i32(d)))
    return y


# ====================================================================== attention

def attention(be, q, k, v, mask, scale, causal):
    """softmax(q k^T * scale + mask) v; q (..., L, D), k (..., S, D), v (..., S, Dv), additive mask
    broadcastable to (..., L, S); causal keeps key s <= query l (torch's top-left alignment)."""
    xp = be.xp
    suf = _suffix(be, q)
    L, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                      () if mask is None else mask.shape[:-2]))  # as the composed path
    bh = math.prod(batch)
    if suf is None or D > _ATT_MAX_D or Dv > _ATT_MAX_D or min(L, S, D, bh) == 0 or bh > _MAX_GRID_Y \
            or k.dtype != q.dtype or v.dtype != q.dtype:
        return AM.attention(be, q, k, v, mask, scale, causal)  # the composed math
    qc = xp.ascontiguousarray(xp.broadcast_to(q, batch + (L, D))).reshape(bh, L, D)
    kc = xp.ascontiguousarray(xp.broadcast_to(k, batch + (S, D))).reshape(bh, S, D)
    vc = xp.ascontiguousarray(xp.broadcast_to(v, batch + (S, Dv))).reshape(bh, S, Dv)
    out = xp.empty((bh, L, Dv), q.dtype)
    if mask is None:
        m, has, strides = xp.zeros(1, xp.float32), 0, (0, 0, 0, 0)
    else:
        h2 = batch[-1] if batch else 1
        m = be._f32(mask).astype(xp.float32, copy=False)
        m = xp.broadcast_to(m, batch + (L, S)).reshape(bh // h2, h2, L, S)  # a view where it can be
        has, strides = 1, tuple(st // 4 for st in m.strides)
    be._launch("attention.cu", f"attention_{suf}", (math.ceil(L / _ATT_WARPS), bh), (32 * _ATT_WARPS,),
                 (qc, kc, vc, m, out, _i32(L), _i32(S), _i32(D), _i32(Dv), np.float32(scale),
                  _i32(bool(causal)), _i32(has), _i32(batch[-1] if batch else 1),
                  *(_i64(st) for st in strides)))
    return out.reshape(batch + (L, Dv))


# ====================================================================== quantized matmul over GGML blocks

def qmatmul(be, x, raw, qtype, shape, activations="float32"):
    """x (..., K) float -> (..., N) float32 = x @ dequantize(W).T; W (N, K) as GGML blocks `raw`
    (uint8 (N, row_bytes), host or device) of the GGML type descriptor `qtype` (ember.quant.GGMLType).
    Q4_0/Q8_0/Q4_K/Q6_K dequantize inside the kernels; other types are dequantized on the host once
    (by the descriptor's own dequantize_rows) and kept on the device as float32; GPUs multiply float activations
    whatever `activations` says."""
    xp = be.xp
    t = qtype
    n_out, k_in = (int(s) for s in shape)
    if x.shape[-1] != k_in:
        raise ValueError(f"ember: quantized matmul: input of shape {tuple(x.shape)} does not match the "
                         f"weight of shape {(n_out, k_in)} (last dim must be {k_in})")
    lead = tuple(x.shape[:-1])
    x2 = xp.ascontiguousarray(be._f32(x).astype(xp.float32, copy=False).reshape(-1, k_in))  # (m, K)
    m = x2.shape[0]
    name = _QUANT_KERNELS.get(t.name)
    if name is None:
        w = _device_weight(be, raw, t, shape, dequantize=True)              # (N, K) float32
        return xp.matmul(x2, w.T).reshape(lead + (n_out,))
    w = _device_weight(be, raw, t, shape, dequantize=False)                 # (N, row_bytes) uint8
    row_bytes = t.row_bytes(k_in)
    y = xp.empty((m, n_out), xp.float32)
    if m == 0 or n_out == 0:
        return y.reshape(lead + (n_out,))
    if m <= 4 * _QMV_MAX_M:  # decode: the fused matvec, up to 8 input rows per launch
        for m0 in range(0, m, _QMV_MAX_M):
            xs = xp.ascontiguousarray(x2[m0:m0 + _QMV_MAX_M])                # (<= 8, K)
            ys = xp.empty((xs.shape[0], n_out), xp.float32)
            be._launch("quant.cu", f"qmatvec_{name}", (math.ceil(n_out / _QMV_WARPS),), (32 * _QMV_WARPS,),
                         (w, xs, ys, _i32(n_out), _i32(k_in), _i64(row_bytes), _i32(xs.shape[0])))
            y[m0:m0 + _QMV_MAX_M] = ys
    else:  # prefill: dequantize a slab of rows in the kernel, multiply it with cuBLAS
        step = max(1, _DEQUANT_SLAB_BYTES // (4 * k_in))
        for r0 in range(0, n_out, step):
            rows = min(step, n_out - r0)
            slab = xp.empty((rows, k_in), xp.float32)                          # (rows, K)
            be._launch("quant.cu", f"dequant_{name}", (math.ceil(rows * k_in / 256),), (256,),
                         (w, slab, _i64(r0), _i64(rows), _i32(k_in), _i64(row_bytes)))
            y[:, r0:r0 + rows] = xp.matmul(x2, slab.T)
    return y.reshape(lead + (n_out,))


def _device_weight(be, raw, t, shape, dequantize):
    """The weight's blocks (or float32 values) on this device, uploaded once per host array."""
    if not isinstance(raw, np.ndarray):  # already a device array
        if not dequantize:
            return raw
        raw = be._host(raw)
    cache = be.__dict__.setdefault("_weights", {})
    key = (id(raw), dequantize)
    hit = cache.get(key)
    if hit is not None and hit[0]() is raw:
        return hit[1]
    rows = np.asarray(raw)                                                  # (N, row_bytes) uint8
    want = (int(shape[0]), t.row_bytes(int(shape[1])))
    if rows.dtype != np.uint8 or rows.shape != want:
        raise ValueError(f"ember: quantized matmul: {t.name} weight of shape {tuple(shape)} needs uint8 blocks "
                         f"of shape {want}, got {rows.dtype} {rows.shape}")
    dev = be.xp.array(t.dequantize_rows(rows) if dequantize else rows, copy=True)
    cache[key] = (weakref.ref(raw, lambda _, c=cache, k=key: c.pop(k, None)), dev)
    return dev
