"""The CPU matmul kernel every numpy hot path calls (`mm`): BLAS's np.matmul, or under Pyodide, which has
no BLAS, float32 einsum (its kernels beat np.matmul's fallback loop there ~1.5-6x, same bits).

Shared by the numpy backend (matmul, attention), its convolution (numpy_conv.py) and ember.quant's
slab-wise quantized matmul, so the BLAS / no-BLAS switch is made in one place.
"""
from __future__ import annotations

import math
import sys

import numpy as np

NO_BLAS = sys.platform == "emscripten"
_EINSUM_ITER_MAX = (1 << 31) - 1  # numpy's einsum iterator (batch x M x K x N) counts in intp: 32-bit in wasm


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
    if NO_BLAS and a.dtype == np.float32 and b.dtype == np.float32:
        return einsum_matmul(a, b) if out is None else np.einsum("...ij,...jk->...ik", a, b, out=out)
    return np.matmul(a, b, out=out)
