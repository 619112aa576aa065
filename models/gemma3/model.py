"""Gemma 3 text decoder (after transformers' models/gemma3/modeling_gemma3.py, v5.x, and llama.cpp's
src/models/gemma3.cpp): interleaved sliding-window and global attention with their own rope bases, q/k RMSNorm,
pre- and post-norms around attention and MLP, a GeGLU MLP (tanh GELU), embeddings scaled by sqrt(dim), the
output tied to the embedding, grouped-query attention with an explicit KV cache.

Norm weights here are the *effective* scale: Gemma's checkpoints store w and multiply by (1 + w); llama.cpp's
converter adds the 1 when writing GGUF, and load.py does it for a Hugging Face folder, so every norm is a plain
nn.RMSNorm. The embedding is a QEmbedding (models/common/embedding.py): a QTensor read by row (and multiplied,
quantized, for the logits) or a float Parameter. Nothing here names a backend.
"""
from __future__ import annotations

import math

import numpy as np

from ember import nn

from ..common.attention import Attention
from ..common.decoder import CausalLM
from ..common.embedding import QEmbedding
from ..common.fused_decode import block_parts
from ..common.mlp import GatedMLP
from ..common.positions import RotaryEmbedding
from .config import Gemma3Config


def Block(c: Gemma3Config) -> nn.Module:
    norm = lambda: nn.RMSNorm(c.dim, eps=c.norm_eps)                            # (dim,) each
    attn = Attention(c.dim, c.n_heads, c.n_kv_heads, c.head_dim, scale=c.query_pre_attn_scalar ** -0.5,
                     qk_norm=lambda hd: nn.RMSNorm(hd, eps=c.norm_eps))
    return SandwichBlock(attn, GatedMLP(c.dim, c.hidden_dim, c.act), norm(), norm(), norm(), norm())


class SandwichBlock(nn.Module):
    """Gemma's norms on both sides of attention and of the MLP."""

    def __init__(self, attn, mlp, n1, n2, n3, n4):
        super().__init__()
        self.self_attn, self.mlp = attn, mlp
        self.input_layernorm, self.post_attention_layernorm = n1, n2
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = n3, n4

    def decode_parts(self, sources):  # for the fused decode step (models/common/fused_decode.py)
        return block_parts(sources, self.self_attn, self.mlp, self.input_layernorm, self.pre_feedforward_layernorm,
                           self.post_attention_layernorm, self.post_feedforward_layernorm)

    def forward(self, x, rope, mask, cache, layer):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, mask, cache, layer))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Backbone(nn.Module):
    def __init__(self, c: Gemma3Config):
        super().__init__()
        self.embed_tokens = QEmbedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = nn.RMSNorm(c.dim, eps=c.norm_eps)                           # (dim,)


class Gemma3(CausalLM):
    def __init__(self, config: Gemma3Config):
        super().__init__()
        self.config = c = config
        self.model = Backbone(c)
        self.embed_scale = float(np.float32(math.sqrt(c.dim)))  # as transformers rounds it: a float32 scalar
        ropes = {kind: RotaryEmbedding(c.head_dim, c.inv_freq(kind)) for kind in set(c.layer_types)}
        self.setup(rope=[ropes[k] for k in c.layer_types], **c.setup_args())

    @property
    def device(self):
        return self.model.norm.weight.device

    def _dtype(self):
        return self.model.norm.weight.dtype

    def _linear_weights(self):  # the tied float embedding is also the output weight: stored as F.linear reads it
        w = self.model.embed_tokens.weight
        return (w,) if isinstance(w, nn.Parameter) else ()

    def embed(self, tokens, positions):
        x = self.model.embed_tokens(tokens)                                     # (B, T, dim)
        if str(x.device) != str(self.device):  # quantized rows are read on the host, beside the (host) ids
            x = x.to(self.device)
        return x * self.embed_scale

    def head(self, x):
        logits = self.model.embed_tokens.logits(x)                              # (B, T, vocab)
        cap = self.config.final_logit_softcap
        return (logits / cap).tanh() * cap if cap else logits

    def greedy_head(self, x) -> int:
        """The id head(x) has its largest logit at, for one position x (1, 1, dim): greedy decoding's pick
        without the 262k logits where the embedding allows (QTensor.argmax_matmul_t). A soft cap (tanh) keeps
        the order but can round distinct logits to one float, so with a cap every logit is computed."""
        if self.config.final_logit_softcap:
            return int(np.argmax(self.head(x).numpy()))
        return self.model.embed_tokens.argmax_logits(x)

    def topk_head(self, x, k: int):
        """(ids, logits) of head(x) for one position x (1, 1, dim), over a set of ids that holds every one among
        the k largest logits: sampling's top-k without the 262k logits where the embedding allows it
        (QTensor.topk_matmul_t). With a soft cap every logit is computed (as greedy_head)."""
        if self.config.final_logit_softcap:
            y = self.head(x).numpy().reshape(-1)
            return np.arange(y.size, dtype=np.int64), y
        return self.model.embed_tokens.topk_logits(x, k)
