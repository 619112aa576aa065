"""Qwen2-MoE and Qwen3-MoE (after transformers' modeling_qwen2_moe.py / modeling_qwen3_moe.py, v5.x): the llama
layout with a sparse mixture of experts (models/common/moe.py) as the MLP of every layer (layer + 1) %
decoder_sparse_step == 0 not in mlp_only_layers (the others: a dense SwiGLU of intermediate_size); experts of
moe_intermediate_size, top-k weights renormalised only with norm_topk_prob. Qwen2-MoE: q/k/v biases (qkv_bias)
and a shared expert gated by sigmoid(shared_expert_gate x); Qwen3-MoE: RMSNorm on every query and key head
(`self_attn.q_norm`, `k_norm`) and optional biases (attention_bias)."""
from __future__ import annotations

from ember import nn

from ..common.attention import Attention
from ..common.layout import LlamaLayout, build
from ..common.mlp import GatedMLP
from ..common.moe import moe_block, stack_experts


class QwenMoE(LlamaLayout):
    shared_expert = False

    def sparse(self, layer: int) -> bool:
        c = self.hf_config
        step = c.get("decoder_sparse_step", 1) or 1
        return layer not in (c.get("mlp_only_layers") or []) and (layer + 1) % step == 0

    def mlp(self, s):
        layer = self.__dict__.get("_next_layer", 0)  # Backbone builds the blocks in order
        self.__dict__["_next_layer"] = layer + 1
        c = self.hf_config
        experts = c.get("num_experts", c.get("num_local_experts", 0))
        if not experts or not self.sparse(layer):
            return GatedMLP(s.dim, s.hidden_dim, s.act)
        return moe_block(s, num_experts=experts, top_k=c.get("num_experts_per_tok", 2),
                         hidden=c.get("moe_intermediate_size", s.hidden_dim),
                         norm_topk_prob=bool(c.get("norm_topk_prob", False)),
                         shared_hidden=c.get("shared_expert_intermediate_size", 0) if self.shared_expert else 0,
                         where=s.where)


class Qwen2MoE(QwenMoE):
    shared_expert = True

    def attention(self, s):
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=bool(self.hf_config.get("qkv_bias", True)),
                         out_bias=False)


class Qwen3MoE(QwenMoE):
    def attention(self, s):
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=bool(self.hf_config.get("attention_bias")),
                         out_bias=bool(self.hf_config.get("attention_bias")),
                         qk_norm=lambda hd: nn.RMSNorm(hd, eps=s.norm_eps))


def build_from_hf(config: dict, sd: dict, where: str):
    cls = Qwen2MoE if config.get("model_type") == "qwen2_moe" else Qwen3MoE
    return build(cls, config, stack_experts(sd, where), where)
