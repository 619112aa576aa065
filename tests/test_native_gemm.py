"""gemm_native.c, the native float32 GEMM the CPU backend's matmul takes from BLAS for products of a few to a few
hundred rows (ember.backends.cpu_matmul.native_gemm), against references computed here:

- Each build that has the kernel (-march=native: AVX-512 or AVX2 with FMA; plain AVX2 where the native build adds
  VNNI) against float64 numpy over its edges: rows past a register tile, columns past a panel or a vector, k past a
  block of the panel's copy, operands as strided views.
- The bits depend on neither the thread count nor the build: every output is one fused multiply-add per k, in
  order, in each of them.
- Builds without those vector paths (SSSE3, plain C) say so, and the backend keeps BLAS.
- A weight's blocked copy (cpu_matmul.blocked: blocks of 16 columns, the decode plan's layout) gives the bits of
  the weight as it lies, in every build and on any thread count.
- The backend routes the products the rule chooses to the kernel, and the rest to BLAS; a weight read again is
  read from its blocked copy from its second product on (within EMBER_BLOCKED_WEIGHT_BYTES), with more rows.
"""
from __future__ import annotations

import numpy as np
import pytest

from ember.backends import cpu_fused
from ember.backends import numpy_backend as NB
import gc

from ember.backends import cpu_matmul
from ember.backends.cpu_matmul import blocked, native_kernels
from native_builds import build_variants

EPS = np.finfo(np.float32).eps


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    return build_variants(tmp_path_factory, tags=("native", "avx2", "ssse3", "scalar"))


def _check(c, a, b):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 4 * EPS * a.shape[1] * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    assert c.shape == ref.shape and c.dtype == np.float32
    assert (np.abs(c - ref) <= bound).all(), float((np.abs(c - ref) / bound).max())


def _gemm_builds(builds):
    """The builds with the kernel: every AVX2 one has it (a CPU without AVX2 builds SSSE3 or plain C natively)."""
    out = {tag: k for tag, k in builds.items() if k.sgemm_width}
    assert all(tag in out for tag, k in builds.items() if k.simd.startswith("avx2")), "an AVX2 build without it"
    return out


@pytest.mark.parametrize("m", [1, 2, 5, 8, 9, 17, 70])
@pytest.mark.parametrize("k,n", [(1, 1), (3, 17), (128, 31), (300, 33), (513, 100), (64, 257)])
def test_against_float64(builds, m, k, n):
    for tag, kern in _gemm_builds(builds).items():
        kern.set_threads(2)
        a, b = rnd(m, k, seed=m), rnd(k, n, seed=k + n)
        _check(kern.sgemm(a, b), a, b)
        # views: rows further apart than they are wide (a slice of wider arrays)
        wa, wb = rnd(m, k + 7, seed=1), rnd(k, n + 40, seed=2)
        av, bv = wa[:, 3:3 + k], wb[:, 5:5 + n]
        _check(kern.sgemm(av, bv), av, bv)
        # the bias: the product's bits plus one add, as numpy's y += b after it
        bias = rnd(n, seed=3)
        assert np.array_equal(kern.sgemm(av, bv, bias), kern.sgemm(av, bv) + bias)


def test_bits_independent_of_threads_and_build(builds):
    kernels = _gemm_builds(builds)
    a, b = rnd(96, 700, seed=3), rnd(700, 600, seed=4)  # several groups of panels and blocks of k
    results = []
    for tag, kern in kernels.items():
        for t in (1, 2, 3):
            kern.set_threads(t)
            results.append((tag, t, kern.sgemm(a, b)))
        kern.set_threads(2)
    assert len(results) >= 3 or not kernels
    for tag, t, c in results[1:]:
        assert np.array_equal(c, results[0][2]), (tag, t)


def test_builds_without_the_kernel(builds):
    for tag in ("ssse3", "scalar"):
        kern = builds.get(tag)
        if kern is None or tag == "ssse3" and kern.simd != "ssse3":
            continue
        assert kern.sgemm_width == 0
        with pytest.raises(ValueError, match="gemm_native"):
            kern.sgemm(rnd(4, 8), rnd(8, 8))


def _spy_on_the_kernel(monkeypatch, note):
    """The native kernels' sgemm, each call noted as note(a, blocked) in the list returned."""
    kern = native_kernels()
    assert kern is not None, "no native kernels (a C compiler builds them)"
    if not kern.sgemm_width:
        pytest.skip("this CPU has neither AVX-512 nor AVX2 with FMA")
    taken = []
    real = type(kern).sgemm

    def spy(self, a, b, bias=None, blocked=None, act=0):
        taken.append(note(a, blocked))
        return real(self, a, b, bias, blocked, act)
    monkeypatch.setattr(type(kern), "sgemm", spy)
    return taken


