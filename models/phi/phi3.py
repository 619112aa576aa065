"""Phi-3 (after transformers' models/phi3/modeling_phi3.py, v5.x): the llama layout with one fused
`self_attn.qkv_proj` [q | k | v] and one fused `mlp.gate_up_proj` [gate | up], optional partial rotary and
sliding window. LongRoPE scaling (the 128k variants) is refused by name."""
from __future__ import annotations

from ..common.attention import Attention
from ..common.mlp import GatedMLP
from ..common.layout import LlamaLayout, build


class Phi3(LlamaLayout):
    def attention(self, s):
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, fused="qkv_proj")

    def mlp(self, s):
        return GatedMLP(s.dim, s.hidden_dim, s.act, fused="gate_up_proj")


def build_from_hf(config: dict, sd: dict, where: str) -> Phi3:
    return build(Phi3, config, sd, where)
