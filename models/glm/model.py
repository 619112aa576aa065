"""GLM and GLM-4 (after transformers' models/glm/modeling_glm.py and models/glm4/modeling_glm4.py, v5.x): the
llama layout with q/k/v biases, one fused `mlp.gate_up_proj` [gate | up], partial rotary (half the head by
default) in the interleaved layout (pairs (2i, 2i + 1), as GPT-J). GLM-4 adds sandwich norms: the attention
and MLP outputs are normalized again (`post_self_attn_layernorm`, `post_mlp_layernorm`) before the residual.
"""
from __future__ import annotations

from ember import nn

from ..common.mlp import GatedMLP
from ..common.layout import LlamaLayout, build


class Glm(LlamaLayout):
    attn_bias = True
    rope_layout = "interleaved"

    def mlp(self, s):
        return GatedMLP(s.dim, s.hidden_dim, s.act, fused="gate_up_proj")


class SandwichBlock(nn.Module):
    """x + post_self_attn_layernorm(attn(input_layernorm(x))), then the same around the MLP."""

    def __init__(self, attn, mlp, norm):
        super().__init__()
        self.self_attn, self.mlp = attn, mlp
        self.input_layernorm, self.post_self_attn_layernorm = norm(), norm()               # (dim,) each
        self.post_attention_layernorm, self.post_mlp_layernorm = norm(), norm()            # (dim,) each

    def forward(self, x, rope, mask, cache, layer):
        x = x + self.post_self_attn_layernorm(self.self_attn(self.input_layernorm(x), rope, mask, cache, layer))
        return x + self.post_mlp_layernorm(self.mlp(self.post_attention_layernorm(x)))


class Glm4(Glm):
    def block(self, s):
        return SandwichBlock(self.attention(s), self.mlp(s), lambda: self.norm(s))


def build_from_hf(config: dict, sd: dict, where: str) -> Glm:
    return build(Glm4 if config.get("model_type") == "glm4" else Glm, config, sd, where)
