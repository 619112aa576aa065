"""Gemma3Config: Gemma 3 (text) dimensions from GGUF metadata (`gemma3.*`) or a Hugging Face config.json
(Gemma3TextConfig, or the text_config of a Gemma3Config).

GGUF does not store what llama.cpp hard-codes for the architecture (src/llama-model.cpp, LLM_ARCH_GEMMA3):
every 6th layer is global (the rest slide over `sliding_window` tokens), sliding layers use rope base 10000,
and the query scale is 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim; 27B is the exception).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..common.positions import rope_inv_freq
from ember.errors import FormatError
from ember.io.gguf import arch_fields


class Gemma3ConfigError(FormatError):
    """A config that cannot describe a Gemma 3 model (names the source and the offending field)."""


SLIDING, GLOBAL = "sliding_attention", "full_attention"
SWA_PATTERN = 6            # llama.cpp's set_swa_pattern(6): layer i is global when (i + 1) % 6 == 0
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3


@dataclass
class Gemma3Config:
    vocab_size: int = 262144
    dim: int = 640                 # hidden_size
    hidden_dim: int = 2048         # intermediate_size of the GeGLU MLP
    n_layers: int = 18
    n_heads: int = 4
    n_kv_heads: int = 1            # < n_heads: grouped-query attention
    head_dim: int = 256
    max_seq_len: int = 32768       # bounds the global layers' KV cache
    sliding_window: int = 512      # a sliding layer's query at p sees keys p - window < k <= p
    layer_types: list = field(default_factory=list)   # SLIDING | GLOBAL per layer; [] -> the 5:1 pattern
    rope_theta: float = 1_000_000.0        # global layers
    rope_local_theta: float = LOCAL_ROPE_BASE  # sliding layers
    query_pre_attn_scalar: float | None = None  # None -> head_dim; scores scale by its -1/2 power
    norm_eps: float = 1e-6
    final_logit_softcap: float | None = None
    bos_token_id: int | None = 2
    eos_token_ids: list = field(default_factory=lambda: [1])

    def __post_init__(self):
        if not self.layer_types:
            self.layer_types = [GLOBAL if (i + 1) % SWA_PATTERN == 0 else SLIDING for i in range(self.n_layers)]
        if self.query_pre_attn_scalar is None:
            self.query_pre_attn_scalar = float(self.head_dim)
        self.validate()

    def validate(self, where: str = "gemma3 config"):
        for name in ("vocab_size", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                     "max_seq_len", "sliding_window"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v <= 0:
                raise Gemma3ConfigError(f"ember: {where}: field {name!r} must be a positive int, got {v!r}")
        if self.n_heads % self.n_kv_heads:
            raise Gemma3ConfigError(f"ember: {where}: n_heads={self.n_heads} is not a multiple of "
                                    f"n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise Gemma3ConfigError(f"ember: {where}: head_dim={self.head_dim} must be even for rotary embeddings")
        if len(self.layer_types) != self.n_layers or set(self.layer_types) - {SLIDING, GLOBAL}:
            raise Gemma3ConfigError(f"ember: {where}: layer_types must list {self.n_layers} entries of "
                                    f"{SLIDING!r} / {GLOBAL!r}, got {self.layer_types!r}")

    def replace(self, **kw) -> "Gemma3Config":
        return dataclasses.replace(self, **kw)

    def inv_freq(self, layer_type: str) -> np.ndarray:
        """(head_dim / 2,) rotary frequencies of a layer kind, float32 as transformers computes them."""
        base = self.rope_local_theta if layer_type == SLIDING else self.rope_theta
        return rope_inv_freq(self.head_dim, base)[0]

    @classmethod
    def from_gguf(cls, md: dict, where: str) -> "Gemma3Config":
        g = arch_fields(md, "gemma3", where, error=Gemma3ConfigError)
        heads = int(g("attention.head_count"))
        dim = int(g("embedding_length"))
        window = g("attention.sliding_window", 512)
        if isinstance(window, list):  # llama.cpp reads it as a key or a per-layer array
            window = max(window)
        eos = md.get("tokenizer.ggml.eos_token_id", 1)
        return cls(vocab_size=len(md.get("tokenizer.ggml.tokens", [])) or int(g("vocab_size", 262144)),
                   dim=dim, hidden_dim=int(g("feed_forward_length")), n_layers=int(g("block_count")),
                   n_heads=heads, n_kv_heads=int(g("attention.head_count_kv", heads)),
                   head_dim=int(g("attention.key_length", dim // heads)),
                   max_seq_len=int(g("context_length", 32768)), sliding_window=int(window),
                   rope_theta=float(g("rope.freq_base", 1_000_000.0)),
                   norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-6)),
                   final_logit_softcap=g("final_logit_softcapping"),
                   bos_token_id=md.get("tokenizer.ggml.bos_token_id", 2), eos_token_ids=[int(eos)])

    @classmethod
    def from_hf(cls, d: dict, where: str = "config.json") -> "Gemma3Config":
        d = d.get("text_config", d)
        rp = d.get("rope_parameters") or {}
        glob = (rp.get(GLOBAL) or {}).get("rope_theta", d.get("rope_theta", 1_000_000.0))
        local = (rp.get(SLIDING) or {}).get("rope_theta", d.get("rope_local_base_freq", LOCAL_ROPE_BASE))
        for kind in (GLOBAL, SLIDING):
            t = (rp.get(kind) or {}).get("rope_type", "default")
            if t != "default":
                raise Gemma3ConfigError(f"ember: {where}: rope_type {t!r} for {kind} is not supported (default)")
        if d.get("attn_logit_softcapping") is not None:
            raise Gemma3ConfigError(f"ember: {where}: attn_logit_softcapping is not supported (Gemma 3 has none)")
        eos = d.get("eos_token_id", 1)
        heads = int(d["num_attention_heads"])
        return cls(vocab_size=int(d["vocab_size"]), dim=int(d["hidden_size"]), hidden_dim=int(d["intermediate_size"]),
                   n_layers=int(d["num_hidden_layers"]), n_heads=heads,
                   n_kv_heads=int(d.get("num_key_value_heads", heads)),
                   head_dim=int(d.get("head_dim") or d["hidden_size"] // heads),
                   max_seq_len=int(d.get("max_position_embeddings", 32768)),
                   sliding_window=int(d.get("sliding_window", 512)), layer_types=list(d.get("layer_types") or []),
                   rope_theta=float(glob), rope_local_theta=float(local),
                   query_pre_attn_scalar=d.get("query_pre_attn_scalar"), norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                   final_logit_softcap=d.get("final_logit_softcapping"), bos_token_id=d.get("bos_token_id", 2),
                   eos_token_ids=list(eos) if isinstance(eos, list) else [eos])
