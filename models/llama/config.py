"""LlamaConfig: the common DecoderSpec with Llama's defaults (the shipped demo model's dimensions) and checks,
built from a Hugging Face config.json, a llama2.c header or GGUF metadata (Llama 2, and Llama 3's GQA / rope
theta / llama3 rope scaling / tied embeddings); and the config.json it writes back."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..common.positions import rope_inv_freq
from ..common.spec import DecoderConfigError, DecoderSpec, hf_fields


class LlamaConfigError(DecoderConfigError):
    """A config that cannot describe a Llama model (names the offending field)."""


@dataclass
class LlamaConfig(DecoderSpec):
    error = LlamaConfigError
    label = "llama config"

    vocab_size: int = 32000
    dim: int = 288                 # hidden_size
    hidden_dim: int = 768          # intermediate_size of the SwiGLU MLP
    n_layers: int = 6
    n_heads: int = 6
    n_kv_heads: int = 6            # < n_heads: grouped-query attention
    max_seq_len: int = 256         # bounds the KV cache
    norm_eps: float = 1e-5
    bos_token_id: int | None = 1
    eos_token_ids: list = field(default_factory=lambda: [2])
    model_type: str = "llama"

    def validate(self):
        super().validate()
        if self.head_dim % 2:
            raise LlamaConfigError(f"ember: llama config head_dim={self.head_dim} must be even for rotary embeddings")
        if self.rope_scaling is not None:
            if not isinstance(self.rope_scaling, dict):
                raise LlamaConfigError(f"ember: llama config rope_scaling must be an object, got {self.rope_scaling!r}")
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("llama3", "linear", "default"):
                raise LlamaConfigError(f"ember: llama rope_scaling type {kind!r} is not supported (llama3, linear)")

    @property
    def n_params(self) -> int:
        hd, d = self.head_dim, self.dim
        attn = d * hd * (self.n_heads + 2 * self.n_kv_heads) + self.n_heads * hd * d
        layer = attn + 3 * d * self.hidden_dim + 2 * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.n_layers * layer + d + head

    def inv_freq(self) -> np.ndarray:
        """(head_dim // 2,) rotary frequencies, with Llama 3 / linear scaling as transformers applies it."""
        return rope_inv_freq(self.head_dim, self.rope_theta, self.rope_scaling)[0]

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_hf(cls, c: dict) -> LlamaConfig:
        """A transformers LlamaConfig dict (config.json)."""
        return cls(**hf_fields(c, "llama config.json", LlamaConfigError, bos=1, eos=2))

    @classmethod
    def from_gguf(cls, md: dict, where: str) -> LlamaConfig:
        """`llama.*` metadata (tied embeddings are settled by the tensors: llama.cpp omits output.weight)."""
        return super().from_gguf(md, where, bos=1)

    def check_weights(self, shapes: dict, where: str):
        """Refuse a config that sizes a model far bigger than the weights file (name -> shape) before the model
        is built: a forged config.json would otherwise allocate for layers no file holds. Exact shape
        mismatches are left to the strict loader, which lists them all."""
        present = sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())
        if self.n_params > 2 * present + (1 << 20):
            raise LlamaConfigError(f"ember: {where}: config.json describes {self.n_params} parameters, the weights "
                                   f"hold {present} (vocab_size={self.vocab_size}, hidden_size={self.dim}, "
                                   f"num_hidden_layers={self.n_layers}, intermediate_size={self.hidden_dim})")

    def to_hf(self) -> dict:
        """The config.json transformers' LlamaForCausalLM reads."""
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": self.vocab_size,
                "hidden_size": self.dim, "intermediate_size": self.hidden_dim, "num_hidden_layers": self.n_layers,
                "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv_heads,
                "head_dim": self.head_dim, "max_position_embeddings": self.max_seq_len, "rms_norm_eps": self.norm_eps,
                "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling,
                "tie_word_embeddings": self.tie_embeddings, "bos_token_id": self.bos_token_id,
                "eos_token_id": self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else self.eos_token_ids,
                "hidden_act": self.act, "attention_bias": False, "mlp_bias": False}

    def replace(self, **kw) -> LlamaConfig:
        return dataclasses.replace(self, **kw)
