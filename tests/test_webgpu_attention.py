"""The fused WebGPU attention kernel (attention.wgsl: online softmax over blocks of 64 keys, one
dispatch; backend.attention_kernel "auto" takes it for up to 16 query rows over up to 64 keys (a short
decode step), "flash" always) against torch and against the backend's three-kernel composed path: odd head sizes, one
query (decode), key counts across block edges, broadcast batch dims, strided views, causal and
additive masks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
import ember.nn.functional as F
from ember.device import device_status
from ember.nn import fused_ops as FO

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _gpu(a):
    return ember.tensor(a, device="webgpu")


def _run(kernel, q, k, v, **kw):
    with ember.kernels.tuned("flash_attention", "webgpu", mode=kernel), ember.no_grad():
        before = BE.dispatches
        y = F.scaled_dot_product_attention(q, k, v, **kw).numpy()
        return y, BE.dispatches - before


@pytest.mark.parametrize("L,S,D,Dv", [(1, 1, 8, 8), (1, 130, 64, 64), (5, 64, 80, 48), (7, 65, 256, 256),
                                      (3, 200, 33, 17)])
@pytest.mark.parametrize("mask", ["none", "causal", "float"])
def test_flash_matches_torch_and_composed(L, S, D, Dv, mask):
    q, k, v = _rnd(2, 3, L, D), _rnd(2, 3, S, D, seed=1), _rnd(2, 3, S, Dv, seed=2)
    kw, tkw = {}, {}
    if mask == "causal":
        kw = tkw = {"is_causal": True}
    elif mask == "float":
        m = _rnd(L, S, seed=3)
        kw, tkw = {"attn_mask": _gpu(m)}, {"attn_mask": torch.tensor(m)}
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                                            **tkw).numpy()
    got, n = _run("flash", _gpu(q), _gpu(k), _gpu(v), **kw)
    ref, n_composed = _run("composed", _gpu(q), _gpu(k), _gpu(v), **kw)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got, ref, atol=2e-5, rtol=1e-4)
    assert n == (1 if S <= 64 else 2) and n_composed >= 3  # QK^T, softmax, PV in one kernel (two: split keys)


def test_flash_broadcast_batch_and_strided_views():
    """k/v shared across heads (a broadcast batch dim), q and k as transposed views, a per-head mask."""
    q = _rnd(2, 4, 6, 32)                      # (B, H, L, D)
    kt = _rnd(2, 1, 32, 70, seed=1)            # (B, 1, D, S): k is its transpose, a strided view
    v = _rnd(2, 1, 70, 16, seed=2)
    m = _rnd(4, 6, 70, seed=3)                 # (H, L, S), broadcast over B
    qt = np.ascontiguousarray(q.transpose(0, 1, 3, 2))
    with ember.no_grad():
        gq = _gpu(qt).transpose(-1, -2)
        gk = _gpu(kt).transpose(-1, -2)
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(kt).transpose(-1, -2), torch.tensor(v), attn_mask=torch.tensor(m)).numpy()
    got, n = _run("flash", gq, gk, _gpu(v), attn_mask=_gpu(m))
    _, n_composed = _run("composed", gq, gk, _gpu(v), attn_mask=_gpu(m))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    # batch dims that do not merge into one stride (k, v broadcast over heads) are copied first
    assert n < n_composed


def test_head_size_past_the_kernel_uses_the_composed_path():
    q, k, v = _rnd(1, 2, 3, 300), _rnd(1, 2, 5, 300, seed=1), _rnd(1, 2, 5, 8, seed=2)
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v)).numpy()
    got, n = _run("flash", _gpu(q), _gpu(k), _gpu(v))
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    assert n >= 3


# ------------------------------------------------------------------ split keys (flash-decoding)
# Past 64 keys the kernel cuts the keys into chunks, one workgroup per (query row, batch, chunk) writing its
# unnormalized row with its maximum and sum (attention.wgsl, flag 4), and a second kernel merges them
# (webgpu/attention_combine.wgsl). Checked against torch, the one-pass kernel, and the pass written in Tensor ops
# (fused_ops.split_composed: other devices and gradients) chunk by chunk, including chunks a causal row
# never reaches.

@pytest.mark.parametrize("L,S,heads,kv_heads,D,Dv,mask", [
    (1, 1500, 6, 6, 64, 64, "none"),      # Whisper tiny's cross-attention over 30 s of audio: 24 chunks
    (1, 65, 4, 1, 32, 32, "none"),        # one key past a chunk, keys shared by 4 heads
    (3, 333, 2, 2, 40, 24, "float"),
    (70, 200, 2, 1, 16, 16, "causal"),    # rows 0..63 never reach chunks 2 and 3
    (5, 129, 3, 3, 256, 256, "bool"),
])
def test_split_matches_torch_and_one_pass(L, S, heads, kv_heads, D, Dv, mask):
    q, k, v = _rnd(2, heads, L, D), _rnd(2, kv_heads, S, D, seed=1), _rnd(2, kv_heads, S, Dv, seed=2)
    rep = heads // kv_heads
    tk, tv = (torch.tensor(a).repeat_interleave(rep, 1) for a in (k, v))
    kw, tkw = {}, {}
    if mask == "causal":
        kw = tkw = {"is_causal": True}
    elif mask == "float":
        m = _rnd(L, S, seed=3) * 3
        kw, tkw = {"attn_mask": ember.tensor(m, device="webgpu")}, {"attn_mask": torch.tensor(m)}
    elif mask == "bool":
        m = np.random.default_rng(4).random((1, 1, L, S)) < 0.7
        m[..., 0] = True                                            # every row keeps a key
        kw, tkw = {"attn_mask": ember.tensor(m, device="webgpu")}, {"attn_mask": torch.tensor(m)}
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), tk, tv, **tkw).numpy()
    if kv_heads == 1:  # k and v broadcast over the heads: stride-0 views into the kernel
        g = [ember.tensor(a, device="webgpu") for a in (q, k, v)]
    else:
        g = [ember.tensor(a, device="webgpu") for a in (q, k[:, :, None].repeat(rep, 2).reshape(2, heads, S, D),
                                                        v[:, :, None].repeat(rep, 2).reshape(2, heads, S, Dv))]
    extra = 2 if mask == "bool" else 0                              # a bool mask becomes 0 / -inf first
    got, n = _run("flash", *g, **kw)
    assert n == 2 + extra                                           # split pass + merge
    np.testing.assert_allclose(got, want, atol=3e-5, rtol=1e-4)
    keep = FO.SPLIT_KEYS
    FO.SPLIT_KEYS = 1 << 30                                         # the one-pass kernel, one workgroup per row
    try:
        one, n1 = _run("flash", *g, **kw)
    finally:
        FO.SPLIT_KEYS = keep
    assert n1 == 1 + extra
    np.testing.assert_allclose(got, one, atol=3e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_split_pass_chunks_equal_the_composed_pass(causal):
    """Chunk rows (acc, max, sum) of the kernel against fused_ops.split_composed on the same views: a
    chunk no key of the row reaches holds max -inf, sum 0, acc 0 in both."""
    B1, B2, L, S, D, Dv = 1, 3, 9, 300, 24, 20
    q, k, v = _rnd(B1, B2, L, D), _rnd(B1, B2, S, D, seed=1), _rnd(B1, B2, S, Dv, seed=2)
    m = _rnd(B1, B2, L, S, seed=3)
    chunk = 64
    args = dict(scale=0.3, causal=causal, chunk=chunk)
    got = FO._flash_split(*[ember.tensor(a, device="webgpu") for a in (q, k, v, m)], **args).numpy()
    want = FO.split_composed(*[ember.tensor(a) for a in (q, k, v, m)], **args).numpy()
    assert got.shape == want.shape == (B1, B2, L, -(-S // chunk), Dv + 2)
    fin = np.isfinite(want)
    assert (np.isfinite(got) == fin).all() and (causal == (~fin).any())
    np.testing.assert_allclose(np.where(fin, got, 0), np.where(fin, want, 0), atol=2e-4, rtol=1e-4)
    merged = FO._flash_combine(ember.tensor(got, device="webgpu"), dtype=ember.float32).numpy()
    np.testing.assert_allclose(merged, FO.combine_composed(ember.tensor(want), ember.float32).numpy(),
                               atol=2e-5, rtol=1e-4)


def test_split_gradients_go_through_the_composed_pass():
    """Recording gradients, flash_attention runs the Tensor-op passes: gradients equal torch's (on cpu)."""
    q, k, v = _rnd(1, 2, 2, 16), _rnd(1, 2, 150, 16, seed=1), _rnd(1, 2, 150, 16, seed=2)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).square().sum().backward()
    eq, ek, ev = (ember.tensor(a, requires_grad=True) for a in (q, k, v))
    part = FO.split_composed(eq, ek, ev, None, 0.25, False, 64)
    FO.combine_composed(part, ember.float32).square().sum().backward()
    for e, t in ((eq, tq), (ek, tk), (ev, tv)):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), atol=1e-4, rtol=1e-4)
