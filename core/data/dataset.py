"""Datasets: map-style (`len` + `__getitem__`) and streaming (`__iter__`), with torch.utils.data's names
and semantics, plus the wrappers that cut and join them (`Subset`, `ConcatDataset`, `random_split`)."""
from __future__ import annotations

import bisect
import math

import numpy as np

from .sampling import permutation


class Dataset:
    """Map-style: `ds[i]` for 0 <= i < len(ds). Subclasses define `__getitem__` and `__len__`."""

    def __getitem__(self, index):
        raise NotImplementedError(f"ember: {type(self).__name__} has no __getitem__")

    def __len__(self):
        raise NotImplementedError(f"ember: {type(self).__name__} has no __len__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset:
    """Streaming: `iter(ds)` yields samples (a file read line by line, a token stream); no random access,
    so a loader over it cannot shuffle."""

    def __iter__(self):
        raise NotImplementedError(f"ember: {type(self).__name__} has no __iter__")


class TensorDataset(Dataset):
    """Rows of equally long arrays (numpy arrays or Tensors): `ds[i]` is `(a[i], b[i], ...)`."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("ember: TensorDataset needs at least one array")
        n = {len(a) for a in arrays}
        if len(n) != 1:
            raise ValueError(f"ember: TensorDataset arrays differ in length: {[len(a) for a in arrays]}")
        self.arrays = arrays

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


class MapDataset(Dataset):
    """`transform(ds[i])`: a dataset with a per-sample transform (a plain callable, see transforms.py)."""

    def __init__(self, dataset, transform):
        self.dataset, self.transform = dataset, transform

    def __getitem__(self, index):
        return self.transform(self.dataset[index])

    def __len__(self):
        return len(self.dataset)


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, [int(i) for i in indices]

    def __getitem__(self, index):
        if isinstance(index, (list, tuple, np.ndarray)):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ember: ConcatDataset needs at least one dataset")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ember: ConcatDataset does not take an IterableDataset (it has no length)")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise IndexError(f"ember: index {index} out of range for a dataset of {len(self)}")
            index += len(self)
        d = bisect.bisect_right(self.cumulative_sizes, index)
        if d >= len(self.datasets):
            raise IndexError(f"ember: index {index} out of range for a dataset of {len(self)}")
        start = 0 if d == 0 else int(self.cumulative_sizes[d - 1])
        return self.datasets[d][index - start]


def _split_lengths(lengths, n):
    """torch's rule: fractions summing to 1 become counts (floor), the remainder handed out round-robin."""
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1 and all(0 <= f <= 1 for f in lengths):
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        return counts
    if sum(lengths) != n or any(int(x) != x or x < 0 for x in lengths):
        raise ValueError(f"ember: random_split lengths {lengths} must be counts summing to {n} or fractions summing to 1")
    return [int(x) for x in lengths]


def random_split(dataset, lengths, seed: int = 0):
    """Disjoint random `Subset`s of the given sizes (counts, or fractions of len(dataset)); the same seed
    gives the same split in CPython and in Pyodide (see sampling.py)."""
    counts = _split_lengths(lengths, len(dataset))
    order = permutation(len(dataset), seed)
    out, at = [], 0
    for c in counts:
        out.append(Subset(dataset, order[at:at + c]))
        at += c
    return out
