"""The CPU backend's image kernel: the registry's `letterbox` op (a detector's input from an 8-bit image) in
cpu_kernels/image.c, natively on the kernels' threads and in the page's wasm module (on the calling thread: the
image is in Pyodide's memory, not the pool's). The composed reference is ember.data.resize.letterbox_composed;
every output is an exact integer over 255, so both give the same bits."""
from __future__ import annotations

import ctypes

import numpy as np

from . import cpu_matmul
from .cpu_float_kernels import _addr

_F32, _I32 = np.dtype(np.float32), np.dtype(np.int32)
_loaded: list = []


def _lib():
    """image.c's entry point in the loaded kernels (native, or the page's side module), or None."""
    if not _loaded:
        k = cpu_matmul.wasm_kernels() if cpu_matmul.NO_BLAS else cpu_matmul.native_kernels()
        fn = None if k is None else getattr(k.lib, "ember_letterbox", None)
        if fn is not None and not cpu_matmul.NO_BLAS:
            fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
        _loaded.append(fn)
    return _loaded[0]


def choose_letterbox(be, tune, img_shape):
    """image.c where compiled kernels run here (else the caller composes)."""
    return _lib() is not None


def describe(be=None) -> str:
    return "cpu_kernels/image.c" if _lib() is not None else "numpy (ember.data.resize)"


def letterbox(be, img, tables, new_h, new_w, out_h, out_w, top, left, pad):
    """img (H, W, C) uint8 (unit channel stride, rows any stride), tables: (x0, x1, a0, a1, y0, y1, b0, b1) int32
    as ember.data.resize.linear_tables gives them, or None for an exact 2x downscale (INTER_AREA) -> float32
    (1, C, out_h, out_w)."""
    h, w, c = img.shape
    if img.strides[2] != 1 or img.strides[1] != c or img.strides[0] < w * c:
        img = np.ascontiguousarray(img)
    area = tables is None
    t = [np.ascontiguousarray(a, _I32) for a in (tables or [np.zeros(1, _I32)] * 8)]
    out = np.empty((1, c, out_h, out_w), _F32)
    params = np.array([_addr(img), h, w, c, img.strides[0], *(_addr(a) for a in t), new_h, new_w, _addr(out), out_h,
                       out_w, top, left, int(pad), int(area)], np.intp)
    if _lib()(_addr(params)) != 0:
        raise ValueError(f"ember: letterbox kernel: parameters it does not take (image {img.shape}, resized to "
                         f"{(new_h, new_w)} at {(top, left)} on {(out_h, out_w)})")
    return out
