"""The CPU's quantized matmul (the kernel registry's qmatmul, qmatmul_argmax and qmatmul_topk on cpu): y = x @ W.T
with W kept as GGML blocks.

Which product runs, by the weight's `activations` (ember.qtensor.QTensor) and where:
- "q8": x quantized to 8 bits per block and integer dot products, as llama.cpp's CPU backend (cpu_q8dot.py: the
  native build of cpu_kernels/q8dot.c, the page's wasm build, or numpy: the same bits);
- "float32", natively: the weight repacked once into int8 levels and scales (cpu_levels.py), a slab of rows cast
  to float32 at a time and multiplied with BLAS;
- "float32" under Pyodide: up to FUSED_ROWS rows of x multiply the blocks in wasm registers (cpu_kernels/quant.c);
  more rows dequantize slabs in wasm and go through the wasm GEMM;
- otherwise slabs dequantized by numpy (ember.ggml) and BLAS (qmatmul_slabs).
W (out_features, in_features) never exists in float32 all at once: each step dequantizes `rows` output rows
(rows * in_features * 4 bytes, ~SCRATCH_BYTES), so the extra memory is bounded by a few slabs whatever the weight
size (bench/bench_quant.py measures it with tracemalloc). A weight's derived forms (levels, the argmax bounds)
are kept per block array while it lives.

Greedy decoding's argmax and sampling's top-k of a tied Q8_0 output under Pyodide bound each row in integers and
compute only the rows that can win (quant.c ember_q8_0_argmax / ember_q8_0_rows_above): the same index, a third of
the work. Elsewhere every row is computed.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..ggml import types as T
from ..ggml.codec import check_raw, dequantize_rows
from . import cpu_levels, cpu_q8dot
from .cpu_matmul import NO_BLAS, mm, native_kernels, native_kernels_status, pool_kernels, wasm_kernels
from .cpu_pool import SharedRows
from .cpu_pool_kernels import PoolKernels



# ============================================================================ the registry's kernels

def qmatmul(be, x, raw, qtype, shape, activations="float32"):
    """x (..., K) float -> (..., N) float32 = x @ dequantize(W).T, W (N, K) the uint8 blocks `raw` (checked by
    the caller: QTensor's constructor)."""
    if activations == "q8":
        return cpu_q8dot.q8_matmul(x, raw, qtype, shape, checked=True)
    y = _wasm_fused(x, raw, qtype, shape) if NO_BLAS else None
    if y is None:
        raw = _host(raw)
        y = qmatmul_slabs(x, raw, qtype, shape, levels=_levels(raw, qtype, shape))
    return y


def _host(raw):
    """Rows the numpy and side-module paths read: a pool-held weight's copy in the heap (kept with it)."""
    return raw.heap() if isinstance(raw, SharedRows) else raw


def qlinear(be, x, weight):
    """The qlinear op's forward: qmatmul over a QTensor's blocks (its backward, dy @ W by slabs, is the op's)."""
    return qmatmul(be, x, weight.data, weight.ggml_type, weight.shape, weight.activations)


def qmatmul_argmax(be, x, raw, qtype, shape, activations="float32") -> int:
    """int(argmax(qmatmul(x))) for one row x (K,) or (1, ..., K)."""
    if activations == "q8":
        return cpu_q8dot.q8_matmul_argmax(x, raw, qtype, shape)
    bounded = _bounded(x, raw, qtype, shape, activations)
    if bounded is not None:
        kernels, row, l1 = bounded
        arg, _ = kernels.q8_0_argmax(raw, l1, row)
        if arg >= 0:
            return arg
    return int(np.argmax(qmatmul(be, x, raw, qtype, shape, activations)))


def qmatmul_topk(be, x, raw, qtype, shape, activations, k):
    """(ids ascending int64, values float32) for one row x: rows of qmatmul(x) that include every row among its k
    largest (ties with the k-th too); every row where no bound applies."""
    bounded = _bounded(x, raw, qtype, shape, activations) if 0 < k <= shape[0] else None
    if bounded is not None:
        kernels, row, l1 = bounded
        got = kernels.q8_0_topk(raw, l1, row, k)
        if got is not None:
            return got
    y = np.asarray(qmatmul(be, x, raw, qtype, shape, activations), np.float32).reshape(-1)
    return np.arange(y.size, dtype=np.int64), y


def qrows(be, ids, raw, qtype, shape) -> np.ndarray:
    """float32 (n, K) rows ids of the dequantized weight: in the page quant.c's block decoder (the pool's, reading
    the rows where the pool holds them), else the numpy codec; the same values either way."""
    t = T.get(qtype)
    k = int(shape[1])
    if NO_BLAS:
        pool = pool_kernels()
        if pool is not None and isinstance(raw, SharedRows) and t.id in pool.qmatmul_types:
            return pool.qrows(raw, ids, t.id, k)
        kernels = wasm_kernels()
        if kernels is not None and t.id in kernels.qmatmul_types:
            return kernels.qdequant(np.ascontiguousarray(np.asarray(raw[ids])), t.id, k)
    return dequantize_rows(np.asarray(raw[ids]), t).reshape(-1, k)


def describe_qrows(be=None) -> str:
    return "cpu_kernels/quant.c ember_qdequant (wasm)" if NO_BLAS and wasm_kernels() is not None else "numpy codec"


def describe_qmatmul(be=None) -> str:
    if NO_BLAS:
        k = wasm_kernels()
        return "cpu_kernels/quant.c + q8dot.c (wasm)" if k is not None else "numpy slabs + einsum (no wasm kernels)"
    q8 = f"cpu_kernels/q8dot.c, {native_kernels_status()}" if native_kernels() is not None else \
        f"numpy ({native_kernels_status()})"
    return f"q8: {q8}; float32: int8 levels + BLAS"


def describe_bounded(be=None) -> str:
    return "cpu_kernels/quant.c ember_q8_0_argmax (wasm, Q8_0)" if NO_BLAS and wasm_kernels() is not None \
        else "every row (qmatmul)"


# ============================================================================ per-weight derived forms

_DERIVED: dict = {}  # (id(raw), kind) -> (weakref to raw, value): the levels or argmax bounds of a live weight


def _derived(raw, kind, make):
    key = (id(raw), kind)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0]() is raw:
        return hit[1]
    value = make()
    _DERIVED[key] = (weakref.ref(raw, lambda _, k=key: _DERIVED.pop(k, None)), value)
    return value


