"""The two-matrix MLPs (models/common MLP, Whisper's blocks) run a float fc1 and its activation as one op
(F.linear_act): the same bits as fc1, then the activation, for the layouts a loader gives; composed where fc1 has
no bias."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.models.common.mlp import MLP
from ember.models.whisper.model import ResidualAttentionBlock


def _weights(module, seed):
    """Random weights in the layout ember's loaders store natively (a Linear's weight input-major)."""
    rng = np.random.default_rng(seed)
    for p in module.parameters():
        w = (rng.standard_normal(p.shape) * 0.1).astype(np.float32)
        p._data = np.asfortranarray(w) if w.ndim == 2 else w


@pytest.fixture
def fused_calls(monkeypatch):
    calls = []
    real = F.linear_act

    def spy(x, weight, bias, act="gelu"):
        calls.append(act)
        return real(x, weight, bias, act)
    monkeypatch.setattr(F, "linear_act", spy)
    return calls


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "silu"])
@pytest.mark.parametrize("rows", [40, 300])
def test_mlp_fuses_fc1_and_its_activation_with_the_composed_bits(fused_calls, act, rows):
    m, twin = MLP(384, 1536, act), MLP(384, 1536, act)  # (the same weights in arrays of their own)
    _weights(m, seed=rows)
    _weights(twin, seed=rows)
    x = ember.tensor(np.random.default_rng(1).standard_normal((1, rows, 384)).astype(np.float32))
    with ember.no_grad():
        for _ in range(3):  # (a weight's first and later reads take other paths: each forward against its twin's)
            got = m(x).numpy()
            assert np.array_equal(got, twin.fc2(twin.act(twin.fc1(x))).numpy())
    assert fused_calls == [{"gelu_new": "gelu_tanh"}.get(act, act)] * 3


def test_mlp_without_a_bias_composes(fused_calls):
    m = MLP(64, 256, "gelu", bias=False)
    _weights(m, seed=3)
    x = ember.tensor(np.random.default_rng(2).standard_normal((2, 20, 64)).astype(np.float32))
    with ember.no_grad():
        assert np.array_equal(m(x).numpy(), m.fc2(F.gelu(m.fc1(x))).numpy())
    assert fused_calls == []


def test_whisper_blocks_mlp_fuses_with_the_composed_bits(fused_calls):
    block = ResidualAttentionBlock(384, 6, 1536, cross_attention=False)
    _weights(block, seed=5)
    x = ember.tensor(np.random.default_rng(4).standard_normal((1, 200, 384)).astype(np.float32))
    with ember.no_grad():
        got = block.mlp(x).numpy()
        want = block.fc2(F.gelu(block.fc1(x))).numpy()
    assert fused_calls == ["gelu"]
    assert np.array_equal(got, want)
