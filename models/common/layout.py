"""The llama layout, the decoder most families vary: `model.embed_tokens`, `model.layers.N.{self_attn.{q,k,v,o}_proj,
mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm}`, `model.norm`, `lm_head` (or tied), pre-norm
blocks (DecoderBlock), RMSNorm, a gated MLP, rotary positions from the spec (after transformers'
modeling_llama.py / modeling_mistral.py, v5.x). A family subclasses LlamaLayout and overrides what differs:
attention(), mlp(), norm(), block() or embed().

    class Qwen2(LlamaLayout):
        attn_bias = True
"""
from __future__ import annotations

import numpy as np

from ember import nn
from ember.nn import functional as F

from .attention import Attention
from .decoder import CausalLM, DecoderBlock
from .embedding import QEmbedding
from .mlp import GatedMLP
from .spec import DecoderSpec


class Backbone(nn.Module):
    def __init__(self, s: DecoderSpec, block, norm):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.dim)                   # (vocab, dim)
        self.layers = nn.ModuleList([block(s) for _ in range(s.n_layers)])
        self.norm = norm(s)                                                     # (dim,)


class LlamaLayout(CausalLM):
    """A decoder with the llama layout; subclasses override attention(), mlp(), norm(), block() or embed().
    config: the config.json dict a family reads its own extra keys from."""

    attn_bias = False
    rope_layout = "half"

    def __init__(self, spec: DecoderSpec, config: dict | None = None):
        super().__init__()
        self.spec, self.hf_config = spec, config or {}
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
        x = self.model.embed_tokens(tokens)                                     # (B, T, dim)
        if str(x.device) != str(self.device):  # a quantized table's rows are read on the host, beside the ids
            x = x.to(self.device)
        return x

    # ------------------------------------------------------------------ a quantized tied embedding (GGUF)
    def _quantized_output(self) -> QEmbedding | None:
        emb = self.model.embed_tokens
        return emb if self.tie_embeddings and isinstance(emb, QEmbedding) else None

    def _linear_weights(self):
        return super()._linear_weights() if self._quantized_output() is None else ()

    def head(self, x):
        q = self._quantized_output()
        return q.logits(x) if q is not None else super().head(x)               # (B, T, vocab)

    def greedy_head(self, x) -> int:
        """The id of head(x)'s largest logit for one position x (1, 1, dim) (generate's greedy pick)."""
        q = self._quantized_output()
        if q is not None:
            return q.argmax_logits(x)
        weight = self._output_weight()
        return F.linear_argmax(x, weight) if weight is not None else int(np.argmax(self.head(x).numpy()))

    def _output_weight(self):
        """The (vocab, dim) weight head(x) is x @ weight.T with (a tied embedding's, a bias-free nn.Linear's), or
        None where the head is more than that (a family's own head, a LoRA-wrapped or quantized lm_head)."""
        if type(self).head is not LlamaLayout.head:
            return None
        if self.tie_embeddings:
            return self.output_embedding()
        head = self.lm_head
        return head.weight if type(head) is nn.Linear and head.bias is None else None

    def topk_head(self, x, k: int):
        """(ids, logits) of head(x) over ids holding every one among the k largest (generate's top-k draw)."""
        q = self._quantized_output()
        if q is not None:
            return q.topk_logits(x, k)
        y = self.head(x).numpy().reshape(-1)
        return np.arange(y.size, dtype=np.int64), y

    @property
    def config(self):
        return self.spec


def build(cls, config: dict, sd: dict, where: str, **spec_kw):
    """A cls model from config.json and a strict load of the checkpoint (a tied lm_head copy is dropped)."""
    spec = DecoderSpec.from_hf(config, **spec_kw)
    model = cls(spec, config)
    if spec.tie_embeddings:
        sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
    model.load_state_dict(sd, strict=True, source=where)
    return model
