"""Turn a list of samples into one batch, field by field, as torch's `default_collate` does: arrays and
Tensors are stacked along a new first axis, Python ints become int64, floats float64 and bools bool,
dicts and tuples are collated per key / position, strings and bytes stay a list."""
from __future__ import annotations

import numbers

import numpy as np

from ..autograd import TensorBase


def numpy_collate(batch):
    """The collate on numpy arrays (what a worker process hands back: it pickles cheaply)."""
    first = batch[0]
    if isinstance(first, TensorBase):
        return np.stack([np.asarray(b.numpy()) for b in batch])
    if isinstance(first, np.ndarray):
        shapes = {b.shape for b in batch}
        if len(shapes) > 1:
            raise ValueError(f"ember: collate cannot stack samples of different shapes {sorted(shapes)}; "
                             f"pad them or pass a collate_fn")
        return np.stack(batch)
    if isinstance(first, np.generic):
        return np.array(batch, dtype=first.dtype)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, bool):
        return np.array(batch, dtype=np.bool_)
    if isinstance(first, numbers.Integral):
        return np.array(batch, dtype=np.int64)
    if isinstance(first, numbers.Real):
        return np.array(batch, dtype=np.float64)
    if isinstance(first, dict):
        return {k: numpy_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # namedtuple
        return type(first)(*(numpy_collate(list(f)) for f in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if len({len(b) for b in batch}) != 1:
            raise ValueError("ember: collate got samples with different numbers of fields")
        return [numpy_collate(list(f)) for f in zip(*batch)]
    raise TypeError(f"ember: default_collate cannot batch {type(first).__name__}; pass a collate_fn")


def to_tensors(batch, device=None):
    """numpy arrays inside a collated batch -> ember Tensors (on `device`), structure kept."""
    from ..tensor import tensor
    if isinstance(batch, (np.ndarray, np.generic)):
        return tensor(np.asarray(batch), device=device)
    if isinstance(batch, TensorBase):
        return batch if device is None else batch.to(device)
    if isinstance(batch, dict):
        return {k: to_tensors(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_tensors(v, device) for v in batch))
    if isinstance(batch, (list, tuple)) and batch and not isinstance(batch[0], (str, bytes)):
        return [to_tensors(v, device) for v in batch]
    return batch


def default_collate(batch):
    """Samples -> one batch of ember Tensors (see the module docstring)."""
    return to_tensors(numpy_collate(batch))