def test_backend_routes_by_rows(monkeypatch):
    taken = _spy_on_the_kernel(monkeypatch, lambda a, blocked: a.shape[0])
    be = NB.NumpyBackend()
    w = rnd(384, 400, seed=5)
    for rows, lead, expect in [(128, (1,), True), (8, (2,), True), (300, (1,), False), (4, (1,), False),
                               (1, (1,), False)]:
        taken.clear()
        x = rnd(*lead, rows, 384, seed=rows)
        y = be.matmul(x, w.copy())  # (a weight's first product: read as it lies, not from a blocked copy)
        assert y.shape == lead + (rows, 400)
        _check(y.reshape(-1, 400), x.reshape(-1, 384), w)
        assert bool(taken) == expect, (rows, lead)
    # the linear kernel: its bias in the product's store, the bits of the product then numpy's add
    taken.clear()
    x, wl, bl = rnd(2, 64, 384, seed=10), rnd(384, 400, seed=11).T, rnd(400, seed=12)  # (the weight as stored)
    y = cpu_fused.linear(be, x, wl, bl)
    assert taken and np.array_equal(y, be.matmul(x, wl.T) + bl)
    taken.clear()
    small = rnd(16, 64, seed=6)
    be.matmul(rnd(32, 16, seed=7), small)  # under 2^20 multiply-adds: the call's overhead, BLAS keeps it
    be.matmul(rnd(64, 256, seed=8), rnd(256, 2048, seed=9))  # rows 8 KiB apart: L2 set conflicts, BLAS keeps it
    assert not taken


