"""The CPU backend: the reference array-module backend (array_module_backend.py) with `xp = numpy`, plus the
CPU's fast primitives. Pure numpy, so it runs unchanged under Pyodide (which has no BLAS: cpu_matmul.py).

Fast primitives, each a measured win on a model (see the comments): numpy's ufunc.reduce without np.sum's
wrapping, no-copy uploads, bfloat16 rounding that branches on NaN, matmul by einsum where it streams a
weight faster than BLAS, im2col convolution in cache-sized bands (numpy_conv.py), and `weight_layout`
re-storing linear weights for BLAS. The CPU's fused kernels (kernel-registry entries) are in cpu_fused.py,
cpu_quant.py, cpu_decode.py and array_module_fused.py.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .array_module_backend import _BF16, _F16, _F32, ArrayModuleBackend
from .cpu_matmul import (NO_BLAS, _deterministic, blas_ready, blocked_copy, deterministic, half_copy, mm, native_gemm,
                         native_kernels)
from .numpy_conv import conv as _conv_im2col

_MATVEC_MIN = 1 << 18  # elements of a weight past which a row-vector product goes to the C matvec (1 MiB)
_EINSUM_MAX = 1 << 22  # above this, multi-threaded BLAS streams a weight faster (32000x288 lm_head: 1.2 vs 1.5 ms)


def row_matvec(a, b) -> bool:
    """Whether matmul(a, b) runs decode.c's row-vector product (its bits: each output summed over the inputs in
    order, a multiply then an add): one float32 row against a large re-stored float32 (in, out) weight, natively."""
    return a.dtype is _F32 and b.dtype is _F32 and b.ndim == 2 and a.size == b.shape[0] and b.size >= _MATVEC_MIN \
        and b.flags.c_contiguous and b.shape[0] % 8 == 0 and not NO_BLAS and not deterministic() \
        and native_kernels() is not None


# ufunc.reduce directly: np.sum & co. add ~2 us of Python wrapping per call
_REDUCE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "prod": np.multiply.reduce}


_LAYOUT_ROWS = 64  # rows of a weight weight_layout casts and transposes at once
_CAT_THREADED = 1 << 20  # bytes from which a concatenation of whole blocks copies on the kernels' threads


class NumpyBackend(ArrayModuleBackend):
    name = "cpu"
    on_host = True

    def __init__(self, index=0):
        super().__init__(np, index)
        self._reduce = dict(_REDUCE)

    def __repr__(self):
        return f"NumpyBackend(index={self.index})"

    # -- hooks ------------------------------------------------------------------------------------
    def _upload(self, a):
        return a  # the host array is the backend array

    def _mm(self, a, b, out=None):
        return mm(a, b, out)

    _down = staticmethod(D.f32_to_bf16_bits)  # branches on NaN instead of a where over every element

    # -- layout -----------------------------------------------------------------------------------
    def weight_layout(self, w, dtype=None):
        # input-major storage makes w.T C-contiguous: OpenBLAS then streams a decoding step's
        # row-vector x weight product 1.2-2x faster than from the (out, in) rows (bench_llama)
        # (not under Pyodide: no BLAS to feed there, and the wasm kernels read either layout; nor in deterministic
        # mode: the kernels' one-row product sums in an order that follows the layout, so it keeps the page's)
        to = w.dtype if dtype is None else dtype.np
        if not NO_BLAS and not deterministic() and w.ndim == 2 and to.kind == "f" and w.flags.c_contiguous and w.size >= 16384:
            # cast and transposed a block at a time: no full-size intermediate (a row-major float32 twin of
            # Whisper's 80 MB tied head, or of a bfloat16 checkpoint's widened table, was a cold process's peak);
            # float32 and half weights by the native kernels' threaded copy where they run (Whisper tiny.en's half
            # weights: ~150 ms of numpy's strided copies on one core), else numpy's a block of rows at a time
            nk = native_kernels() if to == _F32 and w.dtype.str in ("<f4", "<f2") else None
            if nk is not None:
                return nk.transpose_f32(w).T
            out = np.empty(w.shape[::-1], to)                                  # (in, out)
            for a in range(0, w.shape[0], _LAYOUT_ROWS):
                rows = w[a:a + _LAYOUT_ROWS]
                out[:, a:a + _LAYOUT_ROWS] = (rows if rows.dtype.kind == "f" else self.cast(rows, dtype)).T
            return out.T
        return w if dtype is None else self.cast(w, dtype)

    def cat(self, xs, axis):
        # a big concatenation whose inputs are each one block of the output (the dims before the axis all 1: YOLO's
        # channel concatenations of single images) copies on the kernels' threads (57 MB a YOLOv8s forward)
        if len(xs) > 1 and not NO_BLAS:
            first, total = xs[0], 0
            axis %= first.ndim
            for x in xs:
                total += x.nbytes
            if total >= _CAT_THREADED and all(d == 1 for d in first.shape[:axis]) and all(
                    x.dtype is first.dtype and x.flags.c_contiguous for x in xs):
                nk = native_kernels()
                if nk is not None:
                    return nk.cat(xs, axis)
        return np.concatenate(xs, axis=axis)

    # -- compute ----------------------------------------------------------------------------------
    def matmul(self, a, b):
        if a.dtype is _F32 and b.size < 16384 and a.ndim == 2 and not NO_BLAS and not _deterministic[0]:
            return np.matmul(blas_ready(a), blas_ready(b))  # small matrices: what the checks below come to
        if a.dtype is _BF16:
            return self._down(mm(self._up(a), self._up(b)))
        if a.dtype is _F16:  # no f16 BLAS: accumulate in float32, round once (as torch CPU)
            return mm(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        if a.dtype is _F32:
            if NO_BLAS or deterministic():
                return mm(a, b)  # the wasm SIMD kernels (or their native build), or einsum
            if a.shape[-2] == 1 and b.ndim == 2 and 16384 <= b.size <= _EINSUM_MAX and not b.flags.c_contiguous:
                # row vector x an (out, in) weight's transposed view (one not re-stored by weight_layout,
                # e.g. while training): memory-bound, and numpy's SIMD einsum loop streams that layout
                # ~1.4-2.2x faster than OpenBLAS's M=1 gemm (bench_llama)
                return np.einsum("...ij,jk->...ik", a, b)
            if row_matvec(a, b):
                # one row x a large re-stored (in, out) weight (an LM head each decoded token): memory-bound, and
                # decode.c's matvec streams it ~1.4x faster than OpenBLAS's M=1 gemm on one thread, threaded alike
                kern, x, half = native_kernels(), a.reshape(-1), half_copy(b)
                if half is not None:  # a float16 checkpoint's weight: the same bits from half the bytes
                    y = kern.matvec_f16(x, half)
                else:  # a short weight from its blocked copy: one stream a block, split between threads
                    wb = blocked_copy(b)
                    y = kern.matvec_f32(x, b) if wb is None else kern.matvec_f32_blocked(x, wb, b.shape[1])
                return y.reshape(a.shape[:-1] + (b.shape[1],))
            y = native_gemm(a, b, weight=True)  # (a bias-free layer's weight: its blocked copy once read again)
            if y is not None:
                return y
        if a.ndim > 2 and b.ndim == 2 and a.shape[-2] > 1:
            # (..., M, K) x (K, N) as one 2-D gemm: numpy's stacked matmul runs ~20x slower than BLAS on the
            # same rows (every linear layer of an encoder pass; bench_embed)
            return np.matmul(a.reshape(-1, a.shape[-1]), blas_ready(b)).reshape(a.shape[:-1] + (b.shape[-1],))
        return np.matmul(blas_ready(a), blas_ready(b))

    def _conv(self, x, w, stride, padding, dilation, groups):
        return _conv_im2col(x, w, stride, padding, dilation, groups)  # sliding windows, bands of rows, BLAS
