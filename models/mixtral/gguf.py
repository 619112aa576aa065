"""Mixtral's GGUF architecture: llama.cpp writes Mixtral as `llama` with `llama.expert_count` /
`llama.expert_used_count` and stacked expert tensors (models/common/moe_gguf.py); q/k rows in llama.cpp's
interleaved-pair rotary layout, permuted back on load. Experts are renormalised top-k, as Mixtral always is."""
from __future__ import annotations

from ..common.gguf import LLAMA_TOP_NAMES, GGUFArchitecture
from ..common.moe_gguf import MOE_LAYER_NAMES, build_moe, moe_spec
from .model import Mixtral


def config(md: dict, where: str):
    return moe_spec(md, where, "llama", norm_topk_prob=True, rope_theta=10000.0)


GGUF = GGUFArchitecture("llama", MOE_LAYER_NAMES, LLAMA_TOP_NAMES, config,
                        lambda spec, sd, where: build_moe(Mixtral, spec, sd, where), rotary_pairs=True)
