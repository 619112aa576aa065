"""The CPU's kernel for block-quantized weights in onnxruntime's MatMulNBits layout (the kernel registry's
nbits_matmul on cpu; the layout and its meaning: ember.ggml.nbits).

- A few rows of x (a decode step) with the compiled kernels (cpu_kernels/nbits.c: natively, or the page's wasm
  build): each row of W is read once as packed bits, never widened in memory: per block,
  scale * (sum x_j level_j - zero * sum x_j).
- Otherwise, and where no compiled kernel loads: the weight's levels are unpacked once into int8 levels minus
  their zero point (int16 for 8 bits; the levels and float zeros apart when a zero point is not an integer), then
  each slab of rows is one cast into a reused float32 buffer times its scales and a BLAS product (mm: the wasm
  GEMM under Pyodide). W never exists in float32 all at once: a slab is ~SCRATCH_BYTES.
Both compute (level - zero) * scale per weight as onnxruntime's float32 path does, up to summation order.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..ggml.nbits import unpack
from .cpu_matmul import NO_BLAS, blocked_arena, derived_copy, mm, native_kernels, native_kernels_status, wasm_kernels

SCRATCH_BYTES = 1 << 20
FUSED_ROWS = 8  # rows of x the packed-bits kernel takes; more dequantize slabs for the GEMM


def nbits_matmul(be, x, packed, scales, zeros, bits, block, shape):
    """x (..., K) float -> (..., N) float32 = x @ ((levels - zeros) * scales).T (ember.ggml.nbits)."""
    n, k = shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.dtype != np.float32 or not x2.flags.c_contiguous:
        x2 = np.ascontiguousarray(x2, np.float32)
    kernels = _compiled()
    if kernels is not None and x2.shape[0] <= FUSED_ROWS and kernels.nbits_supports(bits, block):
        padded = scales.shape[1] * block
        if padded != k:  # the last block's padding levels meet zeros
            x2 = np.concatenate([x2, np.zeros((x2.shape[0], padded - k), np.float32)], 1)
        units = units_of(packed, scales, zeros, block) if bits == 4 and not NO_BLAS else None
        if units is not None:
            return kernels.nbits_matmul_units(x2, units, scales.shape[1], block, n).reshape(*lead, n)
        return kernels.nbits_matmul(x2, packed, scales, zeros, bits, block, n).reshape(*lead, n)
    return _slabs(x2, _levels(packed, zeros, bits, block, shape), scales, k).reshape(*lead, n)


def describe(be=None) -> str:
    kernels = _compiled()
    where = "wasm" if NO_BLAS else native_kernels_status()
    fused = f"cpu_kernels/nbits.c ({where}) up to {FUSED_ROWS} rows, " if kernels is not None else ""
    return fused + ("levels + the wasm GEMM" if NO_BLAS else "levels + BLAS")


def _compiled():
    return wasm_kernels() if NO_BLAS else native_kernels()


# ============================================================================ 4-bit weights as units of four rows

def units_of(packed, scales, zeros, block):
    """A 4-bit weight's copy as nbits.c's units of four rows (ember_nbits_units_bytes: one stream a unit for a
    decode step's products, the same bits), made natively at the weight's second product while
    EMBER_BLOCKED_WEIGHT_BYTES allows it (counted there while it lives), else None."""
    return derived_copy(packed, "nbits units", lambda p: _make_units(p, scales, zeros, block), second=True)


def _make_units(packed, scales, zeros, block):
    n, blocks = scales.shape
    bpb = block // 2
    size = native_kernels().nbits_units_bytes(n, blocks, block)
    arena = blocked_arena(size // 4)
    if arena is None:
        return None
    n4 = -(-n // 4) * 4
    units = arena.view(np.uint8).reshape(n4 // 4, blocks, 4 * bpb + 32)          # (units, blocks, bytes | 8 floats)
    bits = np.zeros((n4, blocks, bpb), np.uint8)
    bits[:n] = packed.reshape(n, blocks, bpb)
    units[:, :, :4 * bpb] = bits.reshape(n4 // 4, 4, blocks, bpb).transpose(0, 2, 1, 3).reshape(n4 // 4, blocks, -1)
    products = np.multiply(scales, zeros, dtype=np.float32)  # (rounded as nbits.c rounds scale * zero)
    for at, v in ((4 * bpb, scales), (4 * bpb + 16, products)):
        f = np.zeros((n4, blocks), np.float32)
        f[:n] = v
        units[:, :, at:at + 16] = np.ascontiguousarray(f.reshape(n4 // 4, 4, blocks).transpose(0, 2, 1)).view(
            np.uint8).reshape(n4 // 4, blocks, 16)
    return units


# ============================================================================ the unpacked levels, kept per weight

_LEVELS: dict = {}  # id(packed) -> (weakref to packed, Levels)


class Levels:
    """q (N, blocks, block): levels minus integer zeros (int8 / int16), or the raw levels (uint8) with float zeros
    apart (`zeros` not None) where a zero point is not an integer."""

    __slots__ = ("q", "zeros")

    def __init__(self, q, zeros):
        self.q, self.zeros = q, zeros


def _levels(packed, zeros, bits, block, shape):
    hit = _LEVELS.get(id(packed))
    if hit is not None and hit[0]() is packed:
        return hit[1]
    n = shape[0]
    raw = unpack(packed, bits).reshape(n, -1, block)                             # (N, blocks, block) uint8
    if np.all(zeros == np.round(zeros)):
        dt = np.int8 if bits < 8 else np.int16
        q = raw.astype(dt)
        q -= zeros.astype(dt)[:, :, None]
        lv = Levels(q, None)
    else:
        lv = Levels(raw, zeros)
    _LEVELS[id(packed)] = (weakref.ref(packed, lambda _, key=id(packed): _LEVELS.pop(key, None)), lv)
    return lv


def _slabs(x2, lv, scales, k):
    """x2 (m, K) @ W.T a slab of rows at a time: each slab one cast of its levels into a reused float32 buffer,
    times the scales (minus the float zeros first, where they are kept apart), then mm."""
    n, blocks, block = lv.q.shape
    m = x2.shape[0]
    yt = np.empty((n, m), np.float32)                                             # (N, m)
    step = max(1, SCRATCH_BYTES // (4 * blocks * block))
    buf = np.empty((min(step, n), blocks, block), np.float32)
    for s in range(0, n, step):
        e = min(n, s + step)
        w = buf[:e - s]
        w[...] = lv.q[s:e]
        if lv.zeros is not None:
            w -= lv.zeros[s:e, :, None]
        w *= scales[s:e, :, None]
        wk = w.reshape(e - s, blocks * block)
        mm(wk[:, :k] if blocks * block != k else wk, x2.T, out=yt[s:e])
    return np.ascontiguousarray(yt.T)
