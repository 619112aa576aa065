"""im2col convolution for the numpy backend: sliding windows + one batched BLAS matmul per call."""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .cpu_matmul import NO_BLAS, mm, wasm_kernels


def conv(x, w, stride, padding, dilation, groups):
    """x (N, C, *S), w (O, C // groups, *K) -> (N, O, *out); cross-correlation as torch."""
    nd = x.ndim - 2
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    if any(padding):
        x = _zero_pad(x, padding)
    s = x.shape[2:]
    out = tuple((s[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd))
    if any(v <= 0 for v in out):
        raise ValueError(f"ember: conv input spatial size {tuple(s)} (padded) is smaller than the "
                         f"dilated kernel {tuple(dilation[i] * (k[i] - 1) + 1 for i in range(nd))}")
    g, cg, og = groups, c // groups, o // groups
    p = math.prod(out)
    if nd == 2 and g == 1 and (not NO_BLAS or wasm_kernels() is not None) and any(v != 1 for v in k):
        return _conv2d_bands(x, w, stride, dilation, out)
    if nd == 1 and g == 1 and k[0] <= 8 and c * k[0] * p <= _SMALL_1D:
        # a small 1-D conv (a streaming model's: Silero VAD's encoder): the columns written tap by tap from
        # strided slices, without as_strided's view and the transposing copy (their fixed cost is most of it)
        cols = np.empty((n, c, k[0], p), x.dtype)                           # (N, C, K, P)
        span = stride[0] * (p - 1) + 1
        for j in range(k[0]):
            cols[:, :, j] = x[:, :, j * dilation[0]:j * dilation[0] + span:stride[0]]
        y = mm(w.reshape(o, -1), cols.reshape(n, c * k[0], p))               # (N, O, P)
        return y
    if all(v == 1 for v in k):  # 1x1: a plain matmul over (strided) pixels
        xs = x[(slice(None), slice(None)) + tuple(slice(0, stride[i] * (out[i] - 1) + 1, stride[i]) for i in range(nd))]
        cols = xs.reshape(n, g, cg, p)                                     # (N, g, Cg, P)
    else:
        win = _windows(x, k, stride, dilation, out).reshape((n, g, cg) + out + tuple(k))  # (N, C, *out, *K) view
        perm = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
        cols = win.transpose(perm).reshape(n, g, cg * math.prod(k), p)    # (N, g, Cg*K, P) copy
    wm = w.reshape(g, og, -1)                                              # (g, Og, Cg*K)
    y = mm(wm[None], cols)                                                 # (N, g, Og, P)
    return y.reshape((n, o) + out)


_SMALL_1D = 1 << 16  # im2col elements up to which a 1-D conv builds its columns tap by tap


def _zero_pad(x, padding):
    """x (N, C, *S) with `padding` zeros on both sides of each spatial axis (np.pad's generic path costs
    ~20x this on the small inputs of a recurrent or streaming model: Silero VAD's convs are 1-3 wide)."""
    y = np.zeros(x.shape[:2] + tuple(d + 2 * p for d, p in zip(x.shape[2:], padding)), x.dtype)
    y[(slice(None), slice(None)) + tuple(slice(p, p + d) for d, p in zip(x.shape[2:], padding))] = x
    return y


def _windows(x, k, stride, dilation, out):
    """The (N, C, *out, *k) view of x's kernel windows: one as_strided (sliding_window_view then two
    strided slices build the same view in ~5x the time)."""
    st = x.strides
    nd = len(k)
    return as_strided(x, x.shape[:2] + tuple(out) + tuple(k),
                      st[:2] + tuple(st[2 + i] * stride[i] for i in range(nd)) + tuple(st[2 + i] * dilation[i] for i in range(nd)),
                      writeable=False)


_BAND = 1 << 21  # elements of im2col columns per band (8 MB of float32: still in L3 when the matmul reads it)


def _conv2d_bands(x, w, stride, dilation, out_hw):
    """2-D conv (groups 1, x already padded) as im2col + one matmul per band of output rows: a band's
    columns are still in cache when the matmul reads them, where the columns of a whole 80x80 image
    (30 MB at 128 channels) are not (single 3x3 convs 10-28% faster; YOLOv8s 3-5% overall)."""
    n, c = x.shape[:2]
    o, (kh, kw), (ho, wo) = w.shape[0], w.shape[2:], out_hw
    win = _windows(x, (kh, kw), stride, dilation, (ho, wo)).transpose(0, 1, 4, 5, 2, 3)  # (N, C, kh, kw, Ho, Wo) view
    ck = c * kh * kw
    wm = w.reshape(o, ck)                                                  # (O, C*kh*kw)
    rows = max(1, min(ho, _BAND // (ck * wo)))
    y = np.empty((n, o, ho, wo), np.result_type(x, w))
    buf = np.empty(ck * rows * wo, x.dtype)
    for b in range(n):
        for r in range(0, ho, rows):
            m = min(rows, ho - r)
            cols = buf[:ck * m * wo].reshape(c, kh, kw, m, wo)
            np.copyto(cols, win[b, :, :, :, r:r + m])
            band = as_strided(y[b, :, r:], shape=(o, m * wo), strides=(y.strides[1], y.strides[3]))  # rows r:r+m
            mm(wm, cols.reshape(ck, m * wo), out=band)
    return y
