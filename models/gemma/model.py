"""Gemma (after transformers' models/gemma/modeling_gemma.py, v5.x): the llama layout with a GeGLU MLP
(tanh GELU), embeddings scaled by sqrt(hidden_size), the output tied to the embedding, and RMSNorms that
multiply by (1 + w): the checkpoint stores w, and 1 is added once at load so every norm is a plain RMSNorm
(as models/gemma3 does)."""
from __future__ import annotations

import math

import numpy as np

import ember

from ..common.layout import LlamaLayout, build


class Gemma(LlamaLayout):
    def __init__(self, spec, config):
        super().__init__(spec, config)
        self.embed_scale = float(np.float32(math.sqrt(spec.dim)))  # transformers rounds it to the weights' dtype

    def embed(self, tokens, positions):
        return self.model.embed_tokens(tokens) * self.embed_scale               # (B, T, dim)


def build_from_hf(config: dict, sd: dict, where: str) -> Gemma:
    if config.get("attn_logit_softcapping") or config.get("final_logit_softcapping"):
        raise ValueError(f"ember: {where}: logit soft-capping (Gemma 2) is not supported by the gemma family")
    sd = {k: ember.tensor(v.numpy() + np.float32(1)) if k.endswith("norm.weight") else v for k, v in sd.items()}
    act = config.get("hidden_activation") or "gelu_pytorch_tanh"
    return build(Gemma, {**config, "hidden_act": act}, sd, where, tie_default=True)
