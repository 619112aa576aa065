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
from ember.ggml.codec import dequantize_rows

from ..common.attention import Attention
from ..common.cache import KVCache  # noqa: F401  (the cache's home was here; kept importable)
from ..common.decoder import CausalLM
from ..common.fused_decode import block_parts
from ..common.mlp import GatedMLP
from ..common.positions import RotaryEmbedding
from .config import SLIDING, Gemma3Config


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

    def argmax_logits(self, x) -> int:                                       # (1, 1, dim) -> argmax of logits
        if isinstance(self.weight, QTensor):
            return self.weight.argmax_matmul_t(x)
        return int(np.argmax(self.logits(x).numpy()))

    def topk_logits(self, x, k: int):                                       # (1, 1, dim) -> (ids, logits)
        """The logits of a set of ids holding every one among the k largest (QTensor.topk_matmul_t)."""
        if isinstance(self.weight, QTensor):
            return self.weight.topk_matmul_t(x, k)
        y = self.logits(x).numpy().reshape(-1)
        return np.arange(y.size, dtype=np.int64), y

    def logits(self, x):                                                     # (B, T, dim) -> (B, T, vocab)
        if isinstance(self.weight, QTensor):
            return self.weight.matmul_t(x)
        return F.linear(x, self.weight)


def Block(c: Gemma3Config) -> nn.Module:
    norm = lambda: nn.RMSNorm(c.dim, eps=c.norm_eps)                            # (dim,) each
    attn = Attention(c.dim, c.n_heads, c.n_kv_heads, c.head_dim, scale=c.query_pre_attn_scalar ** -0.5,
                     qk_norm=lambda hd: nn.RMSNorm(hd, eps=c.norm_eps))
    return SandwichBlock(attn, GatedMLP(c.dim, c.hidden_dim, "gelu_pytorch_tanh"), norm(), norm(), norm(), norm())


class SandwichBlock(nn.Module):
    """Gemma's norms on both sides of attention and of the MLP."""

    def __init__(self, attn, mlp, n1, n2, n3, n4):
        super().__init__()
        self.self_attn, self.mlp = attn, mlp
        self.input_layernorm, self.post_attention_layernorm = n1, n2
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = n3, n4

    def decode_parts(self, sources):  # for the fused decode step (models/common/fused_decode.py)
        return block_parts(sources, self.self_attn, self.mlp, self.input_layernorm, self.pre_feedforward_layernorm,
                           self.post_attention_layernorm, self.post_feedforward_layernorm)

    def forward(self, x, rope, mask, cache, layer):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, mask, cache, layer))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Backbone(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.embed_tokens = QEmbedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)                           # (dim,)


class Gemma3(CausalLM):
    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.config = c = config
        self.model = Backbone(c)
        self.embed_scale = float(np.float32(math.sqrt(c.dim)))  # as transformers rounds it: a float32 scalar
        ropes = {kind: RotaryEmbedding(c.head_dim, c.inv_freq(kind)) for kind in set(c.layer_types)}
        self.setup(n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                   max_seq_len=c.max_seq_len, rope=[ropes[k] for k in c.layer_types],
                   windows=[c.sliding_window if k == SLIDING else None for k in c.layer_types])

    @property
    def device(self):
        return self.model.norm.weight.device

    def _dtype(self):
        return self.model.norm.weight.dtype

    def _after_load(self):  # the tied float embedding is also the output weight: store it the way F.linear reads it
        if not isinstance(self.model.embed_tokens.weight, (QTensor, type(None))):
            nn.relayout_linear_weight(self.model.embed_tokens.weight)

    def embed(self, tokens, positions):
        x = self.model.embed_tokens(tokens)                                     # (B, T, dim)
        if str(x.device) != str(self.device):  # quantized rows are read on the host, beside the (host) ids
            x = x.to(self.device)
        return x * self.embed_scale

    def head(self, x):
        logits = self.model.embed_tokens.logits(x)                              # (B, T, vocab)
        cap = self.config.final_logit_softcap
        return (logits / cap).tanh() * cap if cap else logits

    def greedy_head(self, x) -> int:
        """The id head(x) has its largest logit at, for one position x (1, 1, dim): greedy decoding's pick
        without the 262k logits where the embedding allows (QTensor.argmax_matmul_t). A soft cap (tanh) keeps
        the order but can round distinct logits to one float, so with a cap every logit is computed."""
        if self.config.final_logit_softcap:
            return int(np.argmax(self.head(x).numpy()))
        return self.model.embed_tokens.argmax_logits(x)

    def topk_head(self, x, k: int):
        """(ids, logits) of head(x) for one position x (1, 1, dim), over a set of ids that holds every one among
        the k largest logits: sampling's top-k without the 262k logits where the embedding allows it
        (QTensor.topk_matmul_t). With a soft cap every logit is computed (as greedy_head)."""
        if self.config.final_logit_softcap:
            y = self.head(x).numpy().reshape(-1)
            return np.arange(y.size, dtype=np.int64), y
        return self.model.embed_tokens.topk_logits(x, k)
