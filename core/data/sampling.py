"""Seeded index orders, the same on every platform.

numpy promises stable streams only for the legacy `RandomState` (Generator streams may change between
releases, and Pyodide ships an older numpy than CPython here), so every shuffle draws from a
`RandomState` seeded with (seed, epoch): epoch e's order depends on nothing but the seed and e, which is
what lets a resumed run (or a page that paused) pick up in the middle of an epoch.
"""
from __future__ import annotations

import numpy as np


def permutation(n: int, seed: int, epoch: int = 0) -> np.ndarray:
    """A permutation of range(n) (int64) determined by (seed, epoch) alone."""
    if seed is None or int(seed) < 0:
        raise ValueError(f"ember: a shuffle seed must be a non-negative integer, got {seed!r}")
    rs = np.random.RandomState([int(seed) & 0xFFFFFFFF, int(epoch) & 0xFFFFFFFF])
    return rs.permutation(n).astype(np.int64)


class SequentialSampler:
    def __init__(self, n: int):
        self.n = n

    def order(self, epoch: int = 0) -> np.ndarray:
        return np.arange(self.n, dtype=np.int64)

    def __len__(self):
        return self.n


class RandomSampler(SequentialSampler):
    """A fresh permutation per epoch, from (seed, epoch)."""

    def __init__(self, n: int, seed: int = 0):
        super().__init__(n)
        self.seed = seed

    def order(self, epoch: int = 0) -> np.ndarray:
        return permutation(self.n, self.seed, epoch)
