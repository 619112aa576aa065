"""WebGPU backend specifics: fused kernels, both matmul kernels, views, dtype storage, buffer
pooling, pipeline caching, limits and faults. The op parity suite (test_ops_*.py,
test_nn_functional.py) covers every primitive on webgpu through the `device` fixture."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import ember
import ember.nn.functional as F
from ember.device import device_status

_OK, _WHY = device_status("webgpu")  # False only for "no wgpu / no adapter"; a broken backend raises here
if not _OK:  # nothing here can run; under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend


def gpu(a, dtype=None):
    return ember.tensor(np.asarray(a), dtype=dtype, device="webgpu")


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ fused kernels (no-grad path)

def test_fused_softmax_norms_match_torch():
    x = rnd(3, 5, 70)
    w, b = rnd(70, seed=1), rnd(70, seed=2)
    tx = torch.tensor(x)
    with ember.no_grad():
        g = gpu(x)
        got = {"softmax": F.softmax(g, -1), "softmax_dim1": F.softmax(g, 1), "log_softmax": F.log_softmax(g, -1),
               "layer_norm": F.layer_norm(g, (70,), gpu(w), gpu(b)), "layer_norm_plain": F.layer_norm(g, (70,)),
               "rms_norm": F.rms_norm(g, (70,), gpu(w), eps=1e-6)}
    want = {"softmax": torch.softmax(tx, -1), "softmax_dim1": torch.softmax(tx, 1),
            "log_softmax": torch.log_softmax(tx, -1),
            "layer_norm": torch.nn.functional.layer_norm(tx, (70,), torch.tensor(w), torch.tensor(b)),
            "layer_norm_plain": torch.nn.functional.layer_norm(tx, (70,)),
            "rms_norm": torch.nn.functional.rms_norm(tx, (70,), torch.tensor(w), eps=1e-6)}
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k].numpy(), atol=1e-5, rtol=1e-5, err_msg=k)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_fused_attention_matches_torch(mask):
    q, k, v = rnd(2, 3, 5, 8), rnd(2, 3, 7, 8, seed=1), rnd(2, 3, 7, 4, seed=2)
    kw, tkw = {}, {}
    if mask == "causal":
        kw = tkw = {"is_causal": True}
    elif mask == "bool":
        m = np.random.default_rng(3).random((5, 7)) > 0.4
        m[:, 0] = True
        kw, tkw = {"attn_mask": gpu(m)}, {"attn_mask": torch.tensor(m)}
    elif mask == "float":
        m = rnd(3, 5, 7, seed=4)
        kw, tkw = {"attn_mask": gpu(m)}, {"attn_mask": torch.tensor(m)}
    with ember.no_grad():
        got = F.scaled_dot_product_attention(gpu(q), gpu(k), gpu(v), **kw).numpy()
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), **tkw)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-5)


def test_losses_and_batch_norm_with_device_tensors():
    x, tgt = rnd(5, 4), np.array([1, 0, 3, 3, 2])
    got = F.cross_entropy(gpu(x), gpu(tgt), label_smoothing=0.1).numpy()
    want = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(tgt), label_smoothing=0.1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    xb, rm, rv = rnd(2, 4, 3, 3), rnd(4, seed=1), np.abs(rnd(4, seed=2)) + 0.5
    got = F.batch_norm(gpu(xb), gpu(rm), gpu(rv), training=False).numpy()
    want = torch.nn.functional.batch_norm(torch.tensor(xb), torch.tensor(rm), torch.tensor(rv), training=False)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


# ------------------------------------------------------------------ matmul kernels and strided views

@pytest.mark.parametrize("kernel", ["auto", "tiled", "regs"])
def test_matmul_kernels_strided_and_broadcast(kernel, monkeypatch):
    monkeypatch.setattr(BE, "matmul_kernel", kernel)
    a, b = rnd(3, 67, 45), rnd(45, 130, seed=1)
    bt = rnd(130, 45, seed=2)
    with ember.no_grad():
        got = (gpu(a) @ gpu(b)).numpy()
        got_t = (gpu(a) @ gpu(bt).T).numpy()            # transposed operand read in place
        got_b = (gpu(a[:1]) @ gpu(rnd(4, 1, 45, 9, seed=3))).numpy()
    np.testing.assert_allclose(got, a @ b, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(got_t, a @ bt.T, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(got_b, a[:1] @ rnd(4, 1, 45, 9, seed=3), atol=1e-4, rtol=1e-5)
    # K and N multiples of 4: the vec4 kernel (under "auto"), B row-major and transposed
    a4, b4, w4 = rnd(3, 21, 48, seed=4), rnd(48, 36, seed=5), rnd(36, 48, seed=6)
    with ember.no_grad():
        np.testing.assert_allclose((gpu(a4) @ gpu(b4)).numpy(), a4 @ b4, atol=1e-4, rtol=1e-5)
        np.testing.assert_allclose(ember.nn.functional.linear(gpu(a4), gpu(w4)).numpy(), a4 @ w4.T, atol=1e-4, rtol=1e-5)


def test_views_are_zero_copy_and_read_in_place():
    x = rnd(6, 8, 5)
    g = gpu(x)
    v = g[1::2, 1:7:3, 2:].transpose(0, 2)       # a strided view of the same buffer
    assert v._data.storage is g._data.storage
    want = x[1::2, 1:7:3, 2:].transpose(2, 1, 0)
    np.testing.assert_array_equal(v.numpy(), want)
    np.testing.assert_allclose((v.exp() + g[:3, :2, :3].permute(2, 1, 0)).numpy(),
                               np.exp(want) + x[:3, :2, :3].transpose(2, 1, 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(g.flip(0, 2).numpy(), x[::-1, :, ::-1])
    np.testing.assert_array_equal(g.permute(2, 0, 1).reshape(5, 48).numpy(), x.transpose(2, 0, 1).reshape(5, 48))


# ------------------------------------------------------------------ dtypes

def test_low_precision_values_round_like_numpy():
    a, b = rnd(1000) * 300, rnd(1000, seed=1)
    for dt in ("float16", "bfloat16"):
        ga, gb = gpu(a, dt), gpu(b, dt)
        ca, cb = ember.tensor(a, dtype=dt), ember.tensor(b, dtype=dt)
        for name, f in {"mul": lambda x, y: x * y, "add": lambda x, y: x + y, "exp": lambda x, y: (y * 3).exp()}.items():
            g, c = f(ga, gb), f(ca, cb)
            assert g.dtype is c.dtype
            np.testing.assert_array_equal(g.float().numpy(), c.float().numpy(), err_msg=f"{dt} {name}")
    big = gpu(np.array([60000.0, -70000.0], np.float32)).to(ember.float16) * 2  # overflow to inf as numpy
    assert np.isinf(big.float().numpy()).all()


def test_float16_storage_follows_the_adapter():
    x = gpu(np.arange(1000, dtype=np.float16), "float16")
    bytes_per = x._data.storage.nbytes / 1000
    if BE.has_f16 and BE.words[ember.float16][0] == "f16":
        assert bytes_per < 2.1, "shader-f16 adapters store float16 natively (2 bytes)"
    elif BE.pack16:
        assert bytes_per < 2.1, "with 16-bit packing, float16 is stored two per word"
    else:
        assert bytes_per >= 4, "without shader-f16, float16 is widened to f32 words"
    np.testing.assert_array_equal((x * 3).numpy(), np.arange(1000, dtype=np.float16) * np.float16(3))


def test_int64_storage_and_limits():
    i = gpu(np.array([3, -2**31, 2**31 - 1], np.int64))
    np.testing.assert_array_equal(i.numpy(), [3, -2**31, 2**31 - 1])
    assert i.dtype is ember.int64 and i.numpy().dtype == np.int64
    with pytest.raises(ValueError, match="int64 as int32"):
        gpu(np.array([2**31], np.int64))
    assert not BE.supports(ember.float64) and BE.supports(ember.float16) and BE.supports(ember.bfloat16)
    with pytest.raises(TypeError, match="float64"):
        gpu(np.zeros(3), ember.float64)


# ------------------------------------------------------------------ resources

def test_no_buffer_growth_and_pipelines_compiled_once():
    lin = ember.nn.Sequential(ember.nn.Linear(16, 32), ember.nn.GELU(), ember.nn.Linear(32, 4)).to("webgpu")
    x = gpu(rnd(8, 16))
    with ember.no_grad():
        for _ in range(3):  # steady state: the previous output is alive while the next is computed
            y = lin(x)
        y.numpy()
        del y
        gc.collect()
        live, created, pipes = BE.pool.live, BE.pool.created, len(BE.pipelines.cache)
        for _ in range(1000):
            y = lin(x)
        y.numpy()
        del y
        gc.collect()
    assert BE.pool.live == live, "buffers leaked across 1000 forwards"
    assert BE.pool.created == created, "the pool allocated new buffers instead of reusing freed ones"
    assert len(BE.pipelines.cache) == pipes, "pipelines were recompiled"


def test_ops_never_read_back_to_the_host(monkeypatch):
    reads = []
    real = BE.adapter.read
    monkeypatch.setattr(BE.adapter, "read", lambda *a: reads.append(a) or real(*a))
    x = gpu(rnd(4, 10))
    with ember.no_grad():
        y = F.softmax(F.layer_norm(x @ x.T, (4,)), -1).sum(0).argmax()
        assert reads == []
        assert y.item() in range(4)
    assert len(reads) == 1


def test_buffer_over_adapter_limit_is_a_clear_error():
    with pytest.raises(MemoryError, match="exceeds the adapter limit"):
        BE.pool.take(BE.pool.limit + 4)


# ------------------------------------------------------------------ faults

def test_missing_adapter_lists_what_was_tried():
    from ember.webgpu.adapter_native import AdapterError, NativeAdapter
    with pytest.raises(AdapterError, match="no WebGPU adapter found; tried:"):
        NativeAdapter(backend="no-such-backend")


def test_device_lost_is_a_clear_error_and_cpu_keeps_working():
    from ember.webgpu.adapter_native import AdapterError
    from ember.webgpu.backend import WebGPUBackend
    be = WebGPUBackend()                      # a private device, so the shared one survives
    x = be.from_numpy(np.ones(4, np.float32), ember.float32)
    be.adapter.device.destroy()
    with pytest.raises(AdapterError, match="device lost"):
        be.to_numpy(be.binary("add", x, 1.0))
    with pytest.raises(AdapterError, match="device lost"):
        be.full((3,), 1.0, ember.float32)
    np.testing.assert_array_equal((ember.ones(3) * 2).numpy(), [2, 2, 2])


# ------------------------------------------------------------------ a real model, unchanged

def test_llama_prefill_and_cached_decode_match_cpu():
    """Model code never names a backend: the same tiny Llama (GQA, rope, KV cache) on webgpu."""
    llama = pytest.importorskip("ember.models.llama.model")
    from ember.models.llama.config import LlamaConfig
    cfg = LlamaConfig(vocab_size=300, dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64)
    ember.manual_seed(0)
    m = llama.Llama(cfg)
    toks = np.array([[1, 5, 9, 33, 200, 7, 3, 2]])
    out = {}
    with ember.no_grad():
        for dev in ("cpu", "webgpu"):
            m.to(dev)
            cache = m.new_cache()
            prefill = m(ember.tensor(toks, device=dev), cache).numpy()
            step = m(ember.tensor(np.array([[4]]), device=dev), cache).numpy()
            out[dev] = (prefill, step)
    np.testing.assert_allclose(out["webgpu"][0], out["cpu"][0], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(out["webgpu"][1], out["cpu"][1], atol=1e-5, rtol=1e-5)


def test_bind_groups_made_once_per_buffers_and_dropped_with_a_released_buffer(monkeypatch):
    """The adapter records every dispatch into one compute pass and reuses a bind group for the same pipeline and
    buffers (a decoded token repeats the last one's); a buffer the pool releases drops them all, so no cached group
    names a freed buffer: results stay numpy's while buffers come and go."""
    ad = BE.adapter
    made = []
    create = ad.device.create_bind_group
    monkeypatch.setattr(ad.device, "create_bind_group", lambda **kw: made.append(1) or create(**kw))
    monkeypatch.setattr(BE, "fuse", False)
    a = rnd(257)
    x = gpu(a)
    y = x * 3.0
    first = len(made)
    for _ in range(5):
        z = x * 3.0  # the same pipeline, input, meta and (pooled) output buffer as y's twin before it
        np.testing.assert_array_equal(z.numpy(), y.numpy())
        del z
    assert first >= 1 and len(made) == first + 1  # one more group: z's output buffer, then reused
    monkeypatch.setattr(BE.pool, "max_pooled", 0)  # every freed buffer is released now
    for k in range(8):
        w = gpu(a + k) * 2.0 + 1.0
        np.testing.assert_allclose(w.numpy(), (a + k) * np.float32(2) + np.float32(1), rtol=1e-6)
        del w
        gc.collect()
    assert len(ad._groups) <= 4  # cleared by each release
