"""f16 arithmetic on WebGPU (shader-f16, float16 in f16 words): matmul (tiled, register and vec4 kernels) and
attention (composed and flash) load, tile and multiply in f16 and accumulate in f32; norms load f16 and sum
in f32. Checked against the numpy backend's float16 (f32 products and sums, one rounding) with bounds
derived from f16 rounding, not tuned:
  each f16 product a*b rounds with relative error <= u = 2^-11 (the f32 product of two f16 values is exact),
  a K-term f32 sum errs by <= K * 2^-24 * sum|a*b| (either side's order), and each side's result rounds to
  f16 once (<= u|y| each, plus half the smallest subnormal).
So |gpu - numpy| <= (u + 2K 2^-24) (|a| @ |b|) + 2u |y| + 2^-25. The f32-accumulation claim is tested where
an f16 accumulator would be visibly wrong (long K: an f16 sum of ~6000 terms near 0.75 stalls once its ulp
passes the terms; a sum of squares past 65504 overflows)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status
from ember.nn.fused_ops import flash_attention

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend
if not (BE.has_f16 and BE.words[ember.float16][0] == "f16"):
    pytest.skip("webgpu adapter has no shader-f16 (float16 is not in f16 words here)", allow_module_level=True)

U = 2.0 ** -11


@pytest.fixture(autouse=True)
def f16_compute_on():
    was = BE.f16_compute
    BE.f16_compute = True
    yield
    BE.f16_compute = was


def _h(*shape, seed=0, lo=None):
    """float16 host values: normal, or uniform in [lo, 1) (all positive: sums that grow)."""
    r = np.random.default_rng(seed)
    a = r.uniform(lo, 1.0, shape) if lo is not None else r.standard_normal(shape)
    return a.astype(np.float16)


def _mm_bound(a, b, want):
    K = a.shape[-1]
    absab = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return (U + 2 * K * 2.0 ** -24) * absab + 2 * U * np.abs(want.astype(np.float64)) + 2.0 ** -25


def _gpu_mm(a, b, transposed, kernel="auto"):
    """a @ b on webgpu; transposed: b held as (N, K) and viewed (K, N), as a linear layer's weight."""
    ga = ember.tensor(a, device="webgpu")
    if transposed:
        gb = ember.tensor(np.ascontiguousarray(b.T), device="webgpu").t()
    else:
        gb = ember.tensor(b, device="webgpu")
    was, BE.matmul_kernel = BE.matmul_kernel, kernel
    try:
        return (ga @ gb).numpy()
    finally:
        BE.matmul_kernel = was


def _cpu_mm(a, b):
    return (ember.tensor(a) @ ember.tensor(b)).numpy()


@pytest.mark.parametrize("M,K,N,kernel", [(1, 36, 20, "auto"),    # decode row, vec4 loads
                                          (5, 33, 7, "auto"),     # K, N odd: the tiled kernel
                                          (67, 130, 65, "auto"),  # past one 64x64 tile
                                          (9, 45, 11, "regs")])
@pytest.mark.parametrize("transposed", [False, True])
def test_f16_matmul_within_the_rounding_bound(M, K, N, kernel, transposed):
    a, b = _h(2, M, K, seed=M), _h(K, N, seed=K)
    want, got = _cpu_mm(a, b), _gpu_mm(a, b, transposed, kernel)
    assert got.dtype == np.float16 and got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= _mm_bound(a, b, want)).all(), f"max err {err.max()}"


def test_f16_products_are_really_f16_and_the_switch_restores_f32_products():
    """With f16 compute off the products are exact again: only the f32 summation order and the final rounding
    separate the result from numpy's; with it on, some outputs land on another f16 value."""
    a, b = _h(64, 256, seed=1), _h(256, 64, seed=2)
    want = _cpu_mm(a, b)
    on = _gpu_mm(a, b, True)
    BE.f16_compute = False
    off = _gpu_mm(a, b, True)
    absab = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    off_bound = 2 * 256 * 2.0 ** -24 * absab + 2 * U * np.abs(want.astype(np.float64)) + 2.0 ** -25
    assert (np.abs(off.astype(np.float64) - want) <= off_bound).all()
    assert (on != off).any(), "f16 compute produced the f32-product results: the f16 path did not run"


