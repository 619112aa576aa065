"""CIFAR-10 / CIFAR-100 binary batches (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version"):
fixed-size records, CIFAR-10 `<1 label byte><3072 pixel bytes>`, CIFAR-100 `<coarse><fine><3072 bytes>`,
pixels as 1024 red, 1024 green, 1024 blue bytes of a 32x32 image in row-major order."""
from __future__ import annotations

import os

import numpy as np

from ..errors import FormatError
from .dataset import TensorDataset
from .source import read_source

PIXELS = 3 * 32 * 32


def read_cifar(src, variant: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file (path or bytes) -> images (N, 3, 32, 32) uint8 and labels (N,) int64
    (CIFAR-100: the fine labels; `read_cifar100_coarse` gives the coarse ones)."""
    rec = _records(src, variant)
    return rec[:, -PIXELS:].reshape(-1, 3, 32, 32).copy(), rec[:, 1 if variant == 100 else 0].astype(np.int64)


def read_cifar100_coarse(src) -> np.ndarray:
    return _records(src, 100)[:, 0].astype(np.int64)


def _records(src, variant):
    if variant not in (10, 100):
        raise ValueError(f"ember: CIFAR variant must be 10 or 100, got {variant!r}")
    data, name = read_source(src, decompress=False)
    size = PIXELS + (1 if variant == 10 else 2)
    if not data or len(data) % size:
        raise FormatError(f"ember: {name}: {len(data)} bytes is not a whole number of CIFAR-{variant} records "
                          f"of {size} bytes")
    rec = np.frombuffer(data, np.uint8).reshape(-1, size)
    top = 10 if variant == 10 else 100
    labels = rec[:, 0 if variant == 10 else 1]
    if labels.max() >= top or (variant == 100 and rec[:, 0].max() >= 20):
        raise FormatError(f"ember: {name}: a label byte is past CIFAR-{variant}'s {top} classes "
                          f"(is this the other variant?)")
    return rec


class CIFARDataset(TensorDataset):
    """Batch files (one path or a list) -> `ds[i]` = (image (3, 32, 32) uint8, or transform(image), label)."""

    def __init__(self, files, variant: int = 10, transform=None):
        parts = [read_cifar(f, variant) for f in ([files] if isinstance(files, (str, os.PathLike)) else files)]
        super().__init__(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        self.transform = transform

    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return (self.transform(x) if self.transform else x), y
