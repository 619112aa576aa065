"""Images in: decoding (models/common/image.py), ultralytics' letterbox reproduced bit for bit, and the mapping of
boxes back to the original image.

The letterbox resizes with OpenCV's cv2.resize(INTER_LINEAR) on uint8, whose result is what the reference feeds
its model: ember.data.resize computes OpenCV's arithmetic, and the model input in one pass (the registry's
`letterbox` op: image.c where compiled kernels run, natively and in the page).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.data.resize import (  # noqa: F401  (resize_linear: this module's callers use it)
    letterbox_input,
    letterbox_uint8,
    linear_tables,
    resize_linear,
)

from ..common.image import ImageError, as_rgb, load_image  # noqa: F401  (this module's callers use them)

PAD_VALUE = 114  # ultralytics' letterbox grey


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


def _placement(h, w, size, square, stride):
    """(new_h, new_w, out_h, out_w, top, left) of ultralytics LetterBox((size, size), auto=not square, stride)."""
    r = min(size / h, size / w)
    nw, nh = max(round(w * r), 1), max(round(h * r), 1)
    out_h, out_w = input_shape(h, w, size, square, stride)
    dw, dh = (out_w - nw) / 2, (out_h - nh) / 2
    return nh, nw, out_h, out_w, round(dh - 0.1), round(dw - 0.1)


def letterbox(img: np.ndarray, size: int = 640, square: bool = False, stride: int = 32) -> tuple[np.ndarray, Letterbox]:
    """ultralytics LetterBox((size, size), auto=not square, stride): keep the aspect ratio, centre, pad
    with 114. (H, W, 3) uint8 -> (H', W', 3) uint8 (see input_shape) and the placement."""
    h, w = img.shape[:2]
    nh, nw, out_h, out_w, top, left = _placement(h, w, size, square, stride)
    out = letterbox_uint8(img, linear_tables(h, w, nh, nw), nh, nw, out_h, out_w, top, left, PAD_VALUE)
    return out, Letterbox((h, w), (nh, nw), left, top)


def preprocess(img: np.ndarray, size: int = 640, square: bool = False,
               stride: int = 32) -> tuple[np.ndarray, Letterbox]:
    """RGB uint8 image -> (1, 3, H', W') float32 in [0, 1] (the model input: letterbox's image over 255, made in
    one pass) and the placement."""
    img = as_rgb(img)
    h, w = img.shape[:2]
    nh, nw, out_h, out_w, top, left = _placement(h, w, size, square, stride)
    x = letterbox_input(img, nh, nw, out_h, out_w, top, left, PAD_VALUE)           # (1, 3, H', W')
    return x, Letterbox((h, w), (nh, nw), left, top)
