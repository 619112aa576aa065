"""QEmbedding: a token embedding whose table may stay quantized (a GGUF's Q8_0 / Q4_K ... `token_embd`), read by
row and, tied, multiplied quantized for the output logits — or a float table held as a Parameter."""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F
from ember.quant import QTensor


class QEmbedding(nn.Module):
    """Token embedding whose table may stay quantized: forward dequantizes only the rows asked for; `logits`
    multiplies by the table (tied output) through the quantized matmul. A float table is a Parameter."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.num_embeddings, self.embedding_dim = vocab_size, dim
        self.weight = None  # (vocab_size, dim): set by load_table (no 262k-row placeholder is allocated)

    def load_table(self, w):
        """w: a QTensor (kept quantized, a plain attribute as QLinear keeps its own) or a float Tensor/array."""
        if tuple(w.shape) != (self.num_embeddings, self.embedding_dim):
            raise ValueError(f"ember: token embedding of shape {tuple(w.shape)} does not fit "
                             f"({self.num_embeddings}, {self.embedding_dim})")
        self.weight = w if isinstance(w, QTensor) else \
            nn.Parameter(w if isinstance(w, ember.Tensor) else ember.tensor(np.asarray(w, np.float32)))

    def forward(self, tokens):                                               # (B, T) int
        if isinstance(self.weight, QTensor):
            rows = self.weight.rows(tokens.numpy())  # (B * T, dim) float32; ids out of range: ValueError
            return ember.tensor(rows.reshape(*tokens.shape, self.embedding_dim), device=tokens.device)
        return F.embedding(tokens, self.weight)                              # (B, T, dim)

    def argmax_logits(self, x) -> int:                                       # (1, 1, dim) -> argmax of logits
        if isinstance(self.weight, QTensor):
            return self.weight.argmax_matmul_t(x)
        return F.linear_argmax(x, self.weight)

    def topk_logits(self, x, k: int):                                       # (1, 1, dim) -> (ids, logits)
        """The logits of a set of ids holding every one among the k largest (QTensor.topk_matmul_t)."""
        if isinstance(self.weight, QTensor):
            return self.weight.topk_matmul_t(x, k)
        y = self.logits(x).numpy().reshape(-1)
        return np.arange(y.size, dtype=np.int64), y

    def logits(self, x):                                                     # (B, T, dim) -> (B, T, vocab)
        if isinstance(self.weight, QTensor):
            return self.weight.linear(x)  # differentiable in x (adapters train below a quantized tied head)
        return F.linear(x, self.weight)
