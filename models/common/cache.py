"""KVCache: the keys and values a decoder has seen, per layer, passed explicitly in and out of the model
(as MLX's llama does). Every layer writes into a preallocated (batch, n_kv_heads, capacity, head_dim) buffer
in place (ember.copy_into: one row per decoded token, never a copy of the cache), on every backend.

A global layer keeps every position: its buffer doubles when full, up to the context length. A sliding-window
layer is a ring of `window` slots, position p in slot p % window: a decoded token is written over the oldest
slot and then attends to the whole ring (itself and the window - 1 before it), so its memory is bounded by the
window whatever the context; until the ring is full a token attends to the slots written so far, not to the empty
rest. Ring slots are not in position order; attention does not care, as long as the mask is built from the
positions the slots hold (key_positions).
"""
from __future__ import annotations

import numpy as np

import ember


class KVCache:
    MIN_CAPACITY = 256

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int, windows=None):
        """windows: per layer None (global) or the sliding window length."""
        self.max_len = max_len
        self.windows = list(windows) if windows is not None else [None] * n_layers
        self.k = [None] * n_layers  # (batch, n_kv_heads, capacity, head_dim) each
        self.v = [None] * n_layers
        self.pos = 0                # positions already seen (the next tokens' first index)
        self.writes = 0             # rows written by update() / buffers replaced (a fused kernel's copy follows it)
        self._per_token = 2 * n_kv_heads * head_dim

    def check_room(self, n_new: int):
        if self.pos + n_new > self.max_len:
            raise ValueError(f"ember: KV cache full: {self.pos} cached + {n_new} new tokens exceed the context "
                             f"length {self.max_len}")

    def truncate(self, n: int) -> bool:
        """Forget positions n and later (a new prompt shares only its first n tokens with what is cached): a
        global layer's rows past n are simply written over. A sliding layer's ring no longer holds what it
        overwrote, so a cache with rings truncates only to its own end; False when it cannot (start a new one)."""
        if not 0 <= n <= self.pos:
            return False
        if n < self.pos and any(self.windows):
            return False
        self.pos = n
        return True

    def ring(self, layer: int) -> int | None:
        """A sliding layer's ring size (its window, or the context when that is shorter); None: global."""
        w = self.windows[layer]
        return min(w, self.max_len) if w else None

    def key_positions(self, layer: int, n_new: int) -> np.ndarray:
        """(S,) the position of every key update(layer, n_new new tokens) will return, in its order; a slot
        not yet written holds position -1 (callers mask it). A global layer: 0 .. pos + n_new - 1."""
        end = self.pos + n_new
        cap = self.ring(layer)
        if cap is None:
            return np.arange(end)
        if n_new == 1:                                          # the ring after this token's write
            return np.arange(end) if end <= cap else _slot_positions(cap, end - 1)
        new = np.arange(self.pos, end)
        return new if self.pos == 0 else np.concatenate([_slot_positions(cap, self.pos - 1), new])

    def update(self, layer: int, k, v):
        """Append k, v (batch, n_kv_heads, T, head_dim); return the keys/values to attend over
        (batch, n_kv_heads, S, head_dim), ordered as key_positions(layer, T)."""
        self.writes += 1
        if self.windows[layer]:
            return self._update_ring(layer, k, v)
        end = self.pos + k.shape[2]
        self._room(layer, k, end)
        ember.copy_into(self.k[layer], k, (0, 0, self.pos, 0))
        ember.copy_into(self.v[layer], v, (0, 0, self.pos, 0))
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)

    def slot(self, layer: int, k):
        """Where update(layer, k, v) of one token (k (batch, n_kv_heads, 1, head_dim)) writes, for a fused kernel
        that writes it itself: (k buffer, v buffer, row, length) with the buffers grown as update grows them;
        attention then reads rows [0, length), ordered as key_positions(layer, 1)."""
        cap = self.ring(layer)
        if cap is not None:
            if self.k[layer] is None:
                self._alloc(layer, k, cap)
            return self.k[layer], self.v[layer], self.pos % cap, min(self.pos + 1, cap)
        self._room(layer, k, self.pos + 1)
        return self.k[layer], self.v[layer], self.pos, self.pos + 1

    def _alloc(self, layer, k, cap):
        B, K, _, hd = k.shape
        self.k[layer] = ember.zeros(B, K, cap, hd, dtype=k.dtype, device=k.device)
        self.v[layer] = ember.zeros(B, K, cap, hd, dtype=k.dtype, device=k.device)

    def _room(self, layer, k, end):
        """Buffers for `layer` holding at least `end` positions (grown by doubling, old rows copied once)."""
        old_k, old_v = self.k[layer], self.v[layer]
        if old_k is not None and old_k.shape[2] >= end:
            return
        have = 0 if old_k is None else old_k.shape[2]
        self._alloc(layer, k, min(self.max_len, max(end, 2 * have, self.MIN_CAPACITY)))
        if old_k is not None and self.pos:
            ember.copy_into(self.k[layer], old_k.narrow(2, 0, self.pos), (0, 0, 0, 0))
            ember.copy_into(self.v[layer], old_v.narrow(2, 0, self.pos), (0, 0, 0, 0))

    def _update_ring(self, layer, k, v):
        cap, T = self.ring(layer), k.shape[2]
        if self.k[layer] is None:
            self._alloc(layer, k, cap)
        ring_k, ring_v = self.k[layer], self.v[layer]
        # several tokens (a prompt): they attend to the ring as it was plus themselves, then their last
        # `cap` rows are written in (a transient cat, not kept); one token: written first, then the ring
        out = None if T == 1 else (k, v) if self.pos == 0 else (ember.cat([ring_k, k], 2), ember.cat([ring_v, v], 2))
        n = min(T, cap)
        first = self.pos + T - n                                # position of the first row written
        done = 0
        while done < n:                                         # at most two runs: to the ring's end, then from 0
            slot = (first + done) % cap
            run = min(n - done, cap - slot)
            ember.copy_into(ring_k, k.narrow(2, T - n + done, run), (0, 0, slot, 0))
            ember.copy_into(ring_v, v.narrow(2, T - n + done, run), (0, 0, slot, 0))
            done += run
        if out is None and self.pos + 1 < cap:  # one token into a ring not yet full: the slots written so far
            return ring_k.narrow(2, 0, self.pos + 1), ring_v.narrow(2, 0, self.pos + 1)
        return (ring_k, ring_v) if out is None else out

    def reorder(self, rows):
        """Beam search: row i of every buffer becomes the old row rows[i] (ints, or an int64 ember tensor).
        Only the slots written so far are copied (a buffer's capacity runs ahead of its positions), and an
        order that keeps every row where it is copies nothing."""
        live = [t for t in self.k if t is not None]
        if not live:
            return
        if not isinstance(rows, ember.Tensor):
            rows = np.asarray(rows, np.int64)
            if rows.shape == (live[0].shape[0],) and (rows == np.arange(len(rows))).all():
                return
        # a host index: its bounds are checked on the host and it goes up with the lookup (a device index would
        # be read back for the check: a round trip per step on webgpu)
        idx = rows if isinstance(rows, ember.Tensor) else ember.tensor(rows)
        self.writes += 1
        self.k = [self._rows(t, idx) for t in self.k]
        self.v = [self._rows(t, idx) for t in self.v]

    def _rows(self, t, idx):
        if t is None:
            return None
        filled = min(self.pos, t.shape[2])
        if filled == t.shape[2]:
            return t.index_select(0, idx)
        out = ember.zeros(idx.shape[0], *t.shape[1:], dtype=t.dtype, device=t.device)
        return ember.copy_into(out, t.narrow(2, 0, filled).index_select(0, idx), (0, 0, 0, 0))

    def capacity(self, layer: int) -> int:
        """Slots the layer's buffer has (a sliding layer: its ring, at most the window)."""
        k = self.k[layer]
        return 0 if k is None else k.shape[2]

    def kept(self, layer: int) -> int:
        """Positions a later query of the layer can still see (a sliding layer: at most window - 1)."""
        if self.k[layer] is None:
            return 0
        w = self.windows[layer]
        return min(self.pos, w - 1) if w else self.pos

    def nbytes(self) -> int:
        """Bytes of the cached positions (capacity_nbytes: of the buffers)."""
        return sum(self.kept(i) * self._per_token * k.element_size() * k.shape[0]
                   for i, k in enumerate(self.k) if k is not None)

    def capacity_nbytes(self) -> int:
        """Bytes of the allocated buffers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)

    def max_nbytes(self, itemsize: int = 4, batch: int = 1) -> int:
        """Bytes the buffers hold at the context length."""
        return sum((self.ring(i) or self.max_len) for i in range(len(self.windows))) \
            * self._per_token * itemsize * batch


def _slot_positions(cap: int, last: int) -> np.ndarray:
    """(cap,) the position each ring slot holds once positions 0 .. last were written (-1: none yet)."""
    p = last - (last - np.arange(cap)) % cap
    return np.where(p >= 0, p, -1)
