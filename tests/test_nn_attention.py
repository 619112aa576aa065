"""nn.MultiheadAttention and F.scaled_dot_product_attention against torch: torch's weights loaded strictly,
outputs, attention weights and gradients over the argument space, on every device."""
import numpy as np
import pytest
import torch

import ember
import ember.nn as nn
import ember.nn.functional as F
from nn_parity import compare, load_torch

E, H, L, S, N = 16, 4, 5, 7, 3

CASES = {
    "self": dict(kw={}, kv="self"),
    "cross_batch_first": dict(kw=dict(batch_first=True), kv="cross"),
    "kdim_vdim": dict(kw=dict(kdim=6, vdim=10), kv="cross"),
    "no_bias": dict(kw=dict(bias=False), kv="cross"),
    "bias_kv_zero_attn": dict(kw=dict(add_bias_kv=True, add_zero_attn=True), kv="cross"),
    "per_head_weights": dict(kw={}, kv="self", call=dict(average_attn_weights=False)),
    "no_weights": dict(kw={}, kv="cross", call=dict(need_weights=False)),
    "unbatched": dict(kw={}, kv="self", unbatched=True),
}


def _inputs(rng, kv, kdim, vdim, batch_first, unbatched=False):
    def shape(n, d):
        if unbatched:
            return (n, d)
        return (N, n, d) if batch_first else (n, N, d)
    q = rng.standard_normal(shape(L, E)).astype(np.float32)
    if kv == "self":
        return [q]
    return [q, rng.standard_normal(shape(S, kdim)).astype(np.float32),
            rng.standard_normal(shape(S, vdim)).astype(np.float32)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mask", ["none", "bool", "float", "padding", "both", "per_head"])
def test_multihead_attention_matches_torch(device, case, mask):
    c = CASES[case]
    kw, unbatched = c["kw"], c.get("unbatched", False)
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, **kw).eval()
    em = load_torch(nn.MultiheadAttention(E, H, **kw), tm, device).eval()
    rng = np.random.default_rng(1)
    xs = _inputs(rng, c["kv"], kw.get("kdim", E), kw.get("vdim", E), kw.get("batch_first", False), unbatched)
    s = L if c["kv"] == "self" else S
    am = kpm = None
    if mask in ("bool", "both"):
        am = rng.random((L, s)) < 0.3
        am[:, 0] = False                                                  # no fully masked row (NaN in both)
    if mask == "float":
        am = rng.standard_normal((L, s)).astype(np.float32)
    n = 1 if unbatched else N
    if mask == "per_head":
        am = rng.standard_normal((n * H, L, s)).astype(np.float32)
    if mask in ("padding", "both"):
        kpm = np.zeros((n, s), bool)
        kpm[-1, -2:] = True
        kpm = kpm[0] if unbatched else kpm
    call_kw = c.get("call", {})

    def call(m, *a):
        x = a[:len(xs)]
        q, k, v = (x[0],) * 3 if len(x) == 1 else x
        return m(q, k, v, key_padding_mask=a[len(xs) + 1], attn_mask=a[len(xs)], **call_kw)
    compare(em, tm, xs + [am, kpm], device, call)


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_causal_hint(device, need_weights):
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    em = load_torch(nn.MultiheadAttention(E, H, batch_first=True), tm, device).eval()
    x = np.random.default_rng(2).standard_normal((N, L, E)).astype(np.float32)
    causal = np.triu(np.ones((L, L), bool), 1)
    compare(em, tm, [x, causal], device,
            lambda m, x, am: m(x, x, x, attn_mask=am, is_causal=True, need_weights=need_weights))


def test_multihead_attention_dropout_trains(device):
    """Training mode with dropout: weights rows still sum to 1 / (1 - p) in expectation and outputs differ."""
    em = nn.MultiheadAttention(E, H, dropout=0.5).to(device)
    x = ember.tensor(np.random.default_rng(3).standard_normal((L, N, E)).astype(np.float32), device=device)
    a, _ = em(x, x, x)
    b, _ = em(x, x, x)
    assert not np.allclose(a.numpy(), b.numpy())
    em.eval()
    a, _ = em(x, x, x)
    b, _ = em(x, x, x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("kw", [dict(num_heads=0), dict(num_heads=3), dict(embed_dim=0), dict(dropout=1.5)])
def test_multihead_attention_bad_arguments(kw):
    args = dict(embed_dim=E, num_heads=H) | kw
    with pytest.raises(nn.LayerError) as e:
        nn.MultiheadAttention(**args)
    assert next(iter(kw)) in str(e.value) or "embed_dim" in str(e.value)


def test_multihead_attention_bad_masks():
    m = nn.MultiheadAttention(E, H)
    x = ember.zeros(L, N, E)
    with pytest.raises(nn.LayerError, match="attn_mask"):
        m(x, x, x, attn_mask=ember.zeros(L + 1, L))
    with pytest.raises(nn.LayerError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=ember.zeros(N, L + 2, dtype=ember.bool_))


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("grads", [True, False])
def test_sdpa_matches_torch(device, mask, gqa, grads):
    """With grads=False the device's attention kernels run (webgpu); with grads the composed form."""
    rng = np.random.default_rng(4)
    hk = 2 if gqa else 4
    q = rng.standard_normal((2, 4, L, 8)).astype(np.float32)
    k = rng.standard_normal((2, hk, S, 8)).astype(np.float32)
    v = rng.standard_normal((2, hk, S, 6)).astype(np.float32)
    m = None
    if mask == "bool":
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True
    if mask == "float":
        m = rng.standard_normal((2, 1, L, S)).astype(np.float32)
    causal = mask == "causal"

    class Fn(torch.nn.Module):
        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, *a):
            return self.f(*a)
    tf = Fn(lambda q, k, v, m: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, m, is_causal=causal, scale=0.3, enable_gqa=gqa))
    ef = nn.Module()
    ef.forward = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, is_causal=causal, scale=0.3,
                                                                  enable_gqa=gqa)
    compare(ef, tf, [q, k, v, m], device, grads=grads)
