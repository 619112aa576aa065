"""OpenCV's cv2.resize on uint8 images reproduced bit for bit, and a detector's letterboxed input made from it.

INTER_LINEAR as OpenCV computes it (imgproc/resize.cpp, x86 SIMD path): source coordinate
(dst + 0.5) * (1 / (dst_size / src_size)) - 0.5 in double, rounded to float32; 11-bit fixed-point weights
rint(w * 2048); columns clamp the weight at the borders, rows only clamp the index; the vertical pass is
((row0 >> 4) * b0 >> 16) + ((row1 >> 4) * b1 >> 16), then (+2) >> 2. An exact 2x downscale takes OpenCV's
INTER_AREA fast path instead: the rounded mean of each 2x2 block.

`letterbox_input` runs the registry's `letterbox` op: the CPU backend's image.c where compiled kernels run (natively
and in the page), else `letterbox_composed` here; the same bits either way (integers, then one division).
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..device import CPU

_COEF_SCALE = 2048  # OpenCV INTER_RESIZE_COEF_SCALE (11 fractional bits)


def _weights(n_in, n_out, clamp_weight):
    """Source indices (i0, i1) and fixed-point weights (w0, w1) per output position, int32."""
    f = ((np.arange(n_out) + 0.5) * (1.0 / (n_out / n_in)) - 0.5).astype(np.float32)
    i = np.floor(f).astype(np.int64)
    f = f - i.astype(np.float32)
    if clamp_weight:  # columns: outside the image the weight collapses onto the edge pixel
        lo, hi = i < 0, i >= n_in - 1
        f[lo | hi] = 0
        i[lo], i[hi] = 0, n_in - 1
    w1 = np.rint(f * np.float32(_COEF_SCALE)).astype(np.int32)
    w0 = np.rint((np.float32(1) - f) * np.float32(_COEF_SCALE)).astype(np.int32)
    return np.clip(i, 0, n_in - 1).astype(np.int32), np.clip(i + 1, 0, n_in - 1).astype(np.int32), w0, w1


def linear_tables(h, w, new_h, new_w):
    """(x0, x1, a0, a1, y0, y1, b0, b1) int32 of an (h, w) -> (new_h, new_w) INTER_LINEAR resize, or None where
    OpenCV takes INTER_AREA's exact 2x path."""
    if 2 * new_h == h and 2 * new_w == w:
        return None
    return _weights(w, new_w, True) + _weights(h, new_h, False)


def _resize(img, tables, new_h, new_w):
    """(H, W, C) uint8 -> (new_h, new_w, C) uint8 through linear_tables' tables (None: INTER_AREA 2x)."""
    if tables is None:
        x = img.astype(np.int32)
        return ((x[0::2, 0::2] + x[0::2, 1::2] + x[1::2, 0::2] + x[1::2, 1::2] + 2) >> 2).astype(np.uint8)
    x0, x1, a0, a1, y0, y1, b0, b1 = tables
    x0, x1 = x0.astype(np.intp), x1.astype(np.intp)  # (np.take wants the platform's index type: int32 in wasm)
    # the horizontal pass on the source rows the vertical one reads, gathered as bytes (np.take along an axis, in
    # place products in int32: every value stays below 2^31), 4-5x faster than fancy indexing on int64 weights
    rows = np.unique(np.concatenate([y0, y1]))
    src = img if rows.size == img.shape[0] else img[rows]                       # (rows, W, C) uint8
    hr = np.take(src, x0, axis=1).astype(np.int32)                              # (rows, new_w, C)
    hr *= a0[None, :, None]
    t = np.take(src, x1, axis=1).astype(np.int32)
    t *= a1[None, :, None]
    hr += t
    hr >>= 4
    pos = np.searchsorted(rows, np.stack([y0, y1])).astype(np.intp)
    v = np.take(hr, pos[0], axis=0)                                             # (new_h, new_w, C)
    v *= b0[:, None, None]
    v >>= 16
    t = np.take(hr, pos[1], axis=0)
    t *= b1[:, None, None]
    t >>= 16
    v += t
    v += 2
    v >>= 2
    return np.clip(v, 0, 255, out=v).astype(np.uint8)


def resize_linear(img: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    """cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR) for (H, W, C) uint8, bit-exact."""
    h, w = img.shape[:2]
    if (h, w) == (new_h, new_w):
        return img.copy()
    return _resize(img, linear_tables(h, w, new_h, new_w), new_h, new_w)


def letterbox_uint8(img, tables, new_h, new_w, out_h, out_w, top, left, pad):
    """img (H, W, C) uint8 resized to (new_h, new_w) through `tables` (linear_tables'), placed at (top, left) on an
    (out_h, out_w) canvas of `pad` -> (out_h, out_w, C) uint8."""
    boxed = np.full((out_h, out_w, img.shape[2]), pad, np.uint8)
    same = img.shape[:2] == (new_h, new_w)
    boxed[top:top + new_h, left:left + new_w] = img if same else _resize(img, tables, new_h, new_w)
    return boxed


def letterbox_composed(img, tables, new_h, new_w, out_h, out_w, top, left, pad):
    """The `letterbox` op's reference: letterbox_uint8's canvas -> float32 (1, C, out_h, out_w), each value over
    255."""
    boxed = letterbox_uint8(img, tables, new_h, new_w, out_h, out_w, top, left, pad)
    return boxed.transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255)


def letterbox_input(img: np.ndarray, new_h: int, new_w: int, out_h: int, out_w: int, top: int, left: int,
                    pad: int) -> np.ndarray:
    """(H, W, C) uint8 -> float32 (1, C, out_h, out_w): the image resized as cv2.resize INTER_LINEAR (INTER_AREA
    for an exact 2x downscale; unresized where it is already (new_h, new_w)), placed at (top, left) on a canvas
    of `pad`, over 255."""
    # (a same-size resize's tables copy every pixel exactly: weights 2048 and 0)
    tables = linear_tables(*img.shape[:2], new_h, new_w)
    be = CPU.backend
    if kernels.chooses("letterbox", be, img.shape):
        return kernels.bound("letterbox", be)(img, tables, new_h, new_w, out_h, out_w, top, left, pad)
    return letterbox_composed(img, tables, new_h, new_w, out_h, out_w, top, left, pad)
