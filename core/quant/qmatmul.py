"""Quantized matmul: y = x @ W.T with W kept as GGML blocks, dequantized a bounded slab of rows at a time.

W (out_features, in_features) never exists in float32 all at once: each step dequantizes
`rows` output rows (rows * in_features * 4 bytes, ~SCRATCH_BYTES) and multiplies them with BLAS.
The kernels' own temporaries are a small multiple of that slab, so the extra memory is bounded by
a few slabs whatever the weight size (bench/bench_quant.py measures it with tracemalloc).

Why not GGML's integer path (activations quantized to Q8, int8 dot products)? numpy has no int8
GEMM with int32 accumulation that beats float32 BLAS, and it changes the result (the activations
get rounded); slab-wise dequantization gives exactly dequantize(W) @ x up to BLAS summation order.
"""
from __future__ import annotations

import numpy as np

from . import ggml_types as T
from ..backends.cpu_matmul import NO_BLAS, mm, wasm_kernels
from .codec import check_raw, dequantize_rows

# Under Pyodide the wasm kernels (core/backends/cpu_kernels/quant.c) decode the blocks in registers: up to FUSED_ROWS rows of
# x multiply the blocks directly (decode, short prefills); more rows dequantize slabs there and go through the
# wasm GEMM, whose 4 x 8 register tiles then beat re-decoding every block once per 4 rows.
FUSED_ROWS = 8
SCRATCH_BYTES = 1 << 20  # float32 slab per step: 1 MiB (64 rows of a 4096-wide weight); stays in cache,
# which measured 2-4x faster than 4 MiB slabs on a 4096x4096 matvec


def slab_rows(in_features: int, scratch_bytes: int = SCRATCH_BYTES) -> int:
    return max(1, scratch_bytes // (4 * max(1, in_features)))


def qmatmul(x, raw, qtype, shape, scratch_bytes: int = SCRATCH_BYTES, name: str = "weight",
            levels=None) -> np.ndarray:
    """x (..., in_features) float -> (..., out_features) float32 = x @ dequantize(raw).T.

    raw: uint8 GGML blocks of a (out_features, in_features) weight of type qtype. levels: the same weight as
    repack.Levels (int8 levels + scales, QTensor keeps them natively), multiplied instead of decoding blocks.
    """
    t = T.get(qtype)
    if len(shape) != 2:
        raise ValueError(f"ember: quantized matmul needs a 2-d weight, {name} has shape {tuple(shape)}")
    out_f, in_f = (int(s) for s in shape)
    rows = check_raw(raw, t, shape, name)  # (out_features, row_bytes)
    x = np.asarray(x)
    if x.shape[-1:] != (in_f,):
        raise ValueError(f"ember: quantized matmul: input of shape {x.shape} does not match {name} of shape "
                         f"{(out_f, in_f)} (last dim must be {in_f})")
    lead = x.shape[:-1]
    x2 = np.ascontiguousarray(x.reshape(-1, in_f), dtype=np.float32)  # (m, in_features)
    if levels is not None:
        return _qmatmul_levels(x2, levels, out_f, in_f, scratch_bytes).reshape(*lead, out_f)
    kernels = wasm_kernels() if NO_BLAS else None
    if kernels is not None and t.id in kernels.qmatmul_types:
        if x2.shape[0] <= FUSED_ROWS:
            return kernels.qmatmul(x2, rows, t.id, out_f).reshape(*lead, out_f)
        dequant = lambda r: kernels.qdequant(r, t.id, in_f)  # noqa: E731
    else:
        dequant = lambda r: dequantize_rows(r, t)  # noqa: E731
    yt = np.empty((out_f, x2.shape[0]), np.float32)  # (out_features, m): each slab's rows are contiguous
    step = slab_rows(in_f, scratch_bytes)
    for s in range(0, out_f, step):
        w = dequant(rows[s:s + step])  # (step, in_features) float32 slab
        mm(w, x2.T, out=yt[s:s + step])  # (the wasm GEMM or einsum under Pyodide, which has no BLAS)
    return np.ascontiguousarray(yt.T).reshape(*lead, out_f)


def _qmatmul_levels(x2, lv, out_f: int, in_f: int, scratch_bytes: int) -> np.ndarray:
    """x2 (m, k) @ (scale * q - offset).T: each slab is one int8 -> float32 cast into a reused buffer and one
    multiply by its scales, then BLAS; the offsets enter once as offset @ (x summed per group)."""
    m, (g, group) = x2.shape[0], lv.q.shape[1:]
    yt = np.empty((out_f, m), np.float32)  # (out_features, m)
    step = slab_rows(in_f, scratch_bytes)
    buf = np.empty((min(step, out_f), g, group), np.float32)
    for s in range(0, out_f, step):
        e = min(out_f, s + step)
        w = buf[:e - s]
        w[...] = lv.q[s:e]
        w *= lv.scale[s:e, :, None]
        mm(w.reshape(e - s, in_f), x2.T, out=yt[s:e])
    if lv.offset is not None:
        yt -= mm(lv.offset, x2.reshape(m, g, group).sum(-1).T)  # (out_features, m)
    return np.ascontiguousarray(yt.T)
