"""Transforms are plain callables (sample -> sample); these are the few every image pipeline needs.
`Compose([a, b])(x) == b(a(x))`. They work on numpy arrays, so a loader's workers can run them."""
from __future__ import annotations

import numpy as np


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self):
        return f"Compose({self.transforms})"


class ToFloat:
    """uint8 pixels (or any numbers) -> float32, divided by `scale` (255 for 8-bit images, 16 for digits)."""

    def __init__(self, scale: float = 255.0):
        self.scale = float(scale)

    def __call__(self, x):
        return np.asarray(x, np.float32) / np.float32(self.scale)


class Normalize:
    """(x - mean) / std per channel, channels first (C, ...), as torchvision's Normalize."""

    def __init__(self, mean, std):
        self.mean = np.asarray(mean, np.float32)
        self.std = np.asarray(std, np.float32)
        if np.any(self.std == 0):
            raise ValueError(f"ember: Normalize std has a zero: {std}")

    def __call__(self, x):
        x = np.asarray(x, np.float32)
        shape = (-1,) + (1,) * (x.ndim - 1)
        return (x - self.mean.reshape(shape)) / self.std.reshape(shape)


class Reshape:
    def __init__(self, *shape):
        self.shape = shape

    def __call__(self, x):
        return np.asarray(x).reshape(self.shape)


class HWCToCHW:
    """(H, W, C) image -> (C, H, W); a (H, W) image gains one channel."""

    def __call__(self, x):
        x = np.asarray(x)
        return x[None] if x.ndim == 2 else np.ascontiguousarray(x.transpose(2, 0, 1))


class Field:
    """Apply `fn` to one field of a tuple sample: `Field(0, ToFloat())` transforms the image, not the label."""

    def __init__(self, index: int, fn):
        self.index, self.fn = index, fn

    def __call__(self, sample):
        s = list(sample)
        s[self.index] = self.fn(s[self.index])
        return tuple(s)