def _levels(raw, qtype, shape):
    """The weight as int8 levels + scales (cpu_levels.py) for numpy + BLAS, made once; None under Pyodide, whose
    wasm kernels read the blocks themselves, and for types or shapes without a repack."""
    if NO_BLAS or len(shape) != 2 or not cpu_levels.supports(qtype):
        return None
    return _derived(raw, "levels", lambda: cpu_levels.repack(raw, qtype))


def _wasm_fused(x, raw, qtype, shape):
    """The in-register wasm product for a few rows of x (decode), without re-checking the blocks: a decode step
    makes 7 of these calls per layer, and the checks were a third of each small one's Python cost. None where
    qmatmul_slabs' own path applies."""
    if len(shape) != 2 or x.shape[-1:] != tuple(shape[1:]):
        return None
    kernels = pool_kernels() or wasm_kernels()
    x2 = x.reshape(-1, shape[1])
    if kernels is None or qtype.id not in kernels.qmatmul_types or x2.shape[0] > FUSED_ROWS:
        return None
    if x2.dtype != np.float32 or not x2.flags.c_contiguous:
        x2 = np.ascontiguousarray(x2, np.float32)
    if not isinstance(kernels, PoolKernels):
        raw = _host(raw)
    return kernels.qmatmul(x2, raw, qtype.id, shape[0]).reshape(*x.shape[:-1], shape[0])


def _bounded(x, raw, qtype, shape, activations):
    """(the wasm kernels, x as one float32 row, the weight's per-row bounds) where the bounded Q8_0 kernels apply
    (Pyodide, a 2-d Q8_0 weight with float32 activations, one row of x), else None."""
    n_in = shape[-1]
    if not (NO_BLAS and activations == "float32" and len(shape) == 2 and qtype.name == "Q8_0"
            and int(np.prod(x.shape)) == n_in) or isinstance(raw, SharedRows):  # (the pool computes every row)
        return None
    kernels = wasm_kernels()
    if kernels is None:
        return None
    l1 = _derived(raw, "l1", lambda: kernels.q8_0_l1(raw, n_in))
    return kernels, np.asarray(x, np.float32).reshape(n_in), l1


# ============================================================================ the slab product

# Under Pyodide the wasm kernels (core/backends/cpu_kernels/quant.c) decode the blocks in registers: up to FUSED_ROWS rows of
# x multiply the blocks directly (decode, short prefills); more rows dequantize slabs there and go through the
# wasm GEMM, whose 4 x 8 register tiles then beat re-decoding every block once per 4 rows.
FUSED_ROWS = 8
SCRATCH_BYTES = 1 << 20  # float32 slab per step: 1 MiB (64 rows of a 4096-wide weight); stays in cache,
# which measured 2-4x faster than 4 MiB slabs on a 4096x4096 matvec


def slab_rows(in_features: int, scratch_bytes: int = SCRATCH_BYTES) -> int:
    return max(1, scratch_bytes // (4 * max(1, in_features)))


def qmatmul_slabs(x, raw, qtype, shape, scratch_bytes: int = SCRATCH_BYTES, name: str = "weight",
                  levels=None) -> np.ndarray:
    """x (..., in_features) float -> (..., out_features) float32 = x @ dequantize(raw).T.

    raw: uint8 GGML blocks of a (out_features, in_features) weight of type qtype. levels: the same weight as
    cpu_levels.Levels (int8 levels + scales, kept per weight natively), multiplied instead of decoding blocks.
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
    kernels = (pool_kernels() or wasm_kernels()) if NO_BLAS else None
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
