"""nn.MoE against transformers' sparse MoE blocks (Mixtral top-2, Qwen2-MoE top-4 with a shared expert and no
renormalisation, Qwen3-MoE top-8 of 16): the block's state_dict loaded strictly, outputs and gradients (input
and every parameter) on every device; each expert runs only on its tokens."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
from nn_parity import compare, load_torch

transformers = pytest.importorskip("transformers")

H, FF, T = 16, 24, 7


def _blocks():
    from transformers import MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    return {
        "mixtral_top2": (lambda: MixtralSparseMoeBlock(MixtralConfig(hidden_size=H, intermediate_size=FF,
                                                                     num_local_experts=4, num_experts_per_tok=2)),
                         dict(num_experts=4, num_experts_per_tok=2)),
        "qwen2_moe_shared_top4": (lambda: Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(
            hidden_size=H, moe_intermediate_size=FF, num_experts=8, num_experts_per_tok=4, norm_topk_prob=False,
            shared_expert_intermediate_size=20)),
            dict(num_experts=8, num_experts_per_tok=4, norm_topk_prob=False, shared_expert_intermediate_size=20)),
        "qwen3_moe_top8": (lambda: Qwen3MoeSparseMoeBlock(Qwen3MoeConfig(
            hidden_size=H, moe_intermediate_size=FF, num_experts=16, num_experts_per_tok=8, norm_topk_prob=True)),
            dict(num_experts=16, num_experts_per_tok=8, norm_topk_prob=True)),
    }


@pytest.mark.parametrize("family", ["mixtral_top2", "qwen2_moe_shared_top4", "qwen3_moe_top8"])
def test_moe_matches_transformers(device, family):
    make, kw = _blocks()[family]
    torch.manual_seed(0)
    tm = make()
    with torch.no_grad():
        for p in tm.parameters():  # a bare block is uninitialised (the model's _init_weights fills it)
            p.normal_(0, 0.3)
    em = load_torch(nn.MoE(H, FF, **kw), tm, device, ordered=False)
    x = np.random.default_rng(0).standard_normal((2, T, H)).astype(np.float32)
    compare(em, tm, [x], device)


def test_moe_runs_experts_on_their_tokens_only(monkeypatch):
    """The expert matmuls see only routed tokens: rows multiplied = tokens * k, not tokens * experts."""
    em = nn.MoE(H, FF, num_experts=8, num_experts_per_tok=2)
    seen = []
    real = nn.moe.F.linear

    def spy(x, w, b=None):
        if tuple(w.shape) == (2 * FF, H):
            seen.append(x.shape[0])
        return real(x, w, b)
    monkeypatch.setattr(nn.moe.F, "linear", spy)
    em(ember.randn(T, H))
    assert sum(seen) == T * 2 and len(seen) <= 8


@pytest.mark.parametrize("kw,arg", [(dict(num_experts=4, num_experts_per_tok=5), "num_experts_per_tok"),
                                    (dict(num_experts=0), "num_experts"),
                                    (dict(num_experts=4, activation="swish"), "activation")])
def test_moe_bad_arguments(kw, arg):
    with pytest.raises(nn.LayerError, match=arg):
        nn.MoE(H, FF, **kw)