@pytest.mark.parametrize("m", [1, 2, 8, 9, 70])
@pytest.mark.parametrize("k,n", [(1, 16), (3, 17), (128, 31), (300, 33), (513, 100), (64, 257)])
def test_a_blocked_weight_gives_the_same_bits(builds, m, k, n):
    for tag, kern in _gemm_builds(builds).items():
        a, bias = rnd(m, k, seed=m), rnd(n, seed=5)
        wide = rnd(k, n + 40, seed=k + n)
        for b in (wide[:, :n].copy(), wide[:, 5:5 + n]):  # a weight as it lies, and a slice of a wider one
            wb = blocked(b)
            assert wb.shape == (-(-n // 16), k, 16)
            plain = kern.sgemm(a, b, bias)
            for t in (1, 2, 3):
                kern.set_threads(t)
                assert np.array_equal(kern.sgemm(a, b, bias, wb), plain), (tag, t)
                assert np.array_equal(kern.sgemm(a, b, None, wb), kern.sgemm(a, b)), (tag, t)
            kern.set_threads(2)
        with pytest.raises(ValueError, match="blocked copy"):
            kern.sgemm(a, b, bias, wb[:, :-1])


def test_a_weight_read_again_is_read_from_its_blocked_copy(monkeypatch):
    """A weight's first product reads it as it lies; from its second on, its blocked copy (made once, counted
    against EMBER_BLOCKED_WEIGHT_BYTES while it lives) with the same bits, which also takes products of a few rows
    and of thousands (_BLOCKED_ROWS) and a weight whose rows lie 8 KiB apart. An array read once (a training step's
    weight, an activation) is never copied; with no budget left the weight is read as it lies."""
    taken = _spy_on_the_kernel(monkeypatch, lambda a, blocked: (a.shape[0], blocked is not None))
    gc.collect()  # (copies of earlier tests' weights freed now, not while this one counts)
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))  # (whatever earlier tests' copies hold)
    be = NB.NumpyBackend()
    live = cpu_matmul._blocked_bytes[0]
    w, x = rnd(384, 2000, seed=1), rnd(128, 384, seed=2)
    first = be.matmul(x, w)
    assert taken == [(128, False)] and cpu_matmul._blocked_bytes[0] == live
    assert np.array_equal(be.matmul(x, w), first)  # its blocked copy: the same bits
    assert taken[-1] == (128, True) and cpu_matmul._blocked_bytes[0] == live + 4 * 125 * 384 * 16
    for rows in (2, 4, 1000):
        xr = rnd(rows, 384, seed=rows)
        _check(be.matmul(xr, w), xr, w)
        assert taken[-1] == (rows, True)
    wide = rnd(256, 2048, seed=3)  # rows 8 KiB apart: BLAS's as it lies, the kernel's from a blocked copy
    xw = rnd(64, 256, seed=4)
    taken.clear()
    be.matmul(xw, wide)
    assert not taken
    _check(be.matmul(xw, wide), xw, wide)
    assert taken == [(64, True)]
    # the fused linear (its bias in the product's store): the same rule
    wl, bl = rnd(384, 400, seed=11).T, rnd(400, seed=12)
    y1, y2 = cpu_fused.linear(be, x, wl, bl), cpu_fused.linear(be, x, wl, bl)
    assert np.array_equal(y1, y2) and [b for _, b in taken[-2:]] == [False, True]
    # ... and of more rows than the kernel takes from a weight as it lies: BLAS's first (one read counted: the
    # backend's matmul it falls back to counts it, not the fused call before it), the kernel's from a copy made at
    # the second; the activation's fused call declines until the copy is there (the caller composes), then takes it
    xl, wl2 = rnd(600, 384, seed=13), rnd(384, 400, seed=14).T
    before, taken[:] = cpu_matmul._blocked_bytes[0], []
    assert cpu_fused.linear_act(be, xl, wl2, bl, "gelu") is None
    first = cpu_fused.linear(be, xl, wl2, bl)
    assert not taken and cpu_matmul._blocked_bytes[0] == before
    assert cpu_fused.linear_act(be, xl, wl2, bl, "gelu") is None and not taken
    assert np.array_equal(cpu_fused.linear(be, xl, wl2, bl), first) and taken == [(600, True)]
    assert cpu_matmul._blocked_bytes[0] == before + 4 * 25 * 384 * 16
    assert cpu_fused.linear_act(be, xl, wl2, bl, "gelu") is not None and taken[-1] == (600, True)
    # read once, each a fresh array: never copied
    held = cpu_matmul._blocked_bytes[0]
    for seed in range(3):
        be.matmul(x, rnd(384, 400, seed=20 + seed))
    assert cpu_matmul._blocked_bytes[0] == held
    # no budget: read as it lies, BLAS's where the rows are few
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", "0")
    other, taken[:] = rnd(384, 400, seed=30), []
    for rows in (128, 128, 4):
        be.matmul(rnd(rows, 384, seed=rows), other)
    assert taken == [(128, False), (128, False)]
    del w, wide, wl, wl2
    gc.collect()
    assert cpu_matmul._blocked_bytes[0] == live  # freed with their weights


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh"])
def test_an_activation_in_the_epilogue_gives_the_composed_bits(builds, act):
    """act(a b + bias) as the kernel stores it (the linear_act kernel natively) equals the product, then rows.c's
    bias_act (the composed path's activation natively), bit for bit, in every build with and without a blocked
    weight; the registry's linear_act kernel returns those bits too."""
    from ember.backends import cpu_dense
    from ember.backends.cpu_float_kernels import ACTS
    fk = cpu_dense.float_kernels()
    assert fk is not None, "no native kernels (a C compiler builds them)"
    a, b, bias = rnd(70, 300, seed=1), rnd(300, 100, seed=2) * 3, rnd(100, seed=3)
    a[0, :4] = [np.inf, -np.inf, np.nan, 0.0]  # (their outputs' activations too)
    for tag, kern in _gemm_builds(builds).items():
        plain = kern.sgemm(a, b, bias)
        want = fk.bias_act(plain, None, act)
        for wb in (None, blocked(b)):
            got = kern.sgemm(a, b, bias, wb, ACTS[act])
            assert np.array_equal(got, want, equal_nan=True), (tag, act)
        assert np.array_equal(kern.sgemm(a[:, :0], b[:0], bias, None, ACTS[act]), fk.bias_act(
            np.broadcast_to(bias, (70, 100)).copy(), None, act))  # (k = 0: act(bias))
    be = NB.NumpyBackend()
    x, w, bw = rnd(64, 300, seed=4), rnd(300, 200, seed=5).T, rnd(200, seed=6)  # (the weight as stored)
    y = cpu_fused.linear_act(be, x, w, bw, act)
    assert y is not None and np.array_equal(y, fk.bias_act(cpu_fused.linear(be, x, w, bw), None, act))


def test_memory_shared_with_the_caller_keeps_no_derived_copy(monkeypatch):
    """ember.from_numpy shares the caller's array, which the caller may write in place: products after such a
    write give the new values (no blocked copy kept from the old ones), for products of many rows and of one."""
    import ember
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))
    w = rnd(384, 400, seed=40)
    t = ember.from_numpy(w)
    for rows in (128, 1):
        x = rnd(rows, 384, seed=rows)
        for step in range(4):  # (a copy would be made at the second product and read from the third)
            w[...] = rnd(384, 400, seed=50 + step)
            _check((ember.tensor(x) @ t).numpy(), x, w)
    assert cpu_matmul.derived(w, "blocked") is None