def _f16_accumulated(a, b):
    """a @ b summed in float16, one term at a time (what an f16 accumulator would give)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k in range(a.shape[1]):
        acc = (acc + a[:, k:k + 1] * b[k:k + 1, :]).astype(np.float16)
    return acc


@pytest.mark.parametrize("K,transposed", [(6008, True), (6007, False)])   # vec4 decode row; tiled
def test_long_dot_products_accumulate_in_f32(K, transposed):
    a, b = _h(2, K, seed=3, lo=0.5), _h(K, 3, seed=4, lo=0.5)
    want, got = _cpu_mm(a, b), _gpu_mm(a, b, transposed)
    bound = _mm_bound(a, b, want)
    assert (np.abs(got.astype(np.float64) - want) <= bound).all()
    # the test can fail: an f16 accumulator is off by far more than the bound here
    f16_err = np.abs(_f16_accumulated(a, b).astype(np.float64) - want)
    assert (f16_err > 10 * bound).all(), f16_err.min()


def _attn_bound(q, k, v, want, scale):
    """Scores err by ds <= scale (u + 2D 2^-24) |q| |k|^T (f16 q.k products); a score error moves a softmax
    probability by a relative 2 ds_max (of its row); p.v products round again (u) and the output once per side."""
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    D, S = q.shape[-1], k.shape[-2]
    ds = scale * (U + 2 * D * 2.0 ** -24) * (np.abs(q64) @ np.abs(np.swapaxes(k64, -1, -2)))
    rel = 2 * ds.max(axis=-1, keepdims=True) + 2 * U + 2 * S * 2.0 ** -24
    return rel * np.abs(v64).max(axis=-2, keepdims=True) + 2 * U * np.abs(want) + 2.0 ** -25


@pytest.mark.parametrize("L,S,D,causal,mask", [(5, 37, 64, False, False), (9, 130, 80, True, False),
                                              (3, 70, 33, False, True)])
def test_f16_attention_composed_and_flash_within_the_rounding_bound(L, S, D, causal, mask):
    q, k, v = _h(2, 3, L, D, seed=5), _h(2, 3, S, D, seed=6), _h(2, 3, S, D, seed=7)
    m = _h(L, S, seed=8) if mask else None
    scale = 1.0 / np.sqrt(D)
    cpu = [ember.tensor(x) for x in (q, k, v)]
    want = F.scaled_dot_product_attention(*cpu, attn_mask=None if m is None else ember.tensor(m),
                                          is_causal=causal).numpy().astype(np.float64)
    gpu = [ember.tensor(x, device="webgpu") for x in (q, k, v)]
    gm = None if m is None else ember.tensor(m, device="webgpu")
    bound = _attn_bound(q, k, v, want, scale)
    # the attention primitive (QK^T, softmax, PV kernels) and the one-kernel flash custom op
    composed = BE.to_numpy(ember.kernels.bound("attention", BE)(*(t._data for t in gpu), None if gm is None
                                                                 else gm._data, scale, causal)).astype(np.float64)
    flash = flash_attention(*gpu, attn_mask=gm, is_causal=causal).numpy().astype(np.float64)
    for name, y in (("composed", composed), ("flash", flash)):
        assert y.shape == want.shape
        assert (np.abs(y - want) <= bound).all(), f"{name}: max err {np.abs(y - want).max()}"


def test_norms_sum_in_f32_where_an_f16_sum_of_squares_overflows():
    """4099 values near 5: their squares sum to ~1e5, past f16's 65504, so an f16 accumulator gives inf (and a
    zero output); f32 sums give numpy's result, which rounds once (two roundings apart at most)."""
    x = (_h(3, 4099, seed=9, lo=0.5) * np.float16(8)).astype(np.float16)
    w, b = _h(4099, seed=10), _h(4099, seed=11)
    with np.errstate(over="ignore"):
        assert np.isinf(np.sum(x[0] ** 2, dtype=np.float16))
    c = [ember.tensor(t) for t in (x, w, b)]
    g = [ember.tensor(t, device="webgpu") for t in (x, w, b)]
    for name, fn in (("rms_norm", lambda x, w, b: F.rms_norm(x, (4099,), w)),
                     ("layer_norm", lambda x, w, b: F.layer_norm(x, (4099,), w, b))):
        want, got = fn(*c).numpy().astype(np.float64), fn(*g).numpy().astype(np.float64)
        assert np.isfinite(got).all(), name
        np.testing.assert_allclose(got, want, rtol=4 * U, atol=2.0 ** -14, err_msg=name)


def test_env_switch_and_ember_info():
    code = ("import ember; b = ember.device('webgpu').backend; print(b.f16_compute); print(b.description)")
    env = dict(os.environ, EMBER_WEBGPU_F16_COMPUTE="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    off, desc = r.stdout.strip().splitlines()[-2:]
    assert off == "False" and "float16 in f16 words, f32 compute (EMBER_WEBGPU_F16_COMPUTE=0)" in desc
    assert "float16 in f16 words, f16 compute with f32 accumulation" in BE.description


def test_packed_float16_kernels_never_enable_f16():
    """float16 packed (as on an adapter without shader-f16, which refuses `enable f16;`): no kernel source of a
    matmul, row or elementwise op asks for the extension (a comment or a packed word name mentioning f16 once did)."""
    import gc
    from ember.webgpu.buffers import F16_NATIVE, WORD
    gc.collect()
    assert not BE._half_storages
    sources, compile_, was_packed = [], BE.adapter.pipeline, BE.pack16
    BE.f16_native, BE.words[ember.float16] = False, WORD[ember.float16]
    BE.set_pack16(True)
    BE.adapter.pipeline = lambda code: (sources.append(code), compile_(code))[1]
    BE.pipelines.cache.clear()
    try:
        x = ember.tensor(_h(5, 37, seed=12), device="webgpu")
        w = ember.tensor(_h(37, 20, seed=13), device="webgpu")
        with ember.no_grad():
            for y in (x @ w, x[:, :36] @ w[:36], x.softmax(-1), F.rms_norm(x, (37,)), x + 1, x.sum(1)):
                y.numpy()
        del x, w, y
    finally:
        BE.adapter.pipeline = compile_
        BE.pipelines.cache.clear()
        gc.collect()
        BE.set_pack16(was_packed)
        BE.f16_native, BE.words[ember.float16] = True, F16_NATIVE
    assert len(sources) >= 5 and not [s for s in sources if "enable f16" in s]
