"""The CPU backend's row-vector product with a large re-stored float32 weight (an LM head each decoded token):
decode.c's ember_matvec_f32 natively, in place of BLAS's M=1 gemm.

Reference: the composed in-order sum, y = 0; y = y + x[i] * W^T[i, :] for each input i, in float32 numpy (a
multiply then an add per input, rounded each step): the kernel computes every output in exactly these steps, so
the two are equal bit for bit, at any thread count; both within float32 rounding of the float64 product. A weight
whose values are all halves (a float16 checkpoint's) is read as halves (matvec_f16.c): the same bits again."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
from ember.backends import cpu_matmul

if cpu_matmul.native_kernels() is None:  # no C compiler: BLAS serves every product
    pytest.skip(f"no compiled CPU kernels here ({cpu_matmul.native_kernels_status()})", allow_module_level=True)


def _in_order(x, wt):
    y = np.zeros(wt.shape[1], np.float32)
    for i in range(wt.shape[0]):
        y = y + x[i] * wt[i]
    return y


@pytest.mark.parametrize("k, n", [(288, 32000), (512, 1001), (1024, 257)])
def test_row_vector_product_is_the_in_order_sum(k, n):
    rng = np.random.default_rng(k + n)
    x, wt = rng.standard_normal((1, 1, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    nk = cpu_matmul.native_kernels()
    before = nk.threads
    try:
        got = {}
        for t in (1, 2, 3):
            nk.set_threads(t)
            got[t] = (ember.tensor(x) @ ember.tensor(wt)).numpy()
    finally:
        nk.set_threads(before)
    assert got[1].shape == (1, 1, n)
    np.testing.assert_array_equal(got[1][0, 0], _in_order(x[0, 0], wt))
    assert np.array_equal(got[2], got[1]) and np.array_equal(got[3], got[1])
    ref = x.astype(np.float64) @ wt.astype(np.float64)
    assert np.abs(got[1] - ref).max() <= 1e-5 * np.sqrt(k) * np.abs(ref).max()


def test_a_weight_of_halves_is_read_as_halves_with_the_same_bits(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 384), dtype=np.float32)
    halves = rng.standard_normal((384, 5003)).astype(np.float16).astype(np.float32)  # a float16 checkpoint's values
    floats = halves + np.float32(1e-5)  # (not halves)
    nk = cpu_matmul.native_kernels()
    read = []
    for name in ("matvec_f32", "matvec_f16"):
        monkeypatch.setattr(nk, name, lambda *a, _f=getattr(nk, name), _n=name: read.append(_n) or _f(*a))
    before = nk.threads
    try:
        for wt in (halves, floats):
            got = {}
            for t in (1, 3):
                nk.set_threads(t)
                got[t] = (ember.tensor(x) @ ember.tensor(wt)).numpy()
            np.testing.assert_array_equal(got[1][0], _in_order(x[0], wt))
            assert np.array_equal(got[3], got[1])
    finally:
        nk.set_threads(before)
    assert read == ["matvec_f16"] * 2 + ["matvec_f32"] * 2
    half = cpu_matmul.half_copy(halves)
    assert half is cpu_matmul.half_copy(halves) and half.dtype == np.float16  # one copy per weight
    assert cpu_matmul.half_copy(floats) is None


def test_a_short_weight_is_read_from_its_blocked_copy_within_the_budget(monkeypatch):
    """A weight of at most BLOCKED_MAX_OUTPUTS outputs: its blocked copy (made once, counted against
    EMBER_BLOCKED_WEIGHT_BYTES while it lives) gives the in-order sum's bits on any thread count; with no budget
    left the input-major weight serves, the same bits."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 768), dtype=np.float32)
    wt = rng.standard_normal((768, 770), dtype=np.float32)  # (a last block of two outputs)
    nk = cpu_matmul.native_kernels()
    read = []
    for name in ("matvec_f32", "matvec_f32_blocked"):
        monkeypatch.setattr(nk, name, lambda *a, _f=getattr(nk, name), _n=name: read.append(_n) or _f(*a))
    gc.collect()  # (copies of earlier tests' weights freed now, not while this one counts)
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))  # (whatever earlier tests' copies hold)
    before, live, w = nk.threads, cpu_matmul._blocked_bytes[0], ember.tensor(wt)
    try:
        for t in (1, 3):
            nk.set_threads(t)
            np.testing.assert_array_equal((ember.tensor(x) @ w).numpy()[0], _in_order(x[0], wt))
        assert cpu_matmul._blocked_bytes[0] == live + 4 * 49 * 16 * 768  # one copy: 49 blocks of 16 outputs
        other = wt.copy()
        monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", "0")
        np.testing.assert_array_equal((ember.tensor(x) @ ember.tensor(other)).numpy()[0], _in_order(x[0], other))
    finally:
        nk.set_threads(before)
    assert read == ["matvec_f32_blocked"] * 2 + ["matvec_f32"]
    del w
    gc.collect()
    assert cpu_matmul._blocked_bytes[0] == live  # freed with its weight


def test_what_the_kernel_does_not_take_stays_exact():
    """Inputs not a multiple of 8, a transposed view, two rows: BLAS's products, still the float64 one's values."""
    rng = np.random.default_rng(1)
    for x, wt in ((rng.standard_normal((1, 300), dtype=np.float32), rng.standard_normal((300, 1000), dtype=np.float32)),
                  (rng.standard_normal((1, 512), dtype=np.float32), rng.standard_normal((1000, 512), dtype=np.float32).T),
                  (rng.standard_normal((2, 512), dtype=np.float32), rng.standard_normal((512, 1000), dtype=np.float32))):
        got = (ember.tensor(x) @ ember.tensor(wt)).numpy()
        ref = x.astype(np.float64) @ wt.astype(np.float64)
        assert got.shape == ref.shape and np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_greedy_head_through_the_kernel_picks_the_float64_argmax():
    """The LM head (re-stored input-major at load, 288 x 32000 past the threshold): generate's greedy pick."""
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    model = Llama(LlamaConfig(vocab_size=32000, dim=288, hidden_dim=768, n_layers=1, n_heads=6, n_kv_heads=6,
                              max_seq_len=32)).eval().requires_grad_(False)
    rng = np.random.default_rng(2)
    head = model.lm_head.weight
    head._data[...] = rng.standard_normal(head.shape, dtype=np.float32)
    ember.nn.relayout_linear_weight(head)
    x = ember.tensor(rng.standard_normal((1, 1, 288), dtype=np.float32))
    logits64 = np.asarray(head.numpy(), np.float64) @ x.numpy()[0, 0].astype(np.float64)  # (32000, 288) @ (288,)
    assert model.greedy_head(x) == int(np.argmax(logits64))
