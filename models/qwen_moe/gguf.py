"""Qwen2-MoE (`qwen2moe`) and Qwen3-MoE (`qwen3moe`) GGUF architectures (llama.cpp's names; rotate-half rotary,
no q/k permutation): stacked experts, Qwen2-MoE's shared expert (`*_shexp`, its gate `ffn_gate_inp_shexp`),
Qwen3-MoE's q/k norms (models/common/moe_gguf.py). llama.cpp renormalises the top-k weights for qwen3moe and
not for qwen2moe, unless `{arch}.expert_weights_norm` says otherwise."""
from __future__ import annotations

from ..common.gguf import LLAMA_TOP_NAMES, GGUFArchitecture
from ..common.moe_gguf import MOE_LAYER_NAMES, build_moe, moe_spec
from .model import Qwen2MoE, Qwen3MoE


def _arch(name: str, cls, norm: bool) -> GGUFArchitecture:
    return GGUFArchitecture(name, MOE_LAYER_NAMES, LLAMA_TOP_NAMES,
                            lambda md, where: moe_spec(md, where, name, norm_topk_prob=norm, norm_eps=1e-6),
                            lambda spec, sd, where: build_moe(cls, spec, sd, where))


QWEN2MOE = _arch("qwen2moe", Qwen2MoE, False)
QWEN3MOE = _arch("qwen3moe", Qwen3MoE, True)
