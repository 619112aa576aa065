"""Quantized matmul as llama.cpp's CPU backend computes it: x quantized to 8 bits per block for W's type (GGML's
"vec_dot_type"), integer dot products per block, then one float scale step per block.

    y = q8_matmul(x, raw, "q4_k", (out_features, in_features))      # x (..., in) float -> (..., out) float32

    weights              activations (llama.cpp's x86 quantizer, bit for bit)
    Q4_0, Q5_0, Q8_0     Q8_0: per 32, d = f16(amax / 127), q = round_half_even(x * (127 / amax))
    Q4_1, Q5_1           Q8_1: Q8_0 and s = f16(d * sum q), d before its f16 rounding
    Q4_K, Q5_K, Q6_K     Q8_K: per 256, iscale = -127 / (the x of largest |x|), q = min(127, round(iscale x)),
                         d = 1 / iscale, and sums of q per 16

The float steps have one order everywhere (core/backends/cpu_kernels/q8dot.c states it), so the native kernels,
the page's wasm kernels and the numpy code here give the same bits; this module runs the compiled kernels where
they load (cpu_native_kernels.py, cpu_wasm_kernels.py) and numpy otherwise; cpu_quant.py's qmatmul calls it for
activations='q8'. Against llama.cpp's own vec_dot the difference is its float summation order (~1e-7 relative);
against x @ dequantize(W).T it is the rounding of x to 8 bits (what llama.cpp's answers differ from float32 math by).
"""
from __future__ import annotations

import numpy as np

from ..ggml import types as T
from ..ggml.codec import check_raw
from ..ggml.kquants import unpack_scales_k4
from ..ggml.legacy import f16_at
from .cpu_levels import LEVELS  # per type: blocks -> (integer levels in element order, ...)
from .cpu_matmul import NO_BLAS, native_kernels, pool_kernels, wasm_kernels
from .cpu_pool import SharedRows
from .cpu_pool_kernels import PoolKernels

F = np.float32
ACTIVATIONS = T.VEC_DOT_TYPES  # weight type -> the activations' 8-bit type
SLAB_BYTES = 8 << 20  # float32 levels of W's rows per numpy step


def supports(t) -> bool:
    return T.get(t).name in ACTIVATIONS


def q8_matmul(x, raw, qtype, shape, name: str = "weight", checked: bool = False) -> np.ndarray:
    """x (..., in_features) float -> (..., out_features) float32 for W = raw (uint8 GGML blocks of a 2-d
    (out_features, in_features) weight of qtype), computed as llama.cpp does. checked: raw was validated
    (QTensor's constructor), skip it."""
    t = T.get(qtype)
    if t.name not in ACTIVATIONS:
        raise ValueError(f"ember: {name}: llama.cpp's 8-bit activations cover {', '.join(ACTIVATIONS)}, not {t.name}")
    if len(shape) != 2:
        raise ValueError(f"ember: quantized matmul needs a 2-d weight, {name} has shape {tuple(shape)}")
    out_f, in_f = (int(s) for s in shape)
    rows = raw if checked else check_raw(raw, t, shape, name)
    kernels = (pool_kernels() or wasm_kernels()) if NO_BLAS else native_kernels()
    if isinstance(rows, SharedRows) and not isinstance(kernels, PoolKernels):
        rows = rows.heap()  # the page's pool stopped: this thread's kernels read the heap
    x = np.asarray(x)
    if x.shape[-1:] != (in_f,):
        raise ValueError(f"ember: quantized matmul: input of shape {x.shape} does not match {name} of shape "
                         f"{(out_f, in_f)} (last dim must be {in_f})")
    lead = x.shape[:-1]
    x2 = np.ascontiguousarray(x.reshape(-1, in_f), dtype=F)  # (m, in_features)
    if not isinstance(rows, SharedRows) and not rows.flags.c_contiguous:
        rows = np.ascontiguousarray(rows)
    if kernels is not None:
        return kernels.q8_matmul(x2, rows, t.id, out_f).reshape(*lead, out_f)
    return q8_matmul_numpy(x2, rows, t, out_f).reshape(*lead, out_f)


def q8_matmul_argmax(x, raw, qtype, shape) -> int:
    """int(np.argmax(q8_matmul(x, raw, qtype, shape, checked=True))) for one row x: on the page's pool, the
    logits stay where the kernel wrote them and are scanned there; the side module scans them in wasm too."""
    kernels = (pool_kernels() or wasm_kernels()) if NO_BLAS else None
    t = T.get(qtype)
    x = np.asarray(x)
    if (isinstance(kernels, PoolKernels) and t.name in ACTIVATIONS and len(shape) == 2 and x.size == shape[1]
            and x.shape[-1:] == tuple(shape[1:]) and shape[0] > 0):
        return kernels.q8_matmul_argmax(np.ascontiguousarray(x.reshape(1, -1), dtype=F), raw, t.id, int(shape[0]))
    y = q8_matmul(x, raw, qtype, shape, checked=True)
    return kernels.argmax(y.reshape(-1)) if kernels is not None and y.size else int(np.argmax(y))


# ------------------------------------------------------------------------------------------- activations

