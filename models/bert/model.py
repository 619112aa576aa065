"""BERT and RoBERTa encoders (after transformers' models/bert/modeling_bert.py and roberta/modeling_roberta.py,
v4.4x-5.x): word + position + token-type embeddings, post-norm blocks of bidirectional attention and a GELU
MLP, the tanh pooler. Names are BertModel's / RobertaModel's (`embeddings.*`, `encoder.layer.N.*`,
`pooler.dense`); the toolkit's Attention does the heads, the padding mask comes from common/masks.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F

from ..common.attention import Attention
from ..common.masks import padding_mask
from ..common.mlp import LINEAR_ACTS, activation, linear_then_act
from .config import BertConfig


@dataclass
class BaseModelOutput:
    last_hidden_state: object          # (B, T, dim)
    pooler_output: object = None       # (B, dim): tanh(dense(first token)), when the model has a pooler


class Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.dim)                    # (vocab, dim)
        self.position_embeddings = nn.Embedding(c.max_positions, c.dim)             # (max_positions, dim)
        if c.type_vocab_size:
            self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.dim)     # (type_vocab, dim)
        self.LayerNorm = nn.LayerNorm(c.dim, eps=c.norm_eps)                        # (dim,)
        self.has_types = bool(c.type_vocab_size)

    def forward(self, input_ids, positions, token_type_ids):
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)   # (B, T, dim)
        if self.has_types:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class Dense(nn.Module):
    """dense -> (act) or dense -> + residual -> LayerNorm: BERT's `intermediate` and `output` modules. act:
    config.json's activation name; a float Linear and an activation F.linear_act takes run as that one op."""

    def __init__(self, d_in, d_out, eps=None, act=None):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)                                         # (d_out, d_in)
        if eps is not None:
            self.LayerNorm = nn.LayerNorm(d_out, eps=eps)                           # (d_out,)
        self.act, self.fused_act = None if act is None else activation(act), LINEAR_ACTS.get(act)

    def forward(self, x, residual=None):
        if residual is None:
            return linear_then_act(self.dense, x, self.fused_act, self.act)
        return self.LayerNorm(self.dense(x) + residual)


class AttentionBlock(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        # `self` holds query/key/value (the heads), `output` the projection + residual norm: BERT's names
        setattr(self, "self", Attention(c.dim, c.n_heads, bias=True, names=("query", "key", "value", None)))
        self.output = Dense(c.dim, c.dim, c.norm_eps)

    def forward(self, x, mask):
        return self.output(getattr(self, "self")(x, mask=mask), x)


class Layer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = AttentionBlock(c)
        self.intermediate = Dense(c.dim, c.hidden_dim, act=c.act)
        self.output = Dense(c.hidden_dim, c.dim, c.norm_eps)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)                                 # (B, T, dim)


class Encoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c.n_layers)])


class Pooler(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.dim, c.dim)                                        # (dim, dim)

    def forward(self, x):
        return F.tanh(self.dense(x.narrow(1, 0, 1).reshape(x.shape[0], x.shape[2])))  # (B, dim)


class BertModel(nn.Module):
    """BertModel / RobertaModel: model(input_ids, attention_mask, token_type_ids).last_hidden_state."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = c = config
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)
        if c.pooler:
            self.pooler = Pooler(c)

    @property
    def device(self):
        return self.embeddings.word_embeddings.weight.device

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """(B, T) position ids: 0.. for BERT; RoBERTa counts from padding_idx + 1 over non-padding tokens."""
        if self.config.roberta:
            pad = self.config.pad_token_id
            real = ids != pad
            return np.where(real, np.cumsum(real, 1) + pad, pad)
        return np.broadcast_to(np.arange(ids.shape[1]), ids.shape)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> BaseModelOutput:
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids, np.int64)  # (B, T)
        B, T = ids.shape
        if T > self.config.max_positions - (self.config.pad_token_id + 1 if self.config.roberta else 0):
            raise ValueError(f"ember: {T} tokens exceed the model's {self.config.max_positions} positions")
        dev = self.device
        types = np.zeros_like(ids) if token_type_ids is None else np.asarray(
            token_type_ids.numpy() if hasattr(token_type_ids, "numpy") else token_type_ids, np.int64)
        mask = None if attention_mask is None else padding_mask(attention_mask, self.embeddings.LayerNorm.weight.dtype,
                                                                dev)       # (B, 1, 1, T)
        x = self.embeddings(ember.tensor(ids, device=dev), ember.tensor(np.ascontiguousarray(self.positions(ids)),
                            device=dev), ember.tensor(types, device=dev))  # (B, T, dim)
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return BaseModelOutput(x, self.pooler(x) if self.config.pooler else None)
