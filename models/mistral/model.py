"""Llama-layout decoders from Hugging Face checkpoints: Mistral (sliding-window attention) and Qwen2 (q/k/v
biases, sliding window on the layers from max_window_layers on), after transformers' modeling_mistral.py /
modeling_qwen2.py (v5.x), and the base the other llama-layout families (gemma, phi3, starcoder2) vary:
`model.embed_tokens`, `model.layers.N.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
post_attention_layernorm}`, `model.norm`, `lm_head` (or tied). Everything else is the toolkit's.
"""
from __future__ import annotations

from ember import nn

from ..common.attention import Attention
from ..common.config import DecoderSpec
from ..common.decoder import CausalLM, DecoderBlock
from ..common.mlp import GatedMLP


class Backbone(nn.Module):
    def __init__(self, s: DecoderSpec, block, norm):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.dim)                   # (vocab, dim)
        self.layers = nn.ModuleList([block(s) for _ in range(s.n_layers)])
        self.norm = norm(s)                                                     # (dim,)


class LlamaLayout(CausalLM):
    """A decoder with the llama layout; subclasses override attention(), mlp(), norm() or embed()."""

    attn_bias = False
    rope_layout = "half"

    def __init__(self, spec: DecoderSpec, config: dict):
        super().__init__()
        self.spec, self.hf_config = spec, config
        self.tie_embeddings = spec.tie_embeddings
        self.model = Backbone(spec, self.block, self.norm)
        if not spec.tie_embeddings:
            self.lm_head = nn.Linear(spec.dim, spec.vocab_size, bias=False)     # (vocab, dim)
        self.setup(rope=spec.rotary(self.rope_layout), **spec.setup_args())

    # ------------------------------------------------------------------ what the families vary
    def attention(self, s: DecoderSpec):
        return Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=self.attn_bias, out_bias=False)

    def mlp(self, s: DecoderSpec):
        return GatedMLP(s.dim, s.hidden_dim, s.act)

    def norm(self, s: DecoderSpec):
        return nn.RMSNorm(s.dim, eps=s.norm_eps)                                # (dim,)

    def block(self, s: DecoderSpec):
        return DecoderBlock(self.attention(s), self.mlp(s), self.norm(s), self.norm(s))

    def embed(self, tokens, positions):
        return self.model.embed_tokens(tokens)                                  # (B, T, dim)

    @property
    def config(self):
        return self.spec


class Mistral(LlamaLayout):
    pass


class Qwen2(LlamaLayout):
    attn_bias = True


def build(cls, config: dict, sd: dict, where: str, **spec_kw):
    """A cls model from config.json and a strict load of the checkpoint (a tied lm_head copy is dropped)."""
    spec = DecoderSpec.from_hf(config, **spec_kw)
    model = cls(spec, config)
    if spec.tie_embeddings:
        sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    model.load_state_dict(sd, strict=True, source=where)
    return model


def build_from_hf(config: dict, sd: dict, where: str):
    return build(Qwen2 if config.get("model_type") == "qwen2" else Mistral, config, sd, where)
