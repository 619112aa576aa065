"""Llama 2 / Llama 3 decoder (after transformers' modeling_llama.py, v4.5x): RMSNorm, rotary embeddings in
the rotate-half layout, grouped-query attention with an explicit KV cache, SwiGLU MLP — all from the zoo's
toolkit (ember.models.common).

Small models are bound by per-op overhead, so each layer runs few, large ops: one fused q/k/v matmul and one
fused gate/up matmul (the toolkit's `fused` projections), rotary embeddings applied to q and k together.
Parameter names follow Hugging Face's, except the fused `qkv_proj` and `gate_up_proj` (names.py converts).
Nothing here names a backend: the model runs on whichever device its weights live on.
"""
from __future__ import annotations

from ember import nn

from ..common.attention import Attention
from ..common.cache import KVCache  # noqa: F401  (the cache's home was here; kept importable)
from ..common.decoder import CausalLM, DecoderBlock
from ..common.mlp import GatedMLP
from ..common.positions import RotaryEmbedding
from .config import LlamaConfig


def Block(c: LlamaConfig) -> DecoderBlock:
    return DecoderBlock(Attention(c.dim, c.n_heads, c.n_kv_heads, c.head_dim, fused="qkv_proj"),
                        GatedMLP(c.dim, c.hidden_dim, "silu", fused="gate_up_proj"),
                        nn.RMSNorm(c.dim, eps=c.norm_eps), nn.RMSNorm(c.dim, eps=c.norm_eps))  # (dim,) x2


class Backbone(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)  # (vocab_size, dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)  # (dim,)


class Llama(CausalLM):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = c = config
        self.model = Backbone(c)
        self.tie_embeddings = c.tie_embeddings
        if not c.tie_embeddings:
            self.lm_head = nn.Linear(c.dim, c.vocab_size, bias=False)  # (vocab_size, dim)
        self.setup(n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                   max_seq_len=c.max_seq_len, rope=RotaryEmbedding(c.head_dim, c.inv_freq()))

    def embed(self, tokens, positions):
        return self.model.embed_tokens(tokens)                                   # (B, T, dim)
