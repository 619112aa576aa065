"""Qwen3 (after transformers' models/qwen3/modeling_qwen3.py, v5.x): the llama layout with RMSNorm on every
query and key head before rotary (`self_attn.q_norm`, `self_attn.k_norm`, (head_dim,)), optional q/k/v
biases (attention_bias) and the sliding layers config.json's layer_types name."""
from __future__ import annotations

from ember import nn

from ..common.attention import Attention
from ..common.layout import LlamaLayout, build


class Qwen3(LlamaLayout):
    def attention(self, s):
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=bool(self.hf_config.get("attention_bias")),
                         out_bias=False, qk_norm=lambda hd: nn.RMSNorm(hd, eps=s.norm_eps))


def build_from_hf(config: dict, sd: dict, where: str) -> Qwen3:
    return build(Qwen3, config, sd, where)
