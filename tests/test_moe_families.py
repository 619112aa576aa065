"""Mixtral, Qwen2-MoE and Qwen3-MoE against transformers on random-weight configs saved here as Hugging Face
folders (per-expert hub names, stacked on load): logits within 1e-4 relative (whole prompt, and through the KV
cache in two steps) and greedy tokens equal to transformers' generate. Top-2 of 4 (Mixtral, sliding window),
top-8 of 16 with a shared expert and a dense layer (Qwen2-MoE), top-8 of 16 renormalised with q/k norms
(Qwen3-MoE)."""
from __future__ import annotations

import pytest

import ember
from ember.models.auto import from_pretrained
from ember.models.common.generate import SamplingParams, generate
from zoo_reference import check_logits, random_ids, reference_greedy, saved_fixture

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 101
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def _configs():
    t = transformers
    return {
        "mixtral": lambda: t.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2, sliding_window=6),
        "qwen2_moe": lambda: t.Qwen2MoeConfig(**{**SMALL, "num_hidden_layers": 3}, num_experts=16,
                                              num_experts_per_tok=8, moe_intermediate_size=16,
                                              shared_expert_intermediate_size=24, mlp_only_layers=[1],
                                              norm_topk_prob=False),
        "qwen3_moe": lambda: t.Qwen3MoeConfig(**SMALL, head_dim=8, num_experts=16, num_experts_per_tok=8,
                                              moe_intermediate_size=16, norm_topk_prob=True),
    }


CONFIGS = _configs()


saved = saved_fixture(CONFIGS)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_moe_logits_match_transformers(saved, kind, device):
    ref, folder = saved(kind)
    model = from_pretrained(folder, device=device)
    assert isinstance(model.model.layers[0].mlp, ember.nn.MoE)
    check_logits(model, ref, random_ids(13, V, rows=2))


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_moe_greedy_tokens_match_transformers(saved, kind, device):
    ref, folder = saved(kind)
    model = from_pretrained(folder, device=device)
    prompt = random_ids(5, V, seed=1)
    n = 10 if device == "cpu" else 5   # past Mixtral's sliding window (6) on cpu
    want = reference_greedy(ref, prompt[0].tolist(), n)
    assert list(generate(model, prompt[0].tolist(), n, SamplingParams(temperature=0))) == want


def test_a_missing_expert_matrix_is_named(saved, tmp_path):
    from ember.models.common.hf_folder import read_config, read_state_dict
    from ember.models.common.moe import MoEWeightsError
    from ember.models.mixtral.model import build_from_hf
    from ember import hub
    _, folder = saved("mixtral")
    src = hub.resolve(str(folder))
    sd = read_state_dict(src)
    del sd["model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    with pytest.raises(MoEWeightsError, match=r"experts\.2 lacks \['w3'\]"):
        build_from_hf(read_config(src), sd, str(folder))


@pytest.mark.parametrize("field,value,match", [("num_experts_per_tok", 5, "exceeds the 4 experts"),
                                               ("num_local_experts", 0, "'num_experts' must be a positive int")])
def test_unusable_expert_counts_are_named(saved, field, value, match):
    from ember import hub
    from ember.models.common.hf_folder import read_config, read_state_dict
    from ember.models.common.spec import DecoderConfigError
    from ember.models.mixtral.model import build_from_hf
    _, folder = saved("mixtral")
    src = hub.resolve(str(folder))
    config = {**read_config(src), field: value}
    with pytest.raises(DecoderConfigError, match=match):
        build_from_hf(config, read_state_dict(src), str(folder))
