"""ember.copy_into (the slice-assignment primitive) on every device against numpy slice assignment and
against its composed fallback (x[slices] = src), with gradients through the composed path as torch
gives them; and Llama's preallocated KV cache that writes one row per token with it: decoding equals
the uncached forward across a capacity doubling, and the buffers are written in place."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.models.common.cache import KVCache
from ember.models.llama.config import LlamaConfig
from ember.models.llama.model import Llama


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = [((5, 7), (2, 3), (3, 4)), ((2, 3, 9, 4), (2, 3, 1, 4), (0, 0, 8, 0)),
         ((3, 33), (3, 33), (0, 0)), ((4, 1, 6), (2, 1, 3), (1, 0, 3)), ((6,), (0,), (6,))]


@pytest.mark.parametrize("dst_shape,src_shape,starts", CASES)
def test_copy_into_matches_numpy_and_composed(device, dst_shape, src_shape, starts, monkeypatch):
    d, s = _rnd(*dst_shape), _rnd(*src_shape, seed=1)
    want = d.copy()
    want[tuple(slice(a, a + n) for a, n in zip(starts, src_shape))] = s
    with ember.no_grad():
        dst = ember.tensor(d, device=device)
        out = ember.copy_into(dst, ember.tensor(s, device=device), starts)
        assert out is dst
        np.testing.assert_array_equal(dst.numpy(), want)
        be = ember.device(device).backend
        monkeypatch.setattr(be, "copy_into", None, raising=False)   # the composed fallback
        dst2 = ember.tensor(d, device=device)
        ember.copy_into(dst2, ember.tensor(s, device=device), starts)
        np.testing.assert_array_equal(dst2.numpy(), want)


def test_copy_into_views_casts_and_bfloat16(device):
    with ember.no_grad():
        dst = ember.zeros(4, 6, device=device)
        view = dst.narrow(0, 1, 2)                                  # (2, 6), shares dst's buffer
        ember.copy_into(view, ember.tensor(np.arange(6, dtype=np.int32).reshape(1, 6), device=device), (1, 0))
        want = np.zeros((4, 6), np.float32)
        want[2] = np.arange(6)
        np.testing.assert_array_equal(view.numpy(), want[1:3])     # the int32 source is cast to float32
        if ember.kernels.bound("copy_into", ember.device(device).backend) is not None:  # in place: the base sees it
            np.testing.assert_array_equal(dst.numpy(), want)
        b = ember.zeros(3, 4, dtype=ember.bfloat16, device=device)
        src = _rnd(2, 2, seed=3)
        ember.copy_into(b, ember.tensor(src, dtype=ember.bfloat16, device=device), (1, 2))
        ref = torch.zeros(3, 4, dtype=torch.bfloat16)
        ref[1:3, 2:4] = torch.tensor(src).to(torch.bfloat16)
        np.testing.assert_array_equal(b.float().numpy(), ref.float().numpy())


def test_copy_into_read_only_host_array_is_not_written():
    a = np.zeros((3, 3), np.float32)
    a.setflags(write=False)
    t = ember.from_numpy(a)
    with ember.no_grad():
        ember.copy_into(t, ember.ones(1, 2), (2, 1))
    assert not a.any() and t.numpy()[2, 1:].tolist() == [1.0, 1.0]


def test_copy_into_gradients_as_torch(device):
    x0, s0 = _rnd(4, 5), _rnd(2, 3, seed=1)
    x = ember.tensor(x0, device=device, requires_grad=True)
    s = ember.tensor(s0, device=device, requires_grad=True)
    y = x * 2.0
    ember.copy_into(y, s * 3.0, (1, 2))
    (y * y).sum().backward()
    tx, ts = torch.tensor(x0, requires_grad=True), torch.tensor(s0, requires_grad=True)
    ty = tx * 2.0
    ty[1:3, 2:5] = ts * 3.0
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("src_shape,starts,match", [((2, 3), (3, 0), "does not fit"), ((2, 3), (0, -1), "does not fit"),
                                                     ((2,), (0,), "must match"), ((1, 1), (0,), "must match")])
def test_copy_into_rejects_what_does_not_fit(src_shape, starts, match):
    with pytest.raises((IndexError, ValueError), match=match):
        ember.copy_into(ember.zeros(4, 3), ember.zeros(*src_shape), starts)


# ------------------------------------------------------------------ the Llama KV cache

def _llama(device):
    c = LlamaConfig(vocab_size=97, dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=40)
    ember.manual_seed(0)
    return Llama(c).eval().requires_grad_(False).to(device)


def test_kv_cache_decode_equals_full_forward_across_growth(device, monkeypatch):
    monkeypatch.setattr(KVCache, "MIN_CAPACITY", 4)    # 4 -> 8 -> 16: two doublings in 13 tokens
    m = _llama(device)
    ids = np.random.default_rng(2).integers(0, 97, (2, 13))
    with ember.no_grad():
        full = m(ember.tensor(ids, device=device)).numpy()                  # (2, 13, vocab), no cache
        cache = m.new_cache()
        got = [m(ember.tensor(ids[:, :3]), cache).numpy()]
        caps = []
        for t in range(3, 13):
            got.append(m(ember.tensor(ids[:, t:t + 1]), cache).numpy())
            caps.append(cache.k[0].shape[2])
    np.testing.assert_allclose(np.concatenate(got, 1), full, atol=2e-5, rtol=1e-5)
    assert caps[0] == 4 and caps[-1] == 16 and sorted(set(caps)) == [4, 8, 16]
    c = m.config
    assert cache.nbytes() == 2 * 13 * 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert cache.capacity_nbytes() == 2 * 16 * 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4


def test_kv_cache_writes_in_place_on_webgpu():
    from ember.device import device_status
    if not device_status("webgpu")[0]:
        pytest.skip("webgpu unavailable")
    m = _llama("webgpu")
    be = ember.device("webgpu").backend
    with ember.no_grad():
        cache = m.new_cache()
        m(ember.tensor([[1, 2, 3]]), cache)
        buf = cache.k[0]._data.storage
        c0 = be.counters()
        m(ember.tensor([[4]]), cache)
        c1 = be.counters()
    assert cache.k[0]._data.storage is buf                   # same buffer: no per-token reallocation
    assert c1["readbacks"] == c0["readbacks"]


@pytest.mark.parametrize("window", [None, 4])
def test_kv_cache_reorder_moves_the_written_rows(device, window):
    """Beam search's reorder: every written slot of beam i comes from beam rows[i] (as index_select of the whole
    buffer gives), a global layer's unwritten capacity is not read, and the identity order leaves the buffers
    as they are (no copy)."""
    from ember.models.common.cache import KVCache as Cache
    cache = Cache(1, 2, 3, 64, windows=[window])
    ks, vs = _rnd(3, 2, 6, 3), _rnd(3, 2, 6, 3, seed=1)
    with ember.no_grad():
        for t in range(6):  # six tokens: the ring of 4 has wrapped, the global buffer holds 6 of 64
            cache.update(0, ember.tensor(ks[:, :, t:t + 1], device=device), ember.tensor(vs[:, :, t:t + 1], device=device))
            cache.pos += 1
        k0, cap = cache.k[0], cache.capacity(0)
        cache.reorder([0, 1, 2])
        assert cache.k[0] is k0
        filled = min(6, cache.capacity(0))
        before_k, before_v = cache.k[0].numpy()[:, :, :filled], cache.v[0].numpy()[:, :, :filled]
        rows = [2, 0, 0]
        cache.reorder(rows)
    np.testing.assert_array_equal(cache.k[0].numpy()[:, :, :filled], before_k[rows])
    np.testing.assert_array_equal(cache.v[0].numpy()[:, :, :filled], before_v[rows])
    assert cache.capacity(0) == cap == (4 if window else 64)
