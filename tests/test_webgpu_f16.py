"""float16 / bfloat16 on WebGPU in each storage form against the numpy backend (which is checked against torch):
  wide    f32 words rounded to the format after every op (the default for bfloat16, and for float16 without
          shader-f16)
  packed  two 16-bit elements per u32 word, unpacked in the kernels (set_pack16, EMBER_WEBGPU_PACK16=1)
  native  float16 in f16 words (shader-f16), bfloat16 packed
Odd element counts matter for packing (a word's two halves belong to different threads, a view may start
mid-word), so the shapes are odd and views are offset."""
from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend
MODES = ["wide", "packed"] + (["native"] if BE.has_f16 else [])
WORDS = {"wide": ("f32", "f32"), "packed": ("f16x2", "bf16x2"), "native": ("f16", "bf16x2")}  # (float16, bfloat16)


@contextlib.contextmanager
def storage(mode):
    """The backend's 16-bit words set to `mode` while the block runs (no float16/bfloat16 array may outlive it:
    kernels look words up by dtype)."""
    gc.collect()
    assert not BE._half_storages, "float16/bfloat16 webgpu arrays from an earlier test are still alive"
    saved = dict(BE.words), BE.f16_native, BE.pack16
    try:
        BE.f16_native = mode == "native"
        if BE.f16_native:
            from ember.webgpu.buffers import F16_NATIVE
            BE.words[ember.float16] = F16_NATIVE
        BE.set_pack16(mode != "wide")
        assert (BE.words[ember.float16][0], BE.words[ember.bfloat16][0]) == WORDS[mode]
        yield
    finally:
        BE.words, BE.f16_native, BE.pack16 = saved
        gc.collect()


def _pair(a, dtype):
    """(webgpu tensor, cpu tensor) of a in dtype: the same rounded values."""
    c = ember.tensor(a).to(dtype)
    return ember.tensor(c.float().numpy(), device="webgpu").to(dtype), c


def _same(g, c, atol=0.0, rtol=0.0, what=""):
    assert g.dtype is c.dtype and g.shape == c.shape, what
    np.testing.assert_allclose(g.float().numpy(), c.float().numpy(), atol=atol, rtol=rtol, err_msg=what)


def _rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


DTYPES = ["float16", "bfloat16"]
ULP = {"float16": 1e-3, "bfloat16": 8e-3}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_storage_bytes_and_exact_round_trip(mode, dtype):
    special = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, -6e-5, 1e-40, np.inf, -np.inf, np.nan], np.float32)
    with storage(mode):
        for n in (1, 2, 7, 1001):
            a = np.concatenate([special, _rnd(n, scale=100)])[:max(n, 1)]
            g, c = _pair(a, getattr(ember, dtype))
            word = BE.words[g.dtype][0]
            assert g._data.storage.nbytes >= (4 if word == "f32" else 2) * n
            got, want = g.numpy(), c.numpy()   # storage arrays: float16 values, bfloat16 bits
            gb, wb = got.view(np.uint16), want.view(np.uint16)
            nan = (wb & 0x7FFF) > (0x7C00 if dtype == "float16" else 0x7F80)
            # a NaN's payload is the driver's (WGSL leaves it open: NVIDIA's f16 NaN is 0x7fff, numpy's 0x7e00)
            assert ((gb[nan] & 0x7FFF) > (0x7C00 if dtype == "float16" else 0x7F80)).all()
            np.testing.assert_array_equal(gb[~nan], wb[~nan])
        if WORDS[mode][DTYPES.index(dtype)] != "f32":   # 16-bit storage: half the f32-word bytes
            g = ember.zeros(1 << 16, dtype=getattr(ember, dtype), device="webgpu")
            assert g._data.storage.nbytes == 2 << 16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [7, 1001])   # odd counts: the last word half-filled
def test_elementwise_matches_numpy_backend(mode, dtype, n):
    dt = getattr(ember, dtype)
    with storage(mode), ember.no_grad():
        ga, ca = _pair(_rnd(n, scale=3), dt)
        gb, cb = _pair(_rnd(n, seed=1), dt)
        for name, f in {"add": lambda x, y: x + y, "mul_scalar": lambda x, y: x * 3 + 1, "exp": lambda x, y: (y * 2).exp(),
                        "where": lambda x, y: ember.where(x > y, x, y), "cast": lambda x, y: x.float().to(dt) * y,
                        "odd_view": lambda x, y: x[1:] - y[:-1] if n > 1 else x - y,
                        "strided": lambda x, y: x[::3] * 2, "cumsum": lambda x, y: x.cumsum(0)}.items():
            # arithmetic rounds once, as numpy: exact; the GPU's exp may be an ulp off; cumsum adds in another order
            tol = {"exp": ULP[dtype], "cumsum": 1e-2}.get(name, 0)
            _same(f(ga, gb), f(ca, cb), atol=tol, rtol=tol, what=f"{mode} {dtype} {name}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", [(1, 33, 17), (4, 64, 8)])   # decode row, tiled; (4, 64, 8): the vec4 path
