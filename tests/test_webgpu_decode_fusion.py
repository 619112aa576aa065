"""A decode step's fused kernels on webgpu against their composed forms: the norm computed inside the matvec
that reads it (webgpu/norm_prologue.py: RMSNorm / LayerNorm over a pending residual add, every quant type and
float32 weights, odd sizes, the residual sum written back), and one kernel for rope + the KV cache row write +
attention (ember.nn.fused_ops.rope_append_attention: global and ring slots, masks, grouped heads), each
against the same ops dispatched one by one (fusion off) and the CPU backend."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status

if not device_status("webgpu")[0]:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {device_status('webgpu')[1]}", allow_module_level=True)

from test_webgpu_quant import BE, _rnd  # noqa: E402  (the same backend and random inputs)


def _linear(w, x):
    """x @ w.T through the device's path: a QTensor's qmatmul, or F.linear for a float weight (a Tensor)."""
    return w.matmul_t(x) if not isinstance(w, ember.Tensor) else F.linear(x, w)


def _norm_then_linear(kind, w, x, a, nw, nb):
    h = x + a                                                            # pending residual add
    y = F.rms_norm(h, (x.shape[-1],), nw, 1e-6) if kind == "rms" else F.layer_norm(h, (x.shape[-1],), nw, nb, 1e-5)
    return h, _linear(w, y)


_SHAPES = [("rms", 1, 256), ("rms", 3, 512), ("layer", 8, 256)]
_ODD_K = [("layer", 2, 96), ("rms", 5, 160)]  # K a multiple of 32, not of 256: not for the K-quants


@pytest.mark.parametrize("qtype,kind,m,k", [(q, *s) for q in ("q8_0", "q4_0", "q4_k", "q6_k", "f32") for s in _SHAPES]
                         + [(q, *s) for q in ("q8_0", "q4_0", "f32") for s in _ODD_K])
def test_norm_inside_the_matvec(qtype, kind, m, k):
    """One dispatch (norm + residual add + matvec) with the numbers of norm then matvec, and the residual sum
    written to its buffer exactly (the next layer's add reads it)."""
    from ember.quant import QTensor
    n = 37                                                               # odd column count
    wf = _rnd(n, k, seed=21) * 0.2
    x, a, nw, nb = _rnd(m, k, seed=22), _rnd(m, k, seed=23), _rnd(k, seed=24) + 1, _rnd(k, seed=25)
    got = {}
    saved = BE.qmatvec_split
    for fuse in (True, False):
        BE.fuse = fuse
        BE.qmatvec_split = 8 if m % 2 else 1                             # a GPU's split and a software adapter's
        try:
            with ember.no_grad():
                w = ember.tensor(wf, device="webgpu") if qtype == "f32" else QTensor.quantize(wf, qtype)
                gx, ga, gw, gb = (ember.tensor(v, device="webgpu") for v in (x, a, nw, nb))
                _norm_then_linear(kind, w, gx, ga, gw, gb)[1].numpy()   # warm-up: weights up, kernels compiled
                d0 = BE.dispatches
                h, y = _norm_then_linear(kind, w, gx, ga, gw, gb)
                yv = y.numpy()
                got[fuse] = (yv, h.numpy(), BE.dispatches - d0)
        finally:
            BE.fuse, BE.qmatvec_split = True, saved
    (yf, hf, nf), (yp, hp, _) = got[True], got[False]
    assert nf == 1, nf
    np.testing.assert_array_equal(hf, x + a)
    np.testing.assert_array_equal(hp, x + a)
    tol = 2e-5 * max(1.0, np.abs(yp).max())
    np.testing.assert_allclose(yf, yp, atol=tol, rtol=1e-5)             # the composed kernels' numbers
    with ember.no_grad():                                                # and the CPU backend's
        wc = ember.tensor(wf) if qtype == "f32" else QTensor.quantize(wf, qtype)
        cpu = _norm_then_linear(kind, wc, *(ember.tensor(v) for v in (x, a, nw, nb)))[1].numpy()
    np.testing.assert_allclose(yf, cpu, atol=tol, rtol=1e-4)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k", "q6_k"])
def test_matvec_splits_agree(qtype):
    """The quantized matvec with 1 thread per column (software adapters' default) and 8 (GPUs'), 3 rows."""
    from ember.quant import QTensor
    q = QTensor.quantize(_rnd(45, 512, seed=26), qtype)
    x = _rnd(3, 512, seed=27)
    saved, got = BE.qmatvec_split, []
    try:
        for tpc in (1, 8, 64):
            BE.qmatvec_split = tpc
            with ember.no_grad():
                got.append(q.matmul_t(ember.tensor(x, device="webgpu")).numpy())
    finally:
        BE.qmatvec_split = saved
    want = x.astype(np.float64) @ q.numpy().astype(np.float64).T
    for g in got:
        np.testing.assert_allclose(g, want, atol=2e-4 * np.abs(want).max(), rtol=1e-4)


def test_norm_read_by_something_else_runs_its_kernel():
    """A pending norm read by an elementwise op, a second matvec and a readback: each sees the norm's values."""
    x, a, nw = _rnd(2, 64, seed=31), _rnd(2, 64, seed=32), _rnd(64, seed=33)
    w = _rnd(5, 64, seed=34)
    with ember.no_grad():
        gx, ga, gw, ww = (ember.tensor(v, device="webgpu") for v in (x, a, nw, w))
        y = F.rms_norm(gx + ga, (64,), gw, 1e-6)
        first = F.linear(y, ww).numpy()                                  # computed in the matvec
        twice = (y * 2.0).numpy()                                        # the norm kernel runs for this
        again = F.linear(y, ww).numpy()
        cpu = F.rms_norm(ember.tensor(x) + ember.tensor(a), (64,), ember.tensor(nw), 1e-6)
    np.testing.assert_allclose(twice, cpu.numpy() * 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first, cpu.numpy() @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(again, first, rtol=1e-5, atol=1e-5)


def test_norm_over_a_width_off_the_chunk_is_dispatched():
    """K not a multiple of 32: the norm is not deferred (the matvec reads 32-element chunks); same numbers."""
    x, nw, w = _rnd(1, 70, seed=35), _rnd(70, seed=36), _rnd(9, 70, seed=37)
    with ember.no_grad():
        got = F.linear(F.rms_norm(ember.tensor(x, device="webgpu"), (70,), ember.tensor(nw, device="webgpu"), 1e-6),
                       ember.tensor(w, device="webgpu")).numpy()
        want = F.linear(F.rms_norm(ember.tensor(x), (70,), ember.tensor(nw), 1e-6), ember.tensor(w)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ rope + cache write + attention

def _append_case(B, H, K, hd, cap, slot, length, masked, seed):
    from ember.models.common.positions import RotaryEmbedding, rope_inv_freq
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((B, 1, H + 2 * K, hd)).astype(np.float32)
    kc = rng.standard_normal((B, K, cap, hd)).astype(np.float32)
    vc = rng.standard_normal((B, K, cap, hd)).astype(np.float32)
    rot = RotaryEmbedding(hd, rope_inv_freq(hd)[0]).at(np.array([[slot + 7]]), ember.float32, "cpu").matrix.numpy()
    mask = None
    if masked:                                                           # some keys masked (a ring's empty slots)
        mask = np.where(rng.random((H // K, length)) < 0.3, -np.inf, 0).astype(np.float32)
        mask[:, slot] = 0
    return qkv, rot, kc, vc, mask


@pytest.mark.parametrize("B,H,K,hd,cap,slot,length,masked", [
    (1, 4, 2, 64, 16, 5, 6, False),     # a global layer: the new row is the last key
    (2, 6, 3, 40, 9, 3, 9, True),       # a ring: the new row mid-buffer, masked slots, batch 2, odd head size
    (1, 8, 1, 32, 70, 69, 70, False),   # multi-query, past one block of 64 keys
])
def test_rope_append_attention_kernel_matches_composed(B, H, K, hd, cap, slot, length, masked):
    from ember.nn.fused_ops import append_composed
    qkv, rot, kc, vc, mask = _append_case(B, H, K, hd, cap, slot, length, masked, seed=cap)
    with ember.kernels.tuned("flash_attention", "webgpu", rows=16, keys=128):  # the kernel for every case here
        res = {}
        for dev in ("webgpu", "cpu"):
            with ember.no_grad():
                t = [None if v is None else ember.tensor(v, device=dev) for v in (qkv, rot, kc, vc, mask)]
                d0 = BE.dispatches
                o = F.rope_append_attention(*t, n_heads=H, slot=slot, length=length)
                if dev == "webgpu":
                    assert BE.dispatches - d0 == 1
                res[dev] = (o.numpy(), t[2].numpy(), t[3].numpy())
        with ember.no_grad():                                            # the composed form on webgpu too
            t = [None if v is None else ember.tensor(v, device="webgpu") for v in (qkv, rot, kc, vc, mask)]
            comp = append_composed(*t, n_heads=H, slot=slot, length=length, scale=hd ** -0.5).numpy()
    (og, kg, vg), (oc, kcpu, vcpu) = res["webgpu"], res["cpu"]
    assert og.shape == (B, K, H // K, hd)
    np.testing.assert_allclose(og, oc, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(og, comp, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kg, kcpu, rtol=1e-5, atol=1e-5)          # the rotated k row, in place
    np.testing.assert_array_equal(vg, vcpu)                              # the v row, in place
    np.testing.assert_array_equal(np.delete(kg, slot, 2), np.delete(kc, slot, 2))  # nothing else written
    # the reference: rope by the matrix, the rows written, softmax attention (numpy, float64)
    qk = qkv[:, :, :H + K].astype(np.float64) @ rot
    kref, vref = kc.astype(np.float64), vc.astype(np.float64)
    kref[:, :, slot], vref[:, :, slot] = qk[:, 0, H:], qkv[:, 0, H + K:]
    q = qk[:, 0, :H].reshape(B, K, H // K, hd)
    s = q @ kref[:, :, :length].transpose(0, 1, 3, 2) / np.sqrt(hd) + (0 if mask is None else mask)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ vref[:, :, :length]
    np.testing.assert_allclose(og, want, rtol=1e-4, atol=1e-5)


def test_rope_append_attention_without_the_kernel_is_composed():
    """Past flash_auto's keys (or for gradients) the composed form runs: the same cache write and output."""
    qkv, rot, kc, vc, _ = _append_case(1, 4, 2, 32, 80, 79, 80, False, seed=3)
    with ember.no_grad():
        t = [ember.tensor(v, device="webgpu") for v in (qkv, rot, kc, vc)]
        d0 = BE.dispatches
        o = F.rope_append_attention(*t, None, n_heads=4, slot=79, length=80).numpy()   # 80 keys > 64: composed
        assert BE.dispatches - d0 > 1
        c = [ember.tensor(v) for v in (qkv, rot, kc, vc)]
        want = F.rope_append_attention(*c, None, n_heads=4, slot=79, length=80).numpy()
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(t[2].numpy(), c[2].numpy(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ q, k and v in one matvec

@pytest.mark.parametrize("m,k,ns,biased", [(1, 64, (64, 64, 64), (True, False, True)),   # Whisper's: k has none
                                          (3, 96, (40, 24, 24), (False, False, False)),  # grouped heads, odd M
                                          (8, 128, (33, 7, 70), (True, True, True))])
def test_linears_one_kernel_matches_three(m, k, ns, biased):
    ws = [_rnd(n, k, seed=40 + i) * 0.3 for i, n in enumerate(ns)]
    bs = [_rnd(n, seed=50 + i) if on else None for i, (n, on) in enumerate(zip(ns, biased))]
    x, a, nw, nb = _rnd(m, k, seed=60), _rnd(m, k, seed=61), _rnd(k, seed=62) + 1, _rnd(k, seed=63)

    def run(dev):
        with ember.no_grad():
            gw = [ember.tensor(w, device=dev) for w in ws]
            gb = [None if b is None else ember.tensor(b, device=dev) for b in bs]
            gx, ga, gnw, gnb = (ember.tensor(v, device=dev) for v in (x, a, nw, nb))
            y = F.layer_norm(gx + ga, (k,), gnw, gnb, 1e-5)
            d0 = BE.dispatches
            outs = F.linears(y, gw, gb)
            n = BE.dispatches - d0
            return [o.numpy() for o in outs], n
    got, n = run("webgpu")
    want, _ = run("cpu")
    assert n == 1
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, w_, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def gemma_pair():
    pytest.importorskip("transformers")
    import test_gemma3
    return test_gemma3.pair.__wrapped__()  # the random 5-layer Gemma 3 (and its transformers twin) of test_gemma3


def test_gemma3_decode_dispatches_and_tokens(gemma_pair):
    """A random Gemma 3 (sliding and global layers, q/k norms, GeGLU tanh, sandwich norms) on webgpu decodes the
    cpu's greedy tokens with one readback per token, and per layer at most 11 kernels: norm + q, k, v (one
    matvec), q norm + rope, k norm + rope (a matvec each), the cache's k and v writes, attention, o, the
    post-attention norm, norm + gate, norm + up, down with GELU(gate) * up in it, the post-MLP norm; plus the
    embedding and the head."""
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.gemma3.config import Gemma3Config
    from ember.models.gemma3.load import from_hf_state_dict
    hf, _ = gemma_pair
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    toks, counts = {}, []
    for dev in ("cpu", "webgpu"):
        model = from_hf_state_dict(sd, Gemma3Config.from_hf(hf.config.to_dict()), "random gemma3").to(dev)
        gen = iter(generate(model, [3, 17, 42, 5, 9, 11], 6, SamplingParams(temperature=0.0)))
        toks[dev] = [next(gen)]
        for _ in range(5):
            c0 = BE.counters()
            toks[dev].append(next(gen))
            c1 = BE.counters()
            if dev == "webgpu":
                counts.append({k: c1[k] - c0[k] for k in c0})
    assert toks["webgpu"] == toks["cpu"] and len(set(toks["cpu"])) > 2, toks
    bound = 11 * hf.config.num_hidden_layers + 2
    for d in counts:
        assert d["dispatches"] <= bound and d["readbacks"] == 1 and d["host_uploads"] == 0, (d, bound)
