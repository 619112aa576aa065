"""LlamaConfig: the model's dimensions, built from a Hugging Face config.json, a llama2.c header or GGUF
metadata (Llama 2, and Llama 3's GQA / rope theta / llama3 rope scaling / tied embeddings)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ...errors import EmberError, FormatError
from ...limits import check_config
from ..common.positions import rope_inv_freq


class LlamaConfigError(FormatError):
    """A config that cannot describe a Llama model (names the offending field)."""


@dataclass
class LlamaConfig:
    vocab_size: int = 32000
    dim: int = 288                 # hidden_size
    hidden_dim: int = 768          # intermediate_size of the SwiGLU MLP
    n_layers: int = 6
    n_heads: int = 6
    n_kv_heads: int = 6            # < n_heads: grouped-query attention
    max_seq_len: int = 256         # bounds the KV cache
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None   # {"rope_type": "llama3" | "linear", "factor": ..., ...}
    tie_embeddings: bool = False
    head_dim: int | None = None    # defaults to dim // n_heads
    bos_token_id: int | None = 1
    eos_token_ids: list = field(default_factory=lambda: [2])

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.dim // max(self.n_heads, 1)
        self.validate()

    def validate(self):
        for name in ("vocab_size", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "max_seq_len", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise LlamaConfigError(f"ember: llama config field {name!r} must be a positive int, got {v!r}")
        where = "llama config"
        check_config(where, "vocab", vocab_size=self.vocab_size)
        check_config(where, "width", dim=self.dim, hidden_dim=self.hidden_dim, n_heads=self.n_heads,
                     head_dim=self.head_dim)
        check_config(where, "layers", n_layers=self.n_layers)
        check_config(where, "context", max_seq_len=self.max_seq_len)  # sizes the rope tables and KV cache
        if self.n_heads % self.n_kv_heads:
            raise LlamaConfigError(f"ember: llama config n_heads={self.n_heads} is not a multiple of "
                                   f"n_kv_heads={self.n_kv_heads}")
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

    # ------------------------------------------------------------------ rotary tables
    def inv_freq(self) -> np.ndarray:
        """(head_dim // 2,) rotary frequencies, with Llama 3 / linear scaling as transformers applies it."""
        return rope_inv_freq(self.head_dim, self.rope_theta, self.rope_scaling)[0]

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_hf(cls, c: dict) -> LlamaConfig:
        """A transformers LlamaConfig dict (config.json)."""
        try:
            n_heads = c["num_attention_heads"]
            # transformers >= 5 keeps rope_theta and the scaling in one `rope_parameters` dict
            rp = dict(c.get("rope_parameters") or {})
            theta = rp.pop("rope_theta", c.get("rope_theta", 10000.0))
            scaling = rp if rp.get("rope_type", "default") != "default" else c.get("rope_scaling")
            eos = c.get("eos_token_id", 2)
            return cls(vocab_size=c["vocab_size"], dim=c["hidden_size"], hidden_dim=c["intermediate_size"],
                       n_layers=c["num_hidden_layers"], n_heads=n_heads,
                       n_kv_heads=c.get("num_key_value_heads") or n_heads,
                       max_seq_len=c.get("max_position_embeddings", 2048), norm_eps=c.get("rms_norm_eps", 1e-6),
                       rope_theta=float(theta), rope_scaling=scaling,
                       tie_embeddings=bool(c.get("tie_word_embeddings", False)), head_dim=c.get("head_dim"),
                       bos_token_id=c.get("bos_token_id", 1),
                       eos_token_ids=list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos]))
        except KeyError as e:
            raise LlamaConfigError(f"ember: llama config.json lacks the field {e.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as e:  # e.g. "rope_theta": [1], "eos_token_id": {}
            if isinstance(e, EmberError):  # the checks' own errors (LimitError ...) pass through
                raise
            raise LlamaConfigError(f"ember: llama config.json holds a value of the wrong type ({e})") from None

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
                "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}

    def replace(self, **kw) -> LlamaConfig:
        return dataclasses.replace(self, **kw)
