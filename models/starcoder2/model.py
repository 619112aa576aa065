"""StarCoder2 (after transformers' models/starcoder2/modeling_starcoder2.py, v5.x): the llama layout with
LayerNorms (weight and bias), biases on every projection (use_bias), a plain GELU MLP named mlp.c_fc /
mlp.c_proj, grouped-query attention with a sliding window, the output tied to the embedding."""
from __future__ import annotations

from ember import nn

from ..common.attention import Attention
from ..common.mlp import MLP
from ..common.layout import LlamaLayout, build


class StarCoder2(LlamaLayout):
    def attention(self, s):
        bias = self.hf_config.get("use_bias", True)
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=bias)

    def mlp(self, s):
        return MLP(s.dim, s.hidden_dim, s.act, bias=self.hf_config.get("use_bias", True), names=("c_fc", "c_proj"))

    def norm(self, s):
        return nn.LayerNorm(s.dim, eps=s.norm_eps)                              # (dim,) + (dim,)


def build_from_hf(config: dict, sd: dict, where: str) -> StarCoder2:
    return build(StarCoder2, config, sd, where, eps_field="norm_epsilon", tie_default=True,
                 act_default="gelu_pytorch_tanh")
