"""KVCache: the keys and values a decoder has seen, per layer, passed explicitly in and out of the model
(as MLX's llama does). A global layer keeps every position in a preallocated (batch, n_kv_heads, capacity,
head_dim) buffer written in place (ember.copy_into: one row per decoded token, not a copy of the cache),
doubling its capacity when full. A sliding-window layer keeps only the last window - 1 positions (all the
next query can see besides itself), so its memory is bounded by the window whatever the context.
"""
from __future__ import annotations

import ember


class KVCache:
    MIN_CAPACITY = 256

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int, windows=None):
        """windows: per layer None (global) or the sliding window length."""
        self.max_len = max_len
        self.windows = list(windows) if windows is not None else [None] * n_layers
        self.k = [None] * n_layers  # (batch, n_kv_heads, capacity | kept, head_dim) each
        self.v = [None] * n_layers
        self.pos = 0                # positions already seen (the next tokens' first index)
        self._per_token = 2 * n_kv_heads * head_dim

    def check_room(self, n_new: int):
        if self.pos + n_new > self.max_len:
            raise ValueError(f"ember: KV cache full: {self.pos} cached + {n_new} new tokens exceed the context "
                             f"length {self.max_len}")

    def start(self, layer: int) -> int:
        """Index of the first key the layer holds before this step's tokens are appended."""
        w = self.windows[layer]
        return max(0, self.pos - (w - 1)) if w else 0

    def update(self, layer: int, k, v):
        """Append k, v (batch, n_kv_heads, T, head_dim); return the keys/values to attend over
        (batch, n_kv_heads, kept + T, head_dim)."""
        if self.windows[layer]:
            return self._update_sliding(layer, k, v)
        end = self.pos + k.shape[2]
        self._room(layer, k, end)
        ember.copy_into(self.k[layer], k, (0, 0, self.pos, 0))
        ember.copy_into(self.v[layer], v, (0, 0, self.pos, 0))
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)

    def _room(self, layer, k, end):
        """Buffers for `layer` holding at least `end` positions (grown by doubling, old rows copied once)."""
        old_k, old_v = self.k[layer], self.v[layer]
        if old_k is not None and old_k.shape[2] >= end:
            return
        have = 0 if old_k is None else old_k.shape[2]
        cap = min(self.max_len, max(end, 2 * have, self.MIN_CAPACITY))
        B, K, _, hd = k.shape
        self.k[layer] = ember.zeros(B, K, cap, hd, dtype=k.dtype, device=k.device)
        self.v[layer] = ember.zeros(B, K, cap, hd, dtype=k.dtype, device=k.device)
        if old_k is not None and self.pos:
            ember.copy_into(self.k[layer], old_k.narrow(2, 0, self.pos), (0, 0, 0, 0))
            ember.copy_into(self.v[layer], old_v.narrow(2, 0, self.pos), (0, 0, 0, 0))

    def _update_sliding(self, layer, k, v):
        if self.k[layer] is not None:
            k = ember.cat([self.k[layer], k], 2)
            v = ember.cat([self.v[layer], v], 2)
        n = self.windows[layer] - 1
        keep_k, keep_v = k, v
        if k.shape[2] > n:  # what no later query can see is dropped now
            keep_k = k.narrow(2, k.shape[2] - n, n).contiguous()
            keep_v = v.narrow(2, v.shape[2] - n, n).contiguous()
        self.k[layer], self.v[layer] = keep_k, keep_v
        return k, v

    def kept(self, layer: int) -> int:
        """Positions the layer holds (a sliding layer: at most window - 1)."""
        k = self.k[layer]
        return 0 if k is None else k.shape[2] if self.windows[layer] else self.pos

    def nbytes(self) -> int:
        """Bytes of the cached positions (capacity_nbytes: of the buffers)."""
        return sum(self.kept(i) * self._per_token * k.element_size() * k.shape[0]
                   for i, k in enumerate(self.k) if k is not None)

    def capacity_nbytes(self) -> int:
        """Bytes of the allocated buffers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)

    def max_nbytes(self, itemsize: int = 4, batch: int = 1) -> int:
        """Bytes the cache holds at the context length."""
        return sum((min(w - 1, self.max_len) if w else self.max_len) for w in self.windows) \
            * self._per_token * itemsize * batch
