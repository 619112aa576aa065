"""WebGPU elementwise fusion (webgpu/fusion.py) against the same ops dispatched one by one (fuse off) and
against the CPU backend: a chain is one kernel with the same bits per dtype (per-op rounding of f16, bf16,
int8, uint8 kept), in-place writes see pending readers first, the binding and scalar limits cut a long
chain, broadcast and viewed results, the residual add computed inside rms_norm / layer_norm. Then whole
models: a quantized Llama decodes the cpu's greedy tokens within a per-token dispatch bound computed from
its shape, and a Whisper decode reads back nothing but each step's logits."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status

if not device_status("webgpu")[0]:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {device_status('webgpu')[1]}", allow_module_level=True)

from test_webgpu_quant import BE, _rnd  # noqa: E402  (the same backend and random inputs)


def _both(fn, *arrays, dtype=ember.float32):
    """fn over webgpu tensors, fused and one op per kernel: (fused result, unfused result, dispatches fused)."""
    out = []
    for fuse in (True, False):
        BE.fuse = fuse
        try:
            with ember.no_grad():
                xs = [ember.tensor(a, dtype=dtype, device="webgpu") for a in arrays]
                d0 = BE.dispatches
                y = fn(*xs).numpy()
                out += [y, BE.dispatches - d0]
        finally:
            BE.fuse = True
    return out[0], out[2], out[1]


def _chain(x, y):
    return ((x * 3.0 + y).sigmoid() * x - y.abs()) / (y * y + 1.5)


@pytest.mark.parametrize("dtype", [ember.float32, ember.float16, ember.bfloat16])
def test_float_chain_is_one_kernel_with_the_same_bits(dtype):
    x, y = _rnd(3, 33, seed=1), _rnd(3, 33, seed=2)
    fused, plain, n = _both(_chain, x, y, dtype=dtype)
    assert n == 1                                      # eight ops, one kernel
    np.testing.assert_array_equal(fused, plain)        # rounding after every op, as unfused
    with ember.no_grad():
        cpu = _chain(ember.tensor(x, dtype=dtype), ember.tensor(y, dtype=dtype)).numpy()
    tol = 1e-6 if dtype is ember.float32 else 2e-2
    np.testing.assert_allclose(fused.astype(np.float32), cpu.astype(np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [ember.int8, ember.uint8, ember.int32])
def test_integer_chain_wraps_per_op(dtype):
    x = np.random.default_rng(3).integers(0, 120, (5, 7))
    y = np.random.default_rng(4).integers(1, 100, (5, 7))

    def f(a, b):
        return ((a * 3 + b) * 2 - b) > (a + 60)
    fused, plain, n = _both(lambda a, b: ((a * 3 + b) * 2 - b), x, y, dtype=dtype)
    np.testing.assert_array_equal(fused, plain)        # int8 / uint8 wrap after each op
    with ember.no_grad():
        cpu = ((ember.tensor(x, dtype=dtype) * 3 + ember.tensor(y, dtype=dtype)) * 2 - ember.tensor(y, dtype=dtype))
    np.testing.assert_array_equal(fused, cpu.numpy())
    cmp, cmp_plain, n = _both(f, x, y, dtype=dtype)
    assert n == 1 and cmp.dtype == np.bool_
    np.testing.assert_array_equal(cmp, cmp_plain)


def test_in_place_write_runs_pending_readers_first():
    x = ember.tensor(_rnd(4, 6, seed=5), device="webgpu")
    with ember.no_grad():
        y = x * 2.0 + 1.0                               # pending: reads x's buffer
        z = ember.copy_into(x, ember.tensor(np.zeros((2, 6), np.float32), device="webgpu"), (1, 0))
        want = _rnd(4, 6, seed=5) * 2.0 + 1.0
        np.testing.assert_array_equal(y.numpy(), want)  # the value before the write
        assert np.all(z.numpy()[1:3] == 0)


def test_paired_cache_writes_keep_program_order():
    """copy_into waits for the next write: a k and a v row into two buffers are one dispatch; a write whose
    source reads the held write's buffer, a second write into the same buffer, a kernel reading the buffer
    and a readback in between each see the earlier write first (numpy does the same writes in order)."""
    k, v = _rnd(1, 2, 8, 4), _rnd(1, 2, 8, 4, seed=1)
    rows = [_rnd(1, 2, 1, 4, seed=s) for s in range(2, 6)]
    want_k, want_v = k.copy(), v.copy()
    with ember.no_grad():
        gk, gv = ember.tensor(k, device="webgpu"), ember.tensor(v, device="webgpu")
        r = [ember.tensor(a, device="webgpu") for a in rows]
        d0 = BE.dispatches
        ember.copy_into(gk, r[0], (0, 0, 3, 0))
        ember.copy_into(gv, r[1], (0, 0, 3, 0))
        s = gk.sum()                                    # reads gk: the pair has run before
        assert BE.dispatches - d0 == 2
        want_k[:, :, 3:4], want_v[:, :, 3:4] = rows[0], rows[1]
        ember.copy_into(gk, r[2], (0, 0, 5, 0))
        ember.copy_into(gv, gk[:, :, 5:6], (0, 0, 6, 0))   # reads the held write's buffer: not paired
        want_k[:, :, 5:6] = rows[2]
        want_v[:, :, 6:7] = want_k[:, :, 5:6]
        ember.copy_into(gk, r[3], (0, 0, 0, 0))
        ember.copy_into(gk, r[0] * 2.0, (0, 0, 1, 0))      # the same buffer, a pending source: in order
        want_k[:, :, 0:1], want_k[:, :, 1:2] = rows[3], rows[0] * 2
        got_v = gv.numpy()                              # the held write to gk runs before this readback too
        np.testing.assert_array_equal(gk.numpy(), want_k)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_allclose(s.numpy(), k.sum() - k[:, :, 3].sum() + rows[0].sum(), rtol=1e-5)


def test_long_chains_are_cut_at_the_binding_and_scalar_limits():
    arrays = [_rnd(2, 5, seed=s) for s in range(9)]

    def many(*xs):
        acc = xs[0]
        for k, v in enumerate(xs[1:]):                  # 8 more inputs and 8 scalars: past 6 leaves, 5 scalars
            acc = acc * (1.0 + 0.1 * k) + v
        return acc
    fused, plain, n = _both(many, *arrays)
    assert 1 < n < 16
    np.testing.assert_array_equal(fused, plain)
    want = arrays[0]
    for k, v in enumerate(arrays[1:]):
        want = want * np.float32(1.0 + 0.1 * k) + v
    np.testing.assert_allclose(fused, want, rtol=1e-6)


def test_broadcast_views_and_reuse():
    x, b = _rnd(2, 3, 4, seed=6), _rnd(4, seed=7)
    with ember.no_grad():
        gx, gb = ember.tensor(x, device="webgpu"), ember.tensor(b, device="webgpu")
        y = (gx + gb).relu()                            # bias broadcast, then an activation: one pending
        t = y.transpose(0, 2).numpy()                   # a strided view of it
        u = (y * y).numpy()                             # y read whole again, after it ran
    np.testing.assert_array_equal(t, np.maximum(x + b, 0).transpose(2, 1, 0))
    np.testing.assert_allclose(u, np.maximum(x + b, 0) ** 2, rtol=1e-6)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_residual_add_is_computed_inside_the_norm(norm):
    x, a, w, bias = _rnd(3, 70, seed=8), _rnd(3, 70, seed=9), _rnd(70, seed=10), _rnd(70, seed=11)
    with ember.no_grad():
        gx, ga, gw, gb = (ember.tensor(v, device="webgpu") for v in (x, a, w, bias))
        gw.numpy(), gb.numpy()
        d0 = BE.dispatches
        h = gx + ga                                     # pending
        y = F.rms_norm(h, (70,), gw, 1e-6) if norm == "rms" else F.layer_norm(h, (70,), gw, gb, 1e-5)
        hv = h.numpy()                                  # written by the norm kernel: nothing left to run
        n = BE.dispatches - d0
        yv = y.numpy()
        cpu = [ember.tensor(v) for v in (x, a, w, bias)]
        want = F.rms_norm(cpu[0] + cpu[1], (70,), cpu[2], 1e-6) if norm == "rms" else \
            F.layer_norm(cpu[0] + cpu[1], (70,), cpu[2], cpu[3], 1e-5)
    assert n == 1
    np.testing.assert_array_equal(hv, x + a)
    np.testing.assert_allclose(yv, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k"])
@pytest.mark.parametrize("m", [1, 3, 12])  # one matvec dispatch; several rows; two dispatches of 8 rows
def test_pending_input_is_computed_inside_the_qmatvec(qtype, m):
    """SiLU(gate) * up of a fused gate/up output (strided halves) feeds the quantized matvec without
    being written: one dispatch per 8 rows, the same numbers as the materialized input."""
    from ember.quant import QTensor
    k = 256
    q = QTensor.quantize(_rnd(40, k, seed=13), qtype)
    gu = _rnd(m, 2 * k, seed=14)
    with ember.no_grad():
        g = ember.tensor(gu, device="webgpu")
        q.matmul_t(F.silu(g.narrow(-1, 0, k)) * g.narrow(-1, k, k)).numpy()   # warm-up
        d0 = BE.dispatches
        y = q.matmul_t(F.silu(g.narrow(-1, 0, k)) * g.narrow(-1, k, k))
        n = BE.dispatches - d0
        got = y.numpy()
    h = gu[:, :k] / (1 + np.exp(-gu[:, :k])) * gu[:, k:]
    want = h.astype(np.float64) @ q.numpy().astype(np.float64).T
    assert n == -(-m // 8)
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max(), rtol=1e-4)


# ------------------------------------------------------------------ whole models

@pytest.mark.parametrize("qtype", ["q8_0", "q4_k", "f32"])
def test_llama_decode_dispatch_bound_and_tokens(qtype):
    """Per decoded token, per layer, 5 kernels (17 before any fusion, 9 with elementwise fusion, the paired
    cache write and SiLU(gate) * up inside the down matvec): the residual add + RMSNorm + qkv matvec (the norm
    in the matvec's prologue, norm_prologue.py); rope for q and k + the cache's k and v row writes +
    attention (rope_append_attention, one kernel: at most 64 keys); o; add + norm + gate/up; down with
    SiLU(gate) * up computed in it. Plus the embedding lookup and the head with the final add + norm in it."""
    from test_webgpu_quant import _greedy, _tiny_llama
    from ember.models.common.generate import SamplingParams, generate
    from ember.quant import quantize

    def build():
        return _tiny_llama() if qtype == "f32" else quantize(_tiny_llama(), qtype)
    prompt = [3, 17, 42]
    want = _greedy(build(), prompt, 6)
    model = build().to("webgpu")
    _greedy(model, [1, 2], 2)                           # warm-up: weights uploaded, pipelines compiled
    counts = []
    gen = iter(generate(model, prompt, 6, SamplingParams(temperature=0.0)))
    toks = [next(gen)]                                  # the prompt's forward and the first token
    for _ in range(5):
        c0 = BE.counters()
        toks.append(next(gen))
        c1 = BE.counters()
        counts.append({k: c1[k] - c0[k] for k in c0})
    assert toks == want and len(set(want)) > 2
    c = model.config
    bound = 5 * c.n_layers + 2
    for d in counts:
        assert d["dispatches"] <= bound, (d, bound)
        assert d["readbacks"] == 1 and d["bytes_read"] == c.vocab_size * 4, d


def test_whisper_decode_reads_back_only_logits(tmp_path):
    """Greedy decoding of a random Whisper on webgpu (under no_grad, as transcribe runs it): one readback per
    step (its logits), the cpu's tokens, and per step after the prompt's, per decoder layer 9 kernels: the first
    layer norm (with its residual add) + q, k and v in one matvec (F.linears, norm_prologue.py), the
    self-attention cache's k and v writes (one kernel), self-attention, o, norm + cross q, cross-attention,
    cross o, norm + fc1, fc2 with GELU computed in it; every bias inside its linear's matvec (22 when each
    bias add and each cache write was a kernel of its own, 15 with elementwise fusion); plus the token lookup
    and the head with the position add and the final norm in it."""
    pytest.importorskip("transformers")
    from test_whisper_model import make_random_folder
    from ember.models.whisper.decoding import DecodingOptions, WindowDecoder
    from ember.models.whisper.load import load_whisper
    folder = make_random_folder(tmp_path / "w", max_length=12, seed=3)
    feats = _rnd(1, 24, 64, seed=12) * 2                # encoder output of a short window
    tokens, per_step = {}, []
    for dev in ("cpu", "webgpu"):
        model, _, tok = load_whisper(folder, device=dev)
        dec = WindowDecoder(model, tok, DecodingOptions())
        f = ember.tensor(feats, device=dev)
        with ember.no_grad():
            if dev == "webgpu":
                dec.run(f)                              # warm-up
                step = dec.step

                def counted(*a, **k):
                    d0 = BE.dispatches
                    r = step(*a, **k)
                    per_step.append(BE.dispatches - d0)
                    return r
                dec.step = counted
                c0 = BE.counters()
            tokens[dev] = dec.run(f).tokens
    c1 = BE.counters()
    d = {k: c1[k] - c0[k] for k in c0}
    steps = len(tokens["webgpu"]) + 1                   # each generated token, and the step that ends
    assert tokens["webgpu"] == tokens["cpu"] and len(tokens["cpu"]) > 2
    assert d["readbacks"] <= steps and d["host_uploads"] == 0, d
    bound = 9 * model.dims.n_text_layer + 2
    assert len(per_step) > 2 and max(per_step[1:]) <= bound, (per_step, bound)
