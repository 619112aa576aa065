"""CLIP's image processor in numpy (transformers' CLIPImageProcessor): resize the shortest side to `size`
with Pillow's bicubic filter (its separable 8-bit fixed-point resampler, reproduced here: a = -0.5 cubic,
support widened by the scale when shrinking, 22-bit coefficients, horizontal then vertical pass, each
rounded to uint8), center crop, rescale by 1/255, normalize with OpenAI's mean and std."""
from __future__ import annotations

import numpy as np

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], np.float32)
_PRECISION = 22  # Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2


def _cubic(x):
    a, x = -0.5, np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1, np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _coefficients(n_in: int, n_out: int):
    """(n_out, taps) source indices and fixed-point weights, as Pillow's precompute_coeffs + normalize."""
    scale = n_in / n_out
    fs = max(scale, 1.0)
    support = 2.0 * fs
    taps = int(np.ceil(support)) * 2 + 1
    idx = np.zeros((n_out, taps), np.int64)
    w = np.zeros((n_out, taps), np.float64)
    for o in range(n_out):
        center = (o + 0.5) * scale
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), n_in)
        k = _cubic((np.arange(lo, hi) - center + 0.5) / fs)
        k = k / k.sum() if k.sum() else k
        idx[o, :hi - lo], w[o, :hi - lo] = np.arange(lo, hi), k
    fixed = np.where(w < 0, np.trunc(w * (1 << _PRECISION) - 0.5), np.trunc(w * (1 << _PRECISION) + 0.5))
    return idx, fixed.astype(np.int64)


def _pass(img: np.ndarray, n_out: int, axis: int) -> np.ndarray:
    idx, k = _coefficients(img.shape[axis], n_out)
    x = np.moveaxis(img.astype(np.int64), axis, 0)                          # (n_in, other, C)
    acc = (x[idx] * k[:, :, None, None]).sum(1) + (1 << (_PRECISION - 1))  # (n_out, other, C)
    return np.moveaxis(np.clip(acc >> _PRECISION, 0, 255).astype(np.uint8), 0, axis)


def resize_bicubic(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Image.resize((w, h), Image.BICUBIC) for an (H, W, C) uint8 array."""
    if img.shape[1] != w:
        img = _pass(img, w, 1)
    if img.shape[0] != h:
        img = _pass(img, h, 0)
    return img


def preprocess(img: np.ndarray, size: int = 224, crop: int = 224, mean=MEAN, std=STD) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (3, crop, crop) float32 pixel_values."""
    h, w = img.shape[:2]
    short, long = (h, w) if h <= w else (w, h)
    new_long = int(size * long / short)
    nh, nw = (size, new_long) if h <= w else (new_long, size)
    x = resize_bicubic(img, nh, nw)
    top, left = int((nh - crop) / 2.0), int((nw - crop) / 2.0)
    x = x[max(top, 0):max(top, 0) + crop, max(left, 0):max(left, 0) + crop]
    x = (x.astype(np.float32) * np.float32(1 / 255) - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1))
