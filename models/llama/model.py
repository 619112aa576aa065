"""Llama 2 / Llama 3 decoder (after transformers' modeling_llama.py, v4.5x): RMSNorm, rotary embeddings in
the rotate-half layout, grouped-query attention with an explicit KV cache, SwiGLU MLP.

Small models are bound by per-op overhead, so each layer runs few, large ops: one fused q/k/v matmul, one
fused gate/up matmul, rotary embeddings applied to q and k together (one rotation matmul per decoded token), and
grouped-query attention without repeating k/v (the query heads that share a kv head are stacked along the
sequence axis instead). Parameter names follow Hugging Face's, except the fused `qkv_proj` and `gate_up_proj`
(load.py converts). Nothing here names a backend: the model runs on whichever device its weights live on.
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F

from .config import LlamaConfig


class KVCache:
    """Keys and values seen so far, per layer, in preallocated (batch, n_kv_heads, capacity, head_dim) buffers
    bounded by `max_len` (the context length); each token's rows are written in place (ember.copy_into),
    so decoding copies one row per layer, not the whole cache. Capacity starts at 256 positions and
    doubles when full (one copy then), so a short chat does not hold the whole context's memory. Passed
    explicitly in and out of the model, as MLX's llama does."""

    MIN_CAPACITY = 256

    def __init__(self, config: LlamaConfig, max_len: int | None = None):
        self.max_len = min(max_len or config.max_seq_len, config.max_seq_len)
        self.k = [None] * config.n_layers  # (batch, n_kv_heads, capacity, head_dim) each
        self.v = [None] * config.n_layers
        self.pos = 0  # tokens already in the cache
        self._per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim

    def check_room(self, n_new: int):
        if self.pos + n_new > self.max_len:
            raise ValueError(f"ember: KV cache full: {self.pos} cached + {n_new} new tokens exceed the context "
                             f"length {self.max_len}")

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

    def update(self, layer: int, k, v):
        """Write k, v (batch, n_kv_heads, T, head_dim) at the current position; return views of the whole
        (batch, n_kv_heads, pos + T, head_dim)."""
        end = self.pos + k.shape[2]
        self._room(layer, k, end)
        ember.copy_into(self.k[layer], k, (0, 0, self.pos, 0))
        ember.copy_into(self.v[layer], v, (0, 0, self.pos, 0))
        return self.k[layer].narrow(2, 0, end), self.v[layer].narrow(2, 0, end)

    def nbytes(self) -> int:
        """Bytes of the cached positions (capacity_nbytes: of the buffers)."""
        k = self.k[0]
        return 0 if k is None else self.pos * self._per_token * k.element_size() * k.shape[0]

    def capacity_nbytes(self) -> int:
        """Bytes of the preallocated buffers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)

    def max_nbytes(self, itemsize: int = 4, batch: int = 1) -> int:
        """Bytes the cache holds at the context length."""
        return self.max_len * self._per_token * itemsize * batch


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = c.n_heads, c.n_kv_heads, c.head_dim
        # (n_heads * head_dim + 2 * n_kv_heads * head_dim, dim): q, k, v rows stacked
        self.qkv_proj = nn.Linear(c.dim, (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)  # (dim, n_heads * head_dim)

    def forward(self, x, rope, mask, cache, layer):
        B, T, _ = x.shape
        H, K, hd = self.n_heads, self.n_kv, self.hd
        qkv = self.qkv_proj(x).reshape(B, T, H + 2 * K, hd)            # (B, T, H + 2K, hd)
        qk = rope(qkv.narrow(2, 0, H + K))                              # (B, T, H + K, hd)
        # the G = H // K query heads of one kv head go along the sequence axis: (B, K, G * T, hd)
        # (for one token that is a plain reshape: decoding skips the permutes; narrow is the cheapest slice)
        q = qk.narrow(2, 0, H)
        q = q.reshape(B, K, H // K, hd) if T == 1 else \
            q.reshape(B, T, K, H // K, hd).permute(0, 2, 3, 1, 4).reshape(B, K, H // K * T, hd)
        k = qk.narrow(2, H, K).transpose(1, 2)                          # (B, K, T, hd)
        v = qkv.narrow(2, H + K, K).transpose(1, 2)                     # (B, K, T, hd)
        if cache is not None:
            k, v = cache.update(layer, k, v)                            # (B, K, S, hd)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)     # (B, K, G * T, hd)
        o = o.reshape(B, T, H * hd) if T == 1 else \
            o.reshape(B, K, H // K, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H * hd)
        return self.o_proj(o)                                           # (B, T, dim)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.hidden = c.hidden_dim
        self.gate_up_proj = nn.Linear(c.dim, 2 * c.hidden_dim, bias=False)  # (2 * hidden_dim, dim): gate | up
        self.down_proj = nn.Linear(c.hidden_dim, c.dim, bias=False)  # (dim, hidden_dim)

    def forward(self, x):
        gu = self.gate_up_proj(x)                                       # (B, T, 2 * hidden)
        g, u = gu.narrow(-1, 0, self.hidden), gu.narrow(-1, self.hidden, self.hidden)
        return self.down_proj(F.silu(g) * u)                            # (B, T, dim)


class Block(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = nn.RMSNorm(c.dim, eps=c.norm_eps)  # (dim,)
        self.post_attention_layernorm = nn.RMSNorm(c.dim, eps=c.norm_eps)  # (dim,)

    def forward(self, x, rope, mask, cache, layer):
        x = x + self.self_attn(self.input_layernorm(x), rope, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)  # (vocab_size, dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)  # (dim,)


class Rope:
    """Rotary embedding for positions [start, start + T): F.rotary_embedding (the backend's fused rope where
    it has one). Decoding one token folds it all into one (hd, hd) rotation matrix diag(cos) + R diag(sin),
    R the rotate-half signed permutation, built on the host: one op per layer instead of four."""

    def __init__(self, cos=None, sin=None, matrix=None):
        self.cos, self.sin, self.matrix = cos, sin, matrix               # (T, hd / 2) x2 | (hd, hd)

    def __call__(self, x):                                              # (B, T, heads, hd)
        if self.matrix is not None:
            return x @ self.matrix
        return F.rotary_embedding(x, self.cos, self.sin)


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = c = config
        self.model = Backbone(c)
        if not c.tie_embeddings:
            self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)  # (vocab_size, dim)
        pos = np.arange(c.max_seq_len, dtype=np.float32)[:, None] * c.inv_freq()[None, :]   # (seq, hd / 2)
        ang = np.concatenate([pos, pos], -1)[:, None, :]                                        # (seq, 1, hd)
        half = c.head_dim // 2
        rot = np.zeros((c.head_dim, c.head_dim), np.float32)
        rot[np.arange(half) + half, np.arange(half)] = -1.0   # out[:half] = -x[half:]
        rot[np.arange(half), np.arange(half) + half] = 1.0    # out[half:] = x[:half]
        self._cos, self._sin, self._rot = np.cos(ang[:, 0]), np.sin(ang[:, 0]), rot                    # host copies
        self.register_buffer("rope_cos", ember.tensor(np.cos(pos)), persistent=False)                # (seq, hd / 2)
        self.register_buffer("rope_sin", ember.tensor(np.sin(pos)), persistent=False)

    @property
    def device(self):
        return self.model.embed_tokens.weight.device

    def _after_load(self):  # a tied embedding is also the lm_head's weight: store it the way F.linear reads it
        if self.config.tie_embeddings:
            nn.relayout_linear_weight(self.model.embed_tokens.weight)

    def _dtype(self):  # host-built constants (mask, rotation) follow the weights' dtype
        return self.model.embed_tokens.weight.dtype

    def new_cache(self, max_len: int | None = None) -> KVCache:
        return KVCache(self.config, max_len)

    def _mask(self, T, start, S):
        """Additive causal mask (G * T, S) for query rows ordered (group, position), or None for one token."""
        if T == 1:
            return None
        allowed = np.arange(S)[None, :] <= (start + np.arange(T))[:, None]              # (T, S)
        m = np.where(allowed, 0.0, -np.inf).astype(np.float32)
        m = np.tile(m, (self.config.n_heads // self.config.n_kv_heads, 1))              # (G * T, S)
        return ember.tensor(m, dtype=self._dtype(), device=self.device)

    def forward(self, tokens, cache: KVCache | None = None, last_only: bool = False):
        """tokens (B, T) int64 -> logits (B, T, vocab) (or (B, 1, vocab) with last_only); with a cache the
        tokens continue the cached sequence and the cache advances by T."""
        T = tokens.shape[1]                                                               # tokens (B, T)
        start = cache.pos if cache is not None else 0
        if cache is not None:
            cache.check_room(T)
        elif T > self.config.max_seq_len:
            raise ValueError(f"ember: {T} tokens exceed the context length {self.config.max_seq_len}")
        if T == 1:
            m = np.diag(self._cos[start]) + self._rot * self._sin[start][None, :]                   # (hd, hd)
            rope = Rope(matrix=ember.tensor(m, dtype=self._dtype(), device=self.device))
        else:
            rope = Rope(self.rope_cos.narrow(0, start, T), self.rope_sin.narrow(0, start, T))
        mask = self._mask(T, start, start + T)
        x = self.model.embed_tokens(tokens)                                               # (B, T, dim)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope, mask, cache, i)
        if cache is not None:
            cache.pos += T
        if last_only and T > 1:
            x = x.narrow(1, T - 1, 1)
        x = self.model.norm(x)
        if self.config.tie_embeddings:
            return F.linear(x, self.model.embed_tokens.weight)                             # (B, T, vocab)
        return self.lm_head(x)                                                             # (B, T, vocab)
