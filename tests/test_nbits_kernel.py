"""The CPU's kernel for onnxruntime's MatMulNBits layout (core/backends/cpu_kernels/nbits.c via ember.backends.cpu_nbits):
every build (AVX2 or this machine's SIMD, plain C) gives the same bits, and so does the page's wasm build (Pyodide);
those bits are the float64 product of the dequantized weight within float32 summation error; rows past what the
compiled kernel takes go through the levels + BLAS slabs, within the same error. A 4-bit weight's copy as units of
four rows (one stream a unit, natively from its second product) gives the same bits in every build."""
from __future__ import annotations

import base64

import numpy as np
import pytest
from native_builds import build_variants, by_simd
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401  (fixtures)

from ember.ggml.nbits import dequantize

CASES = [(4, 32, 96, "float"), (4, 128, 256, "int"), (4, 32, 80, "int"), (8, 16, 48, "int"), (2, 64, 128, "float")]


def _weight(bits, block, k, zeros, n=37, seed=0):
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    packed = rng.integers(0, 256, (n, blocks * block * bits // 8)).astype(np.uint8)
    scales = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    z = rng.random((n, blocks)) * (1 << bits)
    return packed, scales, (np.round(z) if zeros == "int" else z).astype(np.float32)


def _x(m, k, blocks, block, seed=1):
    x = np.zeros((m, blocks * block), np.float32)  # zeros past K, as cpu_nbits pads them
    x[:, :k] = np.random.default_rng(seed).standard_normal((m, k))
    return x


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    out = by_simd(build_variants(tmp_path_factory, ("native", "scalar")))
    assert "scalar" in out
    return out


@pytest.mark.parametrize("bits,block,k,zeros", CASES)
def test_every_build_gives_the_same_bits_and_the_product(builds, bits, block, k, zeros):
    packed, scales, z = _weight(bits, block, k, zeros)
    w = dequantize(packed, scales, z, bits, block, (packed.shape[0], k)).astype(np.float64)
    for m in (1, 3, 8):
        x = _x(m, k, scales.shape[1], block, seed=m)
        exact = x[:, :k].astype(np.float64) @ w.T
        bound = 1e-5 * (np.abs(x[:, :k]) @ np.abs(w).T) + 1e-6
        got = {simd: kn.nbits_matmul(x, packed, scales, z, bits, block, packed.shape[0]) for simd, kn in builds.items()}
        first = next(iter(got.values()))
        for simd, y in got.items():
            assert np.array_equal(y, first), (simd, bits, block, m)
        assert np.all(np.abs(first - exact) <= bound), (bits, block, m)


def test_the_registry_kernel_takes_decode_rows_and_slabs_beyond(rng):
    """ember.backends.cpu_nbits: up to 8 rows through nbits.c (K padded to whole blocks), more through the slabs;
    both within float32 summation error of the float64 product."""
    import ember
    from ember.ops_blockwise import BlockWeight
    packed, scales, z = _weight(4, 32, 80, "float", n=29)
    bw = BlockWeight(packed, scales, z, 4, 32, (29, 80))
    w = bw.numpy().astype(np.float64)
    for rows in (1, 5, 20):
        x = rng.standard_normal((rows, 80)).astype(np.float32)
        got = bw.matmul_t(ember.tensor(x)).numpy()
        np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_nbits_in_pyodide(pyodide_session):  # noqa: F811
    """The page's wasm build of nbits.c: the same bits as the native one."""
    from ember.backends.cpu_matmul import native_kernels
    kn = native_kernels()
    if kn is None:
        pytest.skip("no native kernels to compare with")
    enc = lambda a: base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()  # noqa: E731
    code = ("import base64, numpy as np\nfrom ember.backends import cpu_matmul\nk = cpu_matmul.wasm_kernels()\n"
            "assert k is not None, cpu_matmul.matmul_path()\nresult = {}\n"
            "dec = lambda s, t, shape: np.frombuffer(base64.b64decode(s), t).reshape(shape).copy()\n")
    want = {}
    for i, (bits, block, k, zeros) in enumerate(CASES):
        packed, scales, z = _weight(bits, block, k, zeros, seed=i)
        x = _x(3, k, scales.shape[1], block, seed=i)
        want[i] = kn.nbits_matmul(x, packed, scales, z, bits, block, packed.shape[0])
        code += (f"y = k.nbits_matmul(dec({enc(x)!r}, np.float32, {x.shape}), dec({enc(packed)!r}, np.uint8, "
                 f"{packed.shape}), dec({enc(scales)!r}, np.float32, {scales.shape}), dec({enc(z)!r}, np.float32, "
                 f"{z.shape}), {bits}, {block}, {packed.shape[0]})\n"
                 f"result[{i}] = base64.b64encode(y.tobytes()).decode()\n")
    out = pyodide_session.run(code, timeout=300)["result"]
    for i, y in want.items():
        got = np.frombuffer(base64.b64decode(out[str(i)] if str(i) in out else out[i]), np.float32).reshape(y.shape)
        assert np.array_equal(got, y), CASES[i]


def test_rows_split_between_threads_give_the_same_bits():
    """A weight past the threads' threshold (a decode step's LM head is 50k rows) is cut into units of four rows
    between the kernels' threads; each row is summed alike whichever thread takes it."""
    from ember.backends.cpu_matmul import native_kernels
    nk = native_kernels()
    if nk is None:
        pytest.skip("the native kernels run the threads")
    packed, scales, z = _weight(4, 32, 768, "int", n=1003)  # (a last unit of three rows)
    x = _x(2, 768, scales.shape[1], 32)
    before = nk.threads
    try:
        nk.set_threads(1)
        one = nk.nbits_matmul(x, packed, scales, z, 4, 32, 1003)
        for n in (2, 3):
            nk.set_threads(n)
            assert np.array_equal(nk.nbits_matmul(x, packed, scales, z, 4, 32, 1003), one), n
    finally:
        nk.set_threads(before)
    w = dequantize(packed, scales, z, 4, 32, (1003, 768)).astype(np.float64)
    exact = x.astype(np.float64) @ w.T
    assert np.all(np.abs(one - exact) <= 1e-5 * (np.abs(x) @ np.abs(w).T) + 1e-6)


@pytest.mark.parametrize("bits,block,k,zeros", [c for c in CASES if c[0] == 4])
def test_units_of_four_rows_give_the_same_bits(builds, bits, block, k, zeros):
    """nbits.c's units layout (cpu_nbits.units_of: four rows' bytes, scales and scale * zero products a block, the
    rows padded to whole units) against the MatMulNBits layout: the same bits in every build, on any thread count,
    for row counts that end inside a unit."""
    from ember.backends import cpu_nbits
    for n in (37, 4, 1):
        packed, scales, z = _weight(bits, block, k, zeros, n=n)
        units = cpu_nbits._make_units(packed, scales, z, block)
        for m in (1, 8):
            x = _x(m, k, scales.shape[1], block, seed=m)
            for simd, kn in builds.items():
                want = kn.nbits_matmul(x, packed, scales, z, bits, block, n)
                for t in (1, 3):
                    kn.set_threads(t)
                    assert np.array_equal(kn.nbits_matmul_units(x, units, scales.shape[1], block, n), want), (simd, n, t)
                kn.set_threads(2)


def test_a_weight_read_again_is_read_as_units_within_the_budget(monkeypatch):
    """The registry kernel reads a 4-bit weight's units copy from its second decode product on (made once, counted
    against EMBER_BLOCKED_WEIGHT_BYTES while it lives); with no budget left, the MatMulNBits layout as it lies."""
    import gc

    from ember.backends import cpu_matmul, cpu_nbits
    nk = cpu_matmul.native_kernels()
    if nk is None:
        pytest.skip("the native kernels read the units")
    read = []
    for name in ("nbits_matmul", "nbits_matmul_units"):
        monkeypatch.setattr(nk, name, lambda *a, _f=getattr(nk, name), _n=name: read.append(_n) or _f(*a))
    gc.collect()
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))  # (whatever earlier tests' copies hold)
    live = cpu_matmul._blocked_bytes[0]
    packed, scales, z = _weight(4, 32, 96, "int", n=37)
    x = _x(2, 96, scales.shape[1], 32)
    ys = [cpu_nbits.nbits_matmul(None, x[:, :96], packed, scales, z, 4, 32, (37, 96)) for _ in range(3)]
    assert read == ["nbits_matmul", "nbits_matmul_units", "nbits_matmul_units"]
    assert all(np.array_equal(y, ys[0]) for y in ys)
    assert cpu_matmul._blocked_bytes[0] == live + nk.nbits_units_bytes(37, 3, 32)  # one copy: 10 units of 3 blocks
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", "0")
    other, read[:] = packed.copy(), []
    for _ in range(2):
        assert np.array_equal(cpu_nbits.nbits_matmul(None, x[:, :96], other, scales, z, 4, 32, (37, 96)), ys[0])
    assert read == ["nbits_matmul"] * 2
    del packed
    gc.collect()
    assert cpu_matmul._blocked_bytes[0] == live  # freed with its weight
