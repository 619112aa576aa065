"""DistilBERT encoder (after transformers' models/distilbert/modeling_distilbert.py): BERT's embeddings
without token types, post-norm blocks named attention.{q,k,v,out}_lin / sa_layer_norm / ffn.lin1, lin2 /
output_layer_norm, no pooler. The heads and MLP are the toolkit's."""
from __future__ import annotations

import numpy as np

import ember
from ember import nn

from ..common.attention import Attention
from ..common.masks import padding_mask
from ..common.mlp import MLP
from .config import BertConfig
from .model import BaseModelOutput, Embeddings


class Layer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = Attention(c.dim, c.n_heads, bias=True, names=("q_lin", "k_lin", "v_lin", "out_lin"))
        self.sa_layer_norm = nn.LayerNorm(c.dim, eps=c.norm_eps)                    # (dim,)
        self.ffn = MLP(c.dim, c.hidden_dim, c.act, names=("lin1", "lin2"))
        self.output_layer_norm = nn.LayerNorm(c.dim, eps=c.norm_eps)                # (dim,)

    def forward(self, x, mask):
        x = self.sa_layer_norm(self.attention(x, mask=mask) + x)
        return self.output_layer_norm(self.ffn(x) + x)                              # (B, T, dim)


class Transformer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c.n_layers)])


class DistilBertModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = c = config
        self.embeddings = Embeddings(c)
        self.transformer = Transformer(c)

    @property
    def device(self):
        return self.embeddings.word_embeddings.weight.device

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> BaseModelOutput:
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids, np.int64)  # (B, T)
        if ids.shape[1] > self.config.max_positions:
            raise ValueError(f"ember: {ids.shape[1]} tokens exceed the model's {self.config.max_positions} positions")
        dev = self.device
        mask = None if attention_mask is None else padding_mask(attention_mask, self.embeddings.LayerNorm.weight.dtype,
                                                                dev)       # (B, 1, 1, T)
        pos = np.ascontiguousarray(np.broadcast_to(np.arange(ids.shape[1]), ids.shape))
        x = self.embeddings(ember.tensor(ids, device=dev), ember.tensor(pos, device=dev), None)  # (B, T, dim)
        for layer in self.transformer.layer:
            x = layer(x, mask)
        return BaseModelOutput(x)
