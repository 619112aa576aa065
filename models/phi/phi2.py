"""Phi-1 / Phi-2 (after transformers' models/phi/modeling_phi.py, v5.x): one LayerNorm feeding attention and
the MLP in parallel (x + attn(ln(x)) + mlp(ln(x))), rotary embeddings on the first partial_rotary_factor of
each head, biases everywhere (the lm_head too), `self_attn.dense` as the output projection, optional q/k
LayerNorms, `model.final_layernorm`."""
from __future__ import annotations

from functools import partial

from ember import nn

from ..common.attention import Attention
from ..common.decoder import DecoderBlock
from ..common.mlp import MLP
from ..common.layout import LlamaLayout, build


class Phi2(LlamaLayout):
    def __init__(self, spec, config):
        super().__init__(spec, config)
        self.lm_head = nn.Linear(spec.dim, spec.vocab_size, bias=True)         # (vocab, dim) + (vocab,)
        self.model.final_layernorm = self.model.norm
        del self.model.norm

    def final_norm(self, x):
        return self.model.final_layernorm(x)

    def attention(self, s):
        qk = partial(nn.LayerNorm, eps=s.norm_eps) if self.hf_config.get("qk_layernorm") else None
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=True,
                         names=("q_proj", "k_proj", "v_proj", "dense"), qk_norm=qk)

    def mlp(self, s):
        return MLP(s.dim, s.hidden_dim, s.act, names=("fc1", "fc2"))

    def norm(self, s):
        return nn.LayerNorm(s.dim, eps=s.norm_eps)                              # (dim,) + (dim,)

    def block(self, s):
        return DecoderBlock(self.attention(s), self.mlp(s), self.norm(s), parallel=True)


def build_from_hf(config: dict, sd: dict, where: str) -> Phi2:
    return build(Phi2, {**config, "tie_word_embeddings": False}, sd, where, eps_field="layer_norm_eps",
                 act_default="gelu_new")
