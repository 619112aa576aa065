"""Llama 2 / Llama 3 decoder (after transformers' modeling_llama.py, v4.5x): the llama layout
(models/common/layout.py) — RMSNorm, rotary embeddings in the rotate-half layout, grouped-query attention with
an explicit KV cache, SwiGLU MLP — with its projections fused.

Small models are bound by per-op overhead, so each layer runs few, large ops: one fused q/k/v matmul and one
fused gate/up matmul (the toolkit's `fused` projections), rotary embeddings applied to q and k together.
Parameter names follow Hugging Face's, except the fused `qkv_proj` and `gate_up_proj` (names.py converts).
Nothing here names a backend: the model runs on whichever device its weights live on.
"""
from __future__ import annotations

from ..common.attention import Attention
from ..common.layout import LlamaLayout
from ..common.mlp import GatedMLP
from .config import LlamaConfig


class Llama(LlamaLayout):
    def __init__(self, config: LlamaConfig):
        super().__init__(config)

    def attention(self, c: LlamaConfig):
        a = Attention(c.dim, c.n_heads, c.n_kv_heads, c.head_dim, fused="qkv_proj")
        q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        a.qkv_proj.parts = (("q_proj", q), ("k_proj", kv), ("v_proj", kv))  # the checkpoint's (names.py)
        return a

    def mlp(self, c: LlamaConfig):
        m = GatedMLP(c.dim, c.hidden_dim, c.act, fused="gate_up_proj")
        m.gate_up_proj.parts = (("gate_proj", c.hidden_dim), ("up_proj", c.hidden_dim))
        return m
