"""Gemma 3 text decoder (after transformers' models/gemma3/modeling_gemma3.py, v5.x, and llama.cpp's
src/models/gemma3.cpp): interleaved sliding-window and global attention with their own rope bases, q/k RMSNorm,
pre- and post-norms around attention and MLP, a GeGLU MLP (tanh GELU), embeddings scaled by sqrt(dim), the
output tied to the embedding, grouped-query attention with an explicit KV cache.

Norm weights here are the *effective* scale: Gemma's checkpoints store w and multiply by (1 + w); llama.cpp's
converter adds the 1 when writing GGUF, and load.py does it for a Hugging Face folder, so every norm is a plain
nn.RMSNorm. The embedding is a QEmbedding: a QTensor read by row (and multiplied, quantized, for the logits)
or a float Parameter. Nothing here names a backend.
"""
from __future__ import annotations

import math

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F
from ember.quant import QTensor
from ember.quant.codec import dequantize_rows

from .config import SLIDING, Gemma3Config


class KVCache:
    """Per layer, keys and values (batch, n_kv_heads, kept, head_dim). A global layer keeps every token up to
    `max_len`; a sliding layer keeps only the last window - 1 (all the next query can see besides itself), so
    its memory is bounded by the window whatever the context."""

    def __init__(self, config: Gemma3Config, max_len: int | None = None):
        self.max_len = min(max_len or config.max_seq_len, config.max_seq_len)
        self.window = config.sliding_window
        self.sliding = [t == SLIDING for t in config.layer_types]
        self.k = [None] * config.n_layers
        self.v = [None] * config.n_layers
        self.pos = 0  # tokens seen so far (positions of the next tokens start here)

    def check_room(self, n_new: int):
        if self.pos + n_new > self.max_len:
            raise ValueError(f"ember: KV cache full: {self.pos} cached + {n_new} new tokens exceed the context "
                             f"length {self.max_len}")

    def start(self, layer: int) -> int:
        """Position of the first key the layer holds before this step's tokens are appended."""
        return max(0, self.pos - (self.window - 1)) if self.sliding[layer] else 0

    def update(self, layer: int, k, v):
        """Append k, v (batch, n_kv_heads, T, head_dim); return the keys/values to attend over
        (batch, n_kv_heads, kept + T, head_dim), then drop what a sliding layer will never see again."""
        if self.k[layer] is not None:
            k = ember.cat([self.k[layer], k], 2)
            v = ember.cat([self.v[layer], v], 2)
        keep_k, keep_v = k, v
        if self.sliding[layer] and k.shape[2] > self.window - 1:
            n = self.window - 1
            keep_k = k.narrow(2, k.shape[2] - n, n).contiguous()
            keep_v = v.narrow(2, v.shape[2] - n, n).contiguous()
        self.k[layer], self.v[layer] = keep_k, keep_v
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)


