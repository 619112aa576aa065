"""Images in: decoding (models/common/image.py), ultralytics' letterbox reproduced bit for bit in numpy,
and the mapping of boxes back to the original image.

The letterbox resizes with OpenCV's cv2.resize(INTER_LINEAR) on uint8, whose result is what the
reference feeds its model, so the arithmetic here is OpenCV's (imgproc/resize.cpp, x86 SIMD path):
source coordinate (dst + 0.5) * (1 / (dst_size / src_size)) - 0.5 in double, rounded to float32;
11-bit fixed-point weights rint(w * 2048); columns clamp the weight at the borders, rows only clamp the
index; the vertical pass is ((row0 >> 4) * b0 >> 16) + ((row1 >> 4) * b1 >> 16), then (+2) >> 2.
An exact 2x downscale takes OpenCV's INTER_AREA fast path instead: the rounded mean of each 2x2 block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common.image import ImageError, as_rgb, load_image  # noqa: F401  (this module's callers use them)

PAD_VALUE = 114  # ultralytics' letterbox grey
_COEF_SCALE = 2048  # OpenCV INTER_RESIZE_COEF_SCALE (11 fractional bits)


# ---------------------------------------------------------------- cv2.resize INTER_LINEAR, uint8

def _weights(n_in, n_out, clamp_weight):
    """Source indices (i0, i1) and fixed-point weights (w0, w1) per output position."""
    f = ((np.arange(n_out) + 0.5) * (1.0 / (n_out / n_in)) - 0.5).astype(np.float32)
    i = np.floor(f).astype(np.int64)
    f = f - i.astype(np.float32)
    if clamp_weight:  # columns: outside the image the weight collapses onto the edge pixel
        lo, hi = i < 0, i >= n_in - 1
        f[lo | hi] = 0
        i[lo], i[hi] = 0, n_in - 1
    w1 = np.rint(f * np.float32(_COEF_SCALE)).astype(np.int64)
    w0 = np.rint((np.float32(1) - f) * np.float32(_COEF_SCALE)).astype(np.int64)
    return np.clip(i, 0, n_in - 1), np.clip(i + 1, 0, n_in - 1), w0, w1


def resize_linear(img: np.ndarray, new_h: int, new_w: int) -> np.ndarray:
    """cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR) for (H, W, C) uint8, bit-exact."""
    h, w = img.shape[:2]
    if (h, w) == (new_h, new_w):
        return img.copy()
    if 2 * new_h == h and 2 * new_w == w:
        x = img.astype(np.int32)
        return ((x[0::2, 0::2] + x[0::2, 1::2] + x[1::2, 0::2] + x[1::2, 1::2] + 2) >> 2).astype(np.uint8)
    x0, x1, a0, a1 = _weights(w, new_w, True)
    y0, y1, b0, b1 = _weights(h, new_h, False)
    x0, x1 = x0.astype(np.intp), x1.astype(np.intp)  # (np.take wants the platform's index type: int32 in wasm)
    # the horizontal pass on the source rows the vertical one reads, gathered as bytes (np.take along an axis, in
    # place products in int32: every value stays below 2^31), 4-5x faster than fancy indexing on int64 weights
    rows = np.unique(np.concatenate([y0, y1]))
    src = img if rows.size == h else img[rows]                                  # (rows, W, C) uint8
    hr = np.take(src, x0, axis=1).astype(np.int32)                              # (rows, new_w, C)
    hr *= a0.astype(np.int32)[None, :, None]
    t = np.take(src, x1, axis=1).astype(np.int32)
    t *= a1.astype(np.int32)[None, :, None]
    hr += t
    hr >>= 4
    pos = np.searchsorted(rows, np.stack([y0, y1])).astype(np.intp)
    v = np.take(hr, pos[0], axis=0)                                             # (new_h, new_w, C)
    v *= b0.astype(np.int32)[:, None, None]
    v >>= 16
    t = np.take(hr, pos[1], axis=0)
    t *= b1.astype(np.int32)[:, None, None]
    t >>= 16
    v += t
    v += 2
    v >>= 2
    return np.clip(v, 0, 255, out=v).astype(np.uint8)


# ---------------------------------------------------------------- letterbox

@dataclass
class Letterbox:
    """How an (h0, w0) image was placed in the model input: resized to (new_h, new_w), then `left`/`top`
    pixels of padding. Ultralytics maps back with per-axis gains new/old (ops.scale_boxes), not the one
    ratio the resize used: the two differ by the rounding of each side."""
    orig_shape: tuple
    new_shape: tuple  # (new_h, new_w) of the resized image, padding excluded
    left: int
    top: int

    @property
    def gain(self) -> tuple[float, float]:
        """(gain_x, gain_y): model-input pixels per original pixel."""
        return self.new_shape[1] / self.orig_shape[1], self.new_shape[0] / self.orig_shape[0]

    def to_original(self, xy: np.ndarray) -> np.ndarray:
        """(..., 2k) x, y pairs (xyxy boxes, keypoints) in model-input pixels -> original-image pixels,
        clipped to the image."""
        (gx, gy), (h, w) = self.gain, self.orig_shape
        b = np.array(xy, dtype=np.float64 if xy.dtype == np.float64 else np.float32)
        b[..., 0::2] = ((b[..., 0::2] - self.left) / gx).clip(0, w)
        b[..., 1::2] = ((b[..., 1::2] - self.top) / gy).clip(0, h)
        return b


def input_shape(h: int, w: int, size: int = 640, square: bool = False, stride: int = 32) -> tuple[int, int]:
    """The model input (H, W) for an (h, w) image: `size` on the long side, the short side padded only up
    to the next multiple of `stride` (ultralytics predict: LetterBox(auto=True)); square: (size, size)."""
    if square:
        return size, size
    r = min(size / h, size / w)
    nw, nh = max(round(w * r), 1), max(round(h * r), 1)
    return nh + (size - nh) % stride, nw + (size - nw) % stride


def letterbox(img: np.ndarray, size: int = 640, square: bool = False, stride: int = 32) -> tuple[np.ndarray, Letterbox]:
    """ultralytics LetterBox((size, size), auto=not square, stride): keep the aspect ratio, centre, pad
    with 114. (H, W, 3) uint8 -> (H', W', 3) uint8 (see input_shape) and the placement."""
    h, w = img.shape[:2]
    r = min(size / h, size / w)
    nw, nh = max(round(w * r), 1), max(round(h * r), 1)
    out_h, out_w = input_shape(h, w, size, square, stride)
    dw, dh = (out_w - nw) / 2, (out_h - nh) / 2
    top, left = round(dh - 0.1), round(dw - 0.1)
    out = np.full((out_h, out_w, img.shape[2]), PAD_VALUE, np.uint8)
    out[top:top + nh, left:left + nw] = resize_linear(img, nh, nw)
    return out, Letterbox((h, w), (nh, nw), left, top)


def preprocess(img: np.ndarray, size: int = 640, square: bool = False,
               stride: int = 32) -> tuple[np.ndarray, Letterbox]:
    """RGB uint8 image -> (1, 3, H', W') float32 in [0, 1] (the model input) and the placement."""
    boxed, lb = letterbox(as_rgb(img), size, square, stride)
    x = boxed.transpose(2, 0, 1)[None].astype(np.float32) / np.float32(255)   # (1, 3, H', W')
    return x, lb
