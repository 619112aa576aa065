"""Gemma3Config: the common DecoderSpec with Gemma 3 (text)'s defaults and fields — a second rope base for the
sliding layers, the query scale, the final logit soft cap — from GGUF metadata (`gemma3.*`) or a Hugging Face
config.json (Gemma3TextConfig, or the text_config of a Gemma3Config).

GGUF does not store what llama.cpp hard-codes for the architecture (src/llama-model.cpp, LLM_ARCH_GEMMA3):
every 6th layer is global (the rest slide over `sliding_window` tokens), sliding layers use rope base 10000,
and the query scale is 1/sqrt(head_dim) (query_pre_attn_scalar = head_dim; 27B is the exception).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ember.limits import check_config

from ..common.positions import rope_inv_freq
from ..common.spec import GLOBAL, SLIDING, DecoderConfigError, DecoderSpec, gguf_fields, hf_fields

SWA_PATTERN = 6            # llama.cpp's set_swa_pattern(6): layer i is global when (i + 1) % 6 == 0
LOCAL_ROPE_BASE = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3


class Gemma3ConfigError(DecoderConfigError):
    """A config that cannot describe a Gemma 3 model (names the source and the offending field)."""


@dataclass
class Gemma3Config(DecoderSpec):
    error = Gemma3ConfigError
    label = "gemma3 config"

    vocab_size: int = 262144
    dim: int = 640                 # hidden_size
    hidden_dim: int = 2048         # intermediate_size of the GeGLU MLP
    n_layers: int = 18
    n_heads: int = 4
    n_kv_heads: int = 1            # < n_heads: grouped-query attention
    head_dim: int = 256
    max_seq_len: int = 32768       # bounds the global layers' KV cache
    rope_theta: float = 1_000_000.0  # global layers
    tie_embeddings: bool = True
    act: str = "gelu_pytorch_tanh"
    sliding_window: int = 512
    layer_types: list | None = None  # SLIDING | GLOBAL per layer; None or [] -> the 5:1 pattern
    bos_token_id: int | None = 2
    eos_token_ids: list = field(default_factory=lambda: [1])
    model_type: str = "gemma3"
    rope_local_theta: float = LOCAL_ROPE_BASE  # sliding layers
    query_pre_attn_scalar: float | None = None  # None -> head_dim; scores scale by its -1/2 power
    final_logit_softcap: float | None = None

    def validate(self):
        if not self.layer_types and isinstance(self.n_layers, (int, np.integer)) and self.n_layers > 0:
            check_config(self.where, "layers", n_layers=self.n_layers)  # before the pattern's list is built
            self.layer_types = [GLOBAL if (i + 1) % SWA_PATTERN == 0 else SLIDING for i in range(self.n_layers)]
        super().validate()
        if not isinstance(self.sliding_window, (int, np.integer)) or self.sliding_window <= 0:
            raise Gemma3ConfigError(f"ember: {self.where}: field 'sliding_window' must be a positive int, "
                                    f"got {self.sliding_window!r}")
        if self.head_dim % 2:
            raise Gemma3ConfigError(f"ember: {self.where}: head_dim={self.head_dim} must be even for rotary embeddings")
        if self.query_pre_attn_scalar is None:
            self.query_pre_attn_scalar = float(self.head_dim)

    def replace(self, **kw) -> Gemma3Config:
        return dataclasses.replace(self, **kw)

    def inv_freq(self, layer_type: str) -> np.ndarray:
        """(head_dim / 2,) rotary frequencies of a layer kind, float32 as transformers computes them."""
        base = self.rope_local_theta if layer_type == SLIDING else self.rope_theta
        return rope_inv_freq(self.head_dim, base)[0]

    @classmethod
    def from_gguf(cls, md: dict, where: str) -> Gemma3Config:
        f = gguf_fields(md, "gemma3", where, Gemma3ConfigError, max_seq_len=32768, norm_eps=1e-6,
                        rope_theta=1_000_000.0, vocab_size=262144, bos=2, eos=1)
        # tied, one rope scaling-free base per layer kind (what ember's Gemma 3 computes), 512 unless stored
        f.update(tie_embeddings=True, rope_scaling=None, sliding_window=f["sliding_window"] or 512)
        return cls(**f, final_logit_softcap=md.get("gemma3.final_logit_softcapping"))

    @classmethod
    def from_hf(cls, d: dict, where: str = "config.json") -> Gemma3Config:
        d = d.get("text_config", d)
        rp = d.get("rope_parameters") or {}  # transformers >= 5: one dict per layer kind
        glob = (rp.get(GLOBAL) or {}).get("rope_theta", d.get("rope_theta", 1_000_000.0))
        local = (rp.get(SLIDING) or {}).get("rope_theta", d.get("rope_local_base_freq", LOCAL_ROPE_BASE))
        for kind in (GLOBAL, SLIDING):
            t = (rp.get(kind) or {}).get("rope_type", "default")
            if t != "default":
                raise Gemma3ConfigError(f"ember: {where}: rope_type {t!r} for {kind} is not supported (default)")
        if d.get("attn_logit_softcapping") is not None:
            raise Gemma3ConfigError(f"ember: {where}: attn_logit_softcapping is not supported (Gemma 3 has none)")
        f = hf_fields(d, where, Gemma3ConfigError, act_field="hidden_activation", act_default="gelu_pytorch_tanh",
                      max_seq_len=32768, bos=2, eos=1)
        f.update(model_type="gemma3", rope_theta=float(glob), rope_scaling=None, tie_embeddings=True,
                 sliding_window=f["sliding_window"] or 512)
        return cls(**f, rope_local_theta=float(local), query_pre_attn_scalar=d.get("query_pre_attn_scalar"),
                   final_logit_softcap=d.get("final_logit_softcapping"))
