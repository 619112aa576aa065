"""torch.nn.EmbeddingBag: the sum, mean or max of each bag's embeddings without materialising a padded batch."""
from __future__ import annotations

import numpy as np

from .errors import LayerError
from .module import Module, Parameter
from . import init
from ..ops_movement import stack
from ..tensor import empty, tensor, zeros

_MODES = ("sum", "mean", "max")


def embedding_bag(input, weight, offsets=None, mode="mean", per_sample_weights=None, include_last_offset=False,
                  padding_idx=None, max_norm=None):
    """input (B, n) bags of equal size, or 1-D indices split into bags at `offsets` (B,) (B + 1 with
    include_last_offset); padding_idx entries are left out of every bag; an empty bag gives zeros."""
    if mode not in _MODES:
        raise LayerError("EmbeddingBag", "mode", f"must be one of {_MODES}, got {mode!r}")
    if max_norm is not None:
        raise LayerError("EmbeddingBag", "max_norm", "is not supported (it rescales the weight in place)")
    if per_sample_weights is not None and mode != "sum":
        raise LayerError("EmbeddingBag", "per_sample_weights", f"needs mode 'sum', got {mode!r}")
    if input.ndim == 2:
        if offsets is not None:
            raise LayerError("EmbeddingBag", "offsets", "must be None for 2-D input (each row is a bag)")
        B, n = input.shape
        ids = input.reshape(-1)
        bag = np.repeat(np.arange(B), n)
        psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise LayerError("EmbeddingBag", "offsets", "are required for 1-D input")
        off = offsets.numpy().astype(np.intp).reshape(-1)                  # intp: numpy on wasm32 counts in int32
        ends = off[1:] if include_last_offset else np.append(off[1:], input.shape[0])
        starts = off[:-1] if include_last_offset else off
        if len(starts) and (starts[0] != 0 or np.any(np.diff(off) < 0) or ends[-1] > input.shape[0]):
            raise LayerError("EmbeddingBag", "offsets", f"must start at 0, not decrease and stay within "
                             f"{input.shape[0]} indices, got {off.tolist()}")
        B = len(starts)
        bag = np.repeat(np.arange(B), ends - starts)
        ids, psw = input, per_sample_weights
    else:
        raise LayerError("EmbeddingBag", "input", f"must be 1-D or 2-D, got shape {tuple(input.shape)}")
    keep = np.ones(len(bag), bool) if padding_idx is None else ids.numpy().reshape(-1) != padding_idx
    sel = tensor(np.nonzero(keep)[0], device=weight.device)
    bag = bag[keep]
    rows = weight.index_select(0, ids.index_select(0, sel) if not keep.all() else ids)   # (n_kept, D)
    if psw is not None:
        rows = rows * (psw.index_select(0, sel) if not keep.all() else psw).unsqueeze(-1)
    D = weight.shape[1]
    if mode == "max":
        out = [rows.index_select(0, tensor(np.nonzero(bag == b)[0], device=weight.device)).amax(0)
               if np.any(bag == b) else zeros(D, dtype=weight.dtype, device=weight.device) for b in range(B)]
        return stack(out, 0) if out else zeros(0, D, dtype=weight.dtype, device=weight.device)
    out = zeros(B, D, dtype=weight.dtype, device=weight.device).index_add(0, tensor(bag, device=weight.device), rows)
    if mode == "mean":
        count = np.maximum(np.bincount(bag, minlength=B), 1).astype(np.float32)
        out = out / tensor(count, device=weight.device).to(weight.dtype).unsqueeze(-1)
    return out


class EmbeddingBag(Module):
    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None,
                 device=None, dtype=None):
        super().__init__()
        if mode not in _MODES:
            raise LayerError("EmbeddingBag", "mode", f"must be one of {_MODES}, got {mode!r}")
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.max_norm, self.include_last_offset, self.padding_idx = max_norm, include_last_offset, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(input, self.weight, offsets, self.mode, per_sample_weights, self.include_last_offset,
                             self.padding_idx, self.max_norm)