class QEmbedding(nn.Module):
    """Token embedding whose table may stay quantized: forward dequantizes only the rows asked for; `logits`
    multiplies by the table (tied output) through the quantized matmul. A float table is a Parameter."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.num_embeddings, self.embedding_dim = vocab_size, dim
        self.weight = None  # (vocab_size, dim): set by load_table (no 262k-row placeholder is allocated)

    def load_table(self, w):
        """w: a QTensor (kept quantized, a plain attribute as QLinear keeps its own) or a float Tensor/array."""
        if tuple(w.shape) != (self.num_embeddings, self.embedding_dim):
            raise ValueError(f"ember: token embedding of shape {tuple(w.shape)} does not fit "
                             f"({self.num_embeddings}, {self.embedding_dim})")
        self.weight = w if isinstance(w, QTensor) else \
            nn.Parameter(w if isinstance(w, ember.Tensor) else ember.tensor(np.asarray(w, np.float32)))

    def forward(self, tokens):                                               # (B, T) int
        if isinstance(self.weight, QTensor):
            ids = tokens.numpy().reshape(-1)
            if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
                raise ValueError(f"ember: token id out of range [0, {self.num_embeddings})")
            rows = dequantize_rows(self.weight.data[ids], self.weight.ggml_type)  # (B * T, dim) float32
            return ember.tensor(rows.reshape(*tokens.shape, self.embedding_dim), device=tokens.device)
        return F.embedding(tokens, self.weight)                              # (B, T, dim)

    def logits(self, x):                                                     # (B, T, dim) -> (B, T, vocab)
        if isinstance(self.weight, QTensor):
            return self.weight.matmul_t(x)
        return F.linear(x, self.weight)


class Rope:
    """Rotate-half rotary embedding for positions [start, start + T) of one layer kind."""

    def __init__(self, cos, sin):
        self.cos, self.sin = cos, sin                                        # (T, hd / 2) each

    def __call__(self, x):                                                   # (B, T, heads, hd)
        return F.rotary_embedding(x, self.cos, self.sin)


class Attention(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = c.n_heads, c.n_kv_heads, c.head_dim
        self.scale = c.query_pre_attn_scalar ** -0.5
        self.q_proj = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)      # (n_heads * hd, dim)
        self.k_proj = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)   # (n_kv_heads * hd, dim)
        self.v_proj = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)   # (n_kv_heads * hd, dim)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)      # (dim, n_heads * hd)
        self.q_norm = nn.RMSNorm(c.head_dim, eps=c.norm_eps)                    # (hd,)
        self.k_norm = nn.RMSNorm(c.head_dim, eps=c.norm_eps)                    # (hd,)

    def forward(self, x, rope, mask, cache, layer):
        B, T, _ = x.shape
        H, K, hd = self.n_heads, self.n_kv, self.hd
        q = rope(self.q_norm(self.q_proj(x).reshape(B, T, H, hd)))             # (B, T, H, hd)
        k = rope(self.k_norm(self.k_proj(x).reshape(B, T, K, hd)))             # (B, T, K, hd)
        v = self.v_proj(x).reshape(B, T, K, hd)
        # the G = H // K query heads of one kv head go along the sequence axis: (B, K, G * T, hd)
        q = q.reshape(B, K, H // K, hd) if T == 1 else \
            q.reshape(B, T, K, H // K, hd).permute(0, 2, 3, 1, 4).reshape(B, K, H // K * T, hd)
        k, v = k.transpose(1, 2), v.transpose(1, 2)                             # (B, K, T, hd)
        if cache is not None:
            k, v = cache.update(layer, k, v)                                    # (B, K, S, hd)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)  # (B, K, G * T, hd)
        o = o.reshape(B, T, H * hd) if T == 1 else \
            o.reshape(B, K, H // K, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H * hd)
        return self.o_proj(o)                                                   # (B, T, dim)


class MLP(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.dim, c.hidden_dim, bias=False)             # (hidden_dim, dim)
        self.up_proj = nn.Linear(c.dim, c.hidden_dim, bias=False)               # (hidden_dim, dim)
        self.down_proj = nn.Linear(c.hidden_dim, c.dim, bias=False)             # (dim, hidden_dim)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))  # (B, T, dim)


class Block(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        norm = lambda: nn.RMSNorm(c.dim, eps=c.norm_eps)                        # (dim,) each
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def forward(self, x, rope, mask, cache, layer):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, mask, cache, layer))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Backbone(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.embed_tokens = QEmbedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)                           # (dim,)


class Gemma3(nn.Module):
    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.config = c = config
        self.model = Backbone(c)
        self.embed_scale = float(np.float32(math.sqrt(c.dim)))  # as transformers rounds it: a float32 scalar
        self._angles = {}                                        # layer kind -> (max_seq_len, hd / 2) host angles

    @property
    def device(self):
        return self.model.norm.weight.device

    def _after_load(self):  # the tied float embedding is also the output weight: store it the way F.linear reads it
        if not isinstance(self.model.embed_tokens.weight, (QTensor, type(None))):
            nn.relayout_linear_weight(self.model.embed_tokens.weight)

    def new_cache(self, max_len: int | None = None) -> KVCache:
        return KVCache(self.config, max_len)

    def _rope(self, kind: str, start: int, T: int) -> Rope:
        # positions times frequencies in float32, as transformers does (float64 would differ at large positions)
        pos = np.arange(start, start + T, dtype=np.float32)[:, None] * self.config.inv_freq(kind)[None, :]
        cos = ember.tensor(np.cos(pos), device=self.device)                     # (T, hd / 2)
        sin = ember.tensor(np.sin(pos), device=self.device)
        return Rope(cos, sin)

    def _mask(self, T: int, start: int, kstart: int, window: int | None):
        """Additive mask (G * T, S) over keys at positions [kstart, start + T) for queries at [start, start + T)
        ordered (group, position); None when every key is visible (one token against a trimmed cache)."""
        q = start + np.arange(T)[:, None]                                       # (T, 1)
        kpos = np.arange(kstart, start + T)[None, :]                            # (1, S)
        allowed = kpos <= q
        if window is not None:
            allowed &= q - kpos < window
        if allowed.all():
            return None
        m = np.where(allowed, 0.0, -np.inf).astype(np.float32)
        m = np.tile(m, (self.config.n_heads // self.config.n_kv_heads, 1))      # (G * T, S)
        return ember.tensor(m, device=self.device)

    def forward(self, tokens, cache: KVCache | None = None, last_only: bool = False):
        """tokens (B, T) int64 -> logits (B, T, vocab) (or (B, 1, vocab) with last_only); with a cache the
        tokens continue the cached sequence and the cache advances by T."""
        c = self.config
        T = tokens.shape[1]                                                     # tokens (B, T)
        start = cache.pos if cache is not None else 0
        if cache is not None:
            cache.check_room(T)
        elif T > c.max_seq_len:
            raise ValueError(f"ember: {T} tokens exceed the context length {c.max_seq_len}")
        ropes = {kind: self._rope(kind, start, T) for kind in set(c.layer_types)}
        masks = {}
        x = self.model.embed_tokens(tokens) * self.embed_scale                  # (B, T, dim)
        for i, layer in enumerate(self.model.layers):
            kind = c.layer_types[i]
            kstart = cache.start(i) if cache is not None else 0
            key = (kind, kstart)
            if key not in masks:
                masks[key] = self._mask(T, start, kstart, c.sliding_window if kind == SLIDING else None)
            x = layer(x, ropes[kind], masks[key], cache, i)
        if cache is not None:
            cache.pos += T
        if last_only and T > 1:
            x = x.narrow(1, T - 1, 1)
        logits = self.model.embed_tokens.logits(self.model.norm(x))             # (B, T, vocab)
        if c.final_logit_softcap:
            logits = (logits / c.final_logit_softcap).tanh() * c.final_logit_softcap
        return logits