def test_matmul_matches_numpy_backend(mode, dtype, M, K, N):
    dt = getattr(ember, dtype)
    with storage(mode), ember.no_grad():
        ga, ca = _pair(_rnd(2, M, K), dt)
        gb, cb = _pair(_rnd(K, N, seed=1), dt)
        tol = 2e-3 if dtype == "float16" else 1.6e-2   # accumulation order differs: a rounding of the output apart
        _same(ga @ gb, ca @ cb, atol=tol * 4, rtol=tol, what="a @ b")
        _same(ga @ gb[:, 1:].t().t(), ca @ cb[:, 1:], atol=tol * 4, rtol=tol, what="a @ an offset view")
        _same(F.linear(ga, gb.t()), F.linear(ca, cb.t()), atol=tol * 4, rtol=tol, what="linear")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_norms_and_attention_match_numpy_backend(mode, dtype):
    dt = getattr(ember, dtype)
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    with storage(mode), ember.no_grad():
        gx, cx = _pair(_rnd(3, 5, 37, scale=2), dt)
        gw, cw = _pair(_rnd(37, seed=1), dt)
        gb, cb = _pair(_rnd(37, seed=2), dt)
        _same(gx.softmax(-1), cx.softmax(-1), atol=tol, rtol=tol, what="softmax")
        _same(F.log_softmax(gx, 1), F.log_softmax(cx, 1), atol=tol * 4, rtol=tol, what="log_softmax axis 1")
        _same(F.layer_norm(gx, (37,), gw, gb), F.layer_norm(cx, (37,), cw, cb), atol=tol * 4, rtol=tol, what="layer_norm")
        _same(F.rms_norm(gx, (37,), gw), F.rms_norm(cx, (37,), cw), atol=tol * 4, rtol=tol, what="rms_norm")
        q, k, v = (_pair(_rnd(2, 3, L, 19, seed=s), dt) for s, L in ((3, 5), (4, 9), (5, 9)))
        want = F.scaled_dot_product_attention(q[1], k[1], v[1], is_causal=True)
        _same(F.scaled_dot_product_attention(q[0], k[0], v[0], is_causal=True), want, atol=tol * 4, rtol=tol,
              what="attention (composed)")
        with ember.kernels.tuned("flash_attention", "webgpu", mode="flash"):
            _same(F.scaled_dot_product_attention(q[0], k[0], v[0], is_causal=True), want, atol=tol * 4, rtol=tol,
                  what="attention (flash custom op)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_cache_rows_written_in_place_at_odd_offsets(mode, dtype):
    """copy_into a packed cache: each row lands at an odd element offset, sharing words with its neighbours."""
    dt = getattr(ember, dtype)
    with storage(mode), ember.no_grad():
        gc, cc = _pair(np.zeros((1, 11, 3), np.float32), dt)
        for t in range(11):
            gr, cr = _pair(_rnd(1, 1, 3, seed=t), dt)
            gc = ember.copy_into(gc, gr, (0, t, 0))
            cc = ember.copy_into(cc, cr, (0, t, 0))
        _same(gc, cc, what="cache")
        _same(gc[:, 3:8].sum(1), cc[:, 3:8].sum(1), atol=1e-2, rtol=1e-2, what="a read of the written rows")


def test_switching_with_live_half_arrays_is_refused():
    with storage("wide"):
        x = ember.ones(3, dtype=ember.bfloat16, device="webgpu")
        with pytest.raises(ember.EmberError, match=r"set_pack16\(True\): 1 float16/bfloat16 array\(s\)"):
            BE.set_pack16(True)
        BE.set_pack16(False)   # no change: allowed
        del x
        gc.collect()
        BE.set_pack16(True)
        assert BE.words[ember.bfloat16][0] == "bf16x2"


def test_a_packed_custom_op_kernel():
    """ember.custom_op WGSL sees packed inputs as f32 values and stores through to_out."""
    with storage("packed"), ember.no_grad():
        for dt in (ember.float16, ember.bfloat16):
            x, c = _pair(_rnd(2, 5, 3, 6), dt)
            cos, sin = _rnd(5, 3, seed=1), _rnd(5, 3, seed=2)
            got = F.rotary_embedding(x, ember.tensor(cos, device="webgpu"), ember.tensor(sin, device="webgpu"))
            want = F.rotary_embedding(c, ember.tensor(cos), ember.tensor(sin))
            _same(got, want, atol=2e-2, rtol=2e-2, what=f"rotary {dt.name}")