def quantize_activations(x2: np.ndarray, t):
    """x2 (m, k) float32 -> (q (m, k) int8, d (m, blocks) float32, extra): extra is Q8_1's s (m, k / 32) float32,
    Q8_K's sums of q per 16 (m, k / 16) int64, or None (Q8_0)."""
    kind = ACTIVATIONS[T.get(t).name]
    m, k = x2.shape
    if kind == "Q8_K":
        xb = x2.reshape(m, k // 256, 256)
        i = np.abs(xb).argmax(-1)[..., None]                      # the first of the largest |x| (C's strict >)
        top = np.take_along_axis(xb, i, -1)[..., 0]               # (m, blocks), signed
        zero = top == 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            iscale = np.where(zero, F(0), F(-127) / np.where(zero, F(1), top))
            q = np.minimum(np.rint(iscale[..., None] * xb), F(127)).astype(np.int8).reshape(m, k)
            d = np.where(zero, F(0), F(1) / np.where(zero, F(1), iscale))
        return q, d.astype(F), q.reshape(m, k // 16, 16).sum(-1, dtype=np.int64)
    xb = x2.reshape(m, k // 32, 32)
    amax = np.abs(xb).max(-1)                                      # (m, blocks)
    d = amax / F(127)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(amax != 0, F(127) / np.where(amax != 0, amax, F(1)), F(0))
        q = np.rint(xb * inv[..., None]).astype(np.int8)
    extra = None
    if kind == "Q8_1":
        extra = _f16_round(d * q.sum(-1, dtype=np.int64).astype(F))
    return q.reshape(m, k), _f16_round(d), extra


def _f16_round(v):
    return np.asarray(v, F).astype(np.float16).astype(F)


# ------------------------------------------------------------------------------------------- the product

def q8_matmul_numpy(x2: np.ndarray, rows: np.ndarray, t, out_f: int) -> np.ndarray:
    """What the kernels compute, with numpy: x2 (m, k) float32, rows (out_f, row_bytes) -> (m, out_f) float32.
    Integer sums per 32 (or 16) come out of float32 matmuls, exact (each term and partial sum is an integer
    below 2^24); W's rows go a slab at a time."""
    t = T.get(t)
    m, k = x2.shape
    q, d, extra = quantize_activations(x2, t)
    y = np.empty((m, out_f), F)
    step = max(1, SLAB_BYTES // (4 * k))
    for s in range(0, out_f, step):
        blocks = rows[s:s + step].reshape(-1, t.type_size)
        fn = _slab_k if t.block_size == 256 else _slab_32
        y[:, s:s + step] = fn(blocks, t, min(step, out_f - s), q, d, extra).T
    return y


def _int_sums(lev, q, group):
    """lev (r, k) int8, q (m, k) int8 -> (k / group, r, m) float32: the integer sums of each group of products."""
    g = lev.shape[1] // group
    a = lev.reshape(lev.shape[0], g, group).transpose(1, 0, 2).astype(F)        # (g, r, group)
    b = q.reshape(q.shape[0], g, group).transpose(1, 2, 0).astype(F)             # (g, group, m)
    return np.matmul(a, b)                                                        # (g, r, m)


def _slab_32(blocks, t, r, q, d, extra):
    """(r, m): Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 rows; eight partial sums, block b into b % 8."""
    lev = LEVELS[t.name][0](blocks)[0].reshape(r, -1)                           # (r, k) int8
    nb = lev.shape[1] // 32
    isum = _int_sums(lev, q, 32)                                                  # (nb, r, m)
    dw = f16_at(blocks, 0).reshape(r, nb)
    mw = f16_at(blocks, 2).reshape(r, nb) if extra is not None else None
    part = np.zeros((8, r, q.shape[0]), F)
    for b in range(nb):
        p = (dw[:, b, None] * d[None, :, b]) * isum[b]
        part[b % 8] += p + mw[:, b, None] * extra[None, :, b] if mw is not None else p
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]))


def _slab_k(blocks, t, r, q, d, bsum):
    """(r, m): Q4_K / Q5_K / Q6_K rows; one sum over the blocks of 256 in order."""
    lev = LEVELS[t.name][0](blocks)[0].reshape(r, -1)                           # (r, k) int8
    nb = lev.shape[1] // 256
    isum = np.rint(_int_sums(lev, q, 16)).astype(np.int64).reshape(nb, 16, r, -1)  # (nb, 16, r, m)
    if t.name == "Q6_K":
        sc = blocks[:, 192:208].view(np.int8).astype(np.int64).reshape(r, nb, 16)
        dw, dmin = f16_at(blocks, 208).reshape(r, nb), None
    else:
        s6, m6 = unpack_scales_k4(blocks[:, 4:16])                               # (r * nb, 8) each
        sc = np.repeat(s6.astype(np.int64), 2, axis=1).reshape(r, nb, 16)      # one scale per 32: two 16s
        mn = m6.astype(np.int64).reshape(r, nb, 8)
        dw, dmin = f16_at(blocks, 0).reshape(r, nb), f16_at(blocks, 2).reshape(r, nb)
        bs = bsum.reshape(-1, nb, 8, 2).sum(-1)                                  # (m, nb, 8): sums per 32
    y = np.zeros((r, q.shape[0]), F)
    for b in range(nb):
        i = np.einsum("gr,grm->rm", sc[:, b].T, isum[b])                        # (r, m) int64
        y += (dw[:, b, None] * d[None, :, b]) * i.astype(F)
        if dmin is not None:
            im = mn[:, b] @ bs[:, b].T                                            # (r, m) int64
            y -= (dmin[:, b, None] * d[None, :, b]) * im.astype(F)
    return y
