"""DataLoader: batches from a dataset, torch.utils.data's semantics (batch_size, shuffle, drop_last,
sampler, collate_fn), seeded shuffling that is the same in CPython and Pyodide, and optional worker
processes natively.

In the page (Pyodide: no threads, no processes) and by default (num_workers=0) every batch is read in the
calling thread. With num_workers > 0 a process pool reads and collates batches ahead, in order; the
workers hand back numpy arrays (they pickle cheaply) and the Tensors are made here.
"""
from __future__ import annotations

import sys

from .collate import default_collate, numpy_collate, to_tensors  # noqa: F401 (re-exported)
from .dataset import IterableDataset
from .sampling import RandomSampler, SequentialSampler

# a worker process's copy of the loader's dataset and collate (set once per process by _init_worker)
_WORKER: dict = {}


def _init_worker(dataset, collate):
    _WORKER["dataset"], _WORKER["collate"] = dataset, collate


def _load_batch(indices):
    ds = _WORKER["dataset"]
    return _WORKER["collate"]([ds[i] for i in indices])


class DataLoader:
    """Iterate a dataset in batches.

    dataset: map-style (len + getitem) or an IterableDataset. batch_size: samples per batch (None: one
    sample at a time, uncollated, as torch). shuffle: a new order each epoch, drawn from (seed, epoch);
    `set_epoch(e)` picks the epoch (iterating advances it by itself). sampler: an object with
    `order(epoch)` or any iterable of indices, instead of shuffle. drop_last: drop a final short batch.
    collate_fn: samples -> batch (default: stack fields into Tensors). device: where the Tensors go.
    num_workers: worker processes (native only; 0 reads in this thread).
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, drop_last=False, collate_fn=None,
                 num_workers=0, seed=0, device=None, prefetch_factor=2):
        if batch_size is not None and (int(batch_size) != batch_size or batch_size < 1):
            raise ValueError(f"ember: batch_size must be a positive integer or None, got {batch_size!r}")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable and (shuffle or sampler is not None):
            raise ValueError("ember: an IterableDataset has no random access: the loader cannot shuffle it "
                             "or use a sampler (shuffle inside the dataset instead)")
        if shuffle and sampler is not None:
            raise ValueError("ember: pass shuffle=True or a sampler, not both")
        if num_workers and (sys.platform == "emscripten" or self.iterable):
            raise ValueError("ember: worker processes need a map-style dataset and a native Python "
                             "(the page has no processes); use num_workers=0")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.collate_fn, self.num_workers, self.device = collate_fn, int(num_workers), device
        self.prefetch_factor = max(1, int(prefetch_factor))
        self.epoch = 0
        if sampler is None and not self.iterable:
            sampler = RandomSampler(len(dataset), seed) if shuffle else SequentialSampler(len(dataset))
        self.sampler = sampler

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _order(self):
        s = self.sampler
        return list(s.order(self.epoch)) if hasattr(s, "order") else list(iter(s))

    def batch_indices(self, epoch: int | None = None):
        """The index lists of one epoch's batches (map-style datasets)."""
        if epoch is not None:
            self.epoch = int(epoch)
        order = [int(i) for i in self._order()]
        if self.batch_size is None:
            return [[i] for i in order]
        b = self.batch_size
        out = [order[i:i + b] for i in range(0, len(order), b)]
        if out and self.drop_last and len(out[-1]) < b:
            out.pop()
        return out

    def __len__(self):
        if self.iterable:
            raise TypeError("ember: a loader over an IterableDataset has no length")
        n = len(self.sampler)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _collate(self, samples):
        if self.collate_fn is not None:
            return self.collate_fn(samples[0] if self.batch_size is None else samples)
        if self.batch_size is None:  # one sample as it is, its arrays made Tensors (torch's default_convert)
            return to_tensors(samples[0], self.device)
        return to_tensors(numpy_collate(samples), self.device)

    def __iter__(self):
        return self.iter_from(0)

    def iter_from(self, start_batch: int = 0):
        """This epoch's batches from batch `start_batch` on (a resumed run skips what it has seen without
        reading it); the epoch counter moves on when the epoch ends."""
        if self.iterable:
            yield from self._iter_stream()
            return
        batches = self.batch_indices()[start_batch:]
        if self.num_workers:
            yield from self._iter_workers(batches)
        else:
            ds = self.dataset
            for idx in batches:
                yield self._collate([ds[i] for i in idx])
        self.epoch += 1

    def _iter_stream(self):
        it, b = iter(self.dataset), self.batch_size
        if b is None:
            for s in it:
                yield self._collate([s])
            return
        buf = []
        for s in it:
            buf.append(s)
            if len(buf) == b:
                yield self._collate(buf)
                buf = []
        if buf and not self.drop_last:
            yield self._collate(buf)

    def _iter_workers(self, batches):
        import multiprocessing as mp
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        collate = self.collate_fn or numpy_collate
        with mp.get_context(method).Pool(self.num_workers, _init_worker, (self.dataset, collate)) as pool:
            chunk = max(1, self.prefetch_factor // 2)
            for out in pool.imap(_load_batch, batches, chunksize=chunk):
                yield out if self.collate_fn is not None else to_tensors(out, self.device)


__all__ = ["DataLoader", "default_collate"]
