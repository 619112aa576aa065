"""llama.cpp's quantized matmul with 8-bit activations (core/backends/cpu_kernels/q8dot.c, ember.backends.cpu_q8dot).

References computed here: llama.cpp's own CPU kernels, called in its libggml-cpu (llama-cpp-python's build): its
activation quantizers (quantize_row_q8_0 / q8_1 / q8_K) byte for byte, and its dot products (ggml_vec_dot_*)
within float32 summation order. Then every build of the kernels (AVX2, SSSE3, plain C, worker threads or not) and
the numpy version give the same bits, and so does the page's wasm build (Pyodide, test_q8dot_in_pyodide)."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ember.backends import cpu_native_kernels as cnk
from ember.backends import cpu_q8dot as q8dot
from ember.ggml import codec
from ember.quant import QTensor
from ember.ggml import types as T
from native_builds import build_variants, by_simd
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401

TYPES = list(q8dot.ACTIVATIONS)  # Q4_0 Q5_0 Q8_0 Q4_1 Q5_1 Q4_K Q5_K Q6_K
ACT_BYTES = {"Q8_0": 34, "Q8_1": 36, "Q8_K": 4 + 256 + 32}


# ------------------------------------------------------------------------------------------ llama.cpp itself

@pytest.fixture(scope="module")
def ggml():
    llama_cpp = pytest.importorskip("llama_cpp")
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))
    lib.ggml_cpu_init()
    return lib


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


def _llama_act(ggml, x, kind):
    """llama.cpp's activation blocks of the rows of x: (m, bytes) uint8."""
    m, k = x.shape
    block = 256 if kind == "Q8_K" else 32
    out = np.zeros((m, k // block * ACT_BYTES[kind]), np.uint8)
    for r in range(m):
        getattr(ggml, f"quantize_row_{kind.lower().replace('k', 'K')}")(_p(np.ascontiguousarray(x[r])), _p(out[r]), k)
    return out


def _llama_matmul(ggml, x, raw, name):
    kind = q8dot.ACTIVATIONS[name]
    act = _llama_act(ggml, x, kind)
    fn = getattr(ggml, f"ggml_vec_dot_{name.lower().replace('_k', '_K')}_{kind.lower().replace('k', 'K')}")
    y = np.zeros((x.shape[0], raw.shape[0]), np.float32)
    s = np.zeros(1, np.float32)
    for r in range(x.shape[0]):
        for o in range(raw.shape[0]):
            fn(x.shape[1], _p(s), 0, _p(raw[o]), 0, _p(act[r]), 0, 1)
            y[r, o] = s[0]
    return y


def _inputs(name, rows=21, m=3, blocks=13, seed=0):
    """Weights a quantizer wrote and activations with the edge cases of the activation quantizers: a zero block,
    a block whose largest |x| is negative, repeated maxima, values on rounding ties of the 8-bit scale."""
    rng = np.random.default_rng(seed)
    k = blocks * T.get(name).block_size
    raw = codec.quantize(rng.standard_normal((rows, k)).astype(np.float32), name)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[0, :256] = 0.0                                   # a zero block (every kind of activation block)
    x[-1, 5] = -50.0                                   # the block's largest |x| is negative
    x[-1, 300:302] = 40.0                              # two equal maxima
    if k >= 544:  # x * 127 / amax on a half (+-63.5: round half to even)
        x[-1, 512:544] = np.arange(-16, 16, dtype=np.float32) * np.float32(127 / 16)
    return raw, x


@pytest.mark.parametrize("name", TYPES)
def test_activations_equal_llamacpps_bytes(ggml, name):
    kind = q8dot.ACTIVATIONS[name]
    _, x = _inputs(name, m=4)
    q, d, extra = q8dot.quantize_activations(x, name)
    ref = _llama_act(ggml, x, kind)
    m, k = x.shape
    if kind == "Q8_K":
        blocks = ref.reshape(m, -1, ACT_BYTES[kind])
        assert np.array_equal(q.reshape(m, -1, 256), blocks[:, :, 4:260].view(np.int8))
        assert np.array_equal(d, blocks[:, :, :4].copy().view(np.float32)[..., 0])
        assert np.array_equal(extra.reshape(m, -1, 16), blocks[:, :, 260:].copy().view(np.int16))
    else:
        blocks = ref.reshape(m, -1, ACT_BYTES[kind])
        assert np.array_equal(q.reshape(m, -1, 32), blocks[:, :, -32:].view(np.int8))
        assert np.array_equal(d, blocks[:, :, :2].copy().view(np.float16)[..., 0].astype(np.float32))
        if kind == "Q8_1":
            assert np.array_equal(extra, blocks[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float32))


@pytest.mark.parametrize("name", TYPES)
def test_products_equal_llamacpps_vec_dot(ggml, name):
    raw, x = _inputs(name)
    got = q8dot.q8_matmul(x, raw, name, (raw.shape[0], x.shape[1]))
    ref = _llama_matmul(ggml, x, raw, name)
    # the same integer sums, the float steps in another order: a few float32 roundings of the terms' magnitudes
    w = codec.dequantize(raw, name, (raw.shape[0], x.shape[1]))
    scale = np.abs(x) @ np.abs(w).T
    assert np.all(np.abs(got - ref) <= 1e-6 * scale + 1e-30), np.abs(got - ref).max()


def test_q8_differs_from_float_by_the_activations_rounding(rng):
    """x rounded to 8 bits per block: |error| <= sum |w| (d / 2 + |d - f16(d)| 127), d = amax / 127 per block
    (the f16 rounding of the scale moves a level by at most 127 * 2^-11 of d); and it is not zero."""
    for name in TYPES:
        raw, x = _inputs(name, seed=1)
        shape = (raw.shape[0], x.shape[1])
        w = codec.dequantize(raw, name, shape)
        got = q8dot.q8_matmul(x, raw, name, shape)
        exact = x.astype(np.float64) @ w.astype(np.float64).T
        block = T.get(name).block_size if q8dot.ACTIVATIONS[name] == "Q8_K" else 32
        amax = np.abs(x.reshape(x.shape[0], -1, block)).max(-1)                        # (m, blocks)
        per = np.repeat(amax / 127 * (0.5 + 127 / 2048 + 1e-3), block, axis=1)       # (m, k)
        bound = (per @ np.abs(w).T) + 1e-5 * (np.abs(x) @ np.abs(w).T)
        err = np.abs(got - exact)
        assert np.all(err <= bound), (name, (err / bound).max())
        assert err.max() > 1e-4 * np.abs(exact).max(), name  # activations really were rounded


# ------------------------------------------------------------------------------------------ one answer everywhere

@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{simd: NativeKernels} for each vector path this machine builds: its -march=native one, AVX2 without VNNI
    (where the native one has it), SSSE3, plain C."""
    out = by_simd(build_variants(tmp_path_factory))
    assert "scalar" in out
    return out


@pytest.mark.parametrize("name", TYPES)
def test_every_build_and_numpy_give_the_same_bits(builds, name):
    # rows of x: 1, 4 (one group), 7 (a group and 3); block counts with and without a last group of 8
    for m, blocks in ((1, 13), (4, 16), (7, 3)):
        raw, x = _inputs(name, rows=37, m=m, blocks=blocks, seed=m)
        want = q8dot.q8_matmul_numpy(x, raw, name, raw.shape[0])
        for simd, k in builds.items():
            for threads in (1, 2):
                k.set_threads(threads)
                got = k.q8_matmul(x, raw, T.get(name).id, raw.shape[0])
                assert np.array_equal(got, want), (name, simd, threads, m, blocks)


def _q5_0_as_bytes(raw):
    """Q5_0 rows (GGML's blocks: f16 d | 5th bits, bit j for level j | nibbles, levels j and j + 16 in byte j) with
    each block's 32 levels (nibble | 5th bit << 4) as bytes after d: q8dot.c's Q5_0B layout, 34 bytes a block."""
    b = raw.reshape(-1, 22)
    qh = b[:, 2:6].copy().view("<u4")[:, 0]
    nibbles = np.concatenate([b[:, 6:] & 0xF, b[:, 6:] >> 4], axis=1)
    q = nibbles | (((qh[:, None] >> np.arange(32)) & 1) << 4).astype(np.uint8)
    return np.concatenate([b[:, :2], q], axis=1).reshape(raw.shape[0], -1)


def test_q5_0_as_bytes_gives_q5_0s_bits(builds):
    """The page's pool expands Q5_0 blocks in place (ember_q8_expand) and multiplies the bytes layout: the Q5_0
    product's bits on every build, and SharedRows give GGML's blocks back."""
    from ember.backends.cpu_pool import BYTES_LAYOUT, _q5_0_blocks
    kind = BYTES_LAYOUT[T.get("Q5_0").id][0]
    for m, blocks in ((1, 13), (4, 16), (7, 3)):
        raw, x = _inputs("Q5_0", rows=37, m=m, blocks=blocks, seed=m)
        raw[0, 2:6] = 0xFF  # every 5th bit set in one block, none in another
        raw[1, 2:6] = 0
        want = q8dot.q8_matmul_numpy(x, raw, "Q5_0", raw.shape[0])
        expanded = _q5_0_as_bytes(raw)
        assert np.array_equal(_q5_0_blocks(expanded), raw)
        for simd, k in builds.items():
            k._lib.ember_q8_expand.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
            buf = np.zeros(expanded.size, np.uint8)
            buf[:raw.size] = raw.reshape(-1)
            assert k._lib.ember_q8_expand(T.get("Q5_0").id, raw.size // 22, buf.ctypes.data, buf.ctypes.data) == 0
            assert np.array_equal(buf.reshape(expanded.shape), expanded), simd  # in place, from the last block back
            for threads in (1, 2):
                k.set_threads(threads)
                assert np.array_equal(k.q8_matmul(x, expanded, kind, raw.shape[0]), want), (simd, threads, m)


def test_threads_split_large_products_without_changing_bits(builds):
    k = builds[next(iter(builds))]
    raw, x = _inputs("Q8_0", rows=4099, m=2, blocks=20)
    k.set_threads(1)
    one = k.q8_matmul(x, raw, 8, raw.shape[0])
    assert k.set_threads(3) == 3
    assert raw.shape[0] * x.size >= cnk.PARALLEL_MACS  # the parallel path
    assert np.array_equal(k.q8_matmul(x, raw, 8, raw.shape[0]), one)


def test_qtensor_and_qlinear_use_q8_when_asked(rng):
    import ember
    from ember.quant import QLinear, set_activations
    w = rng.standard_normal((48, 512)).astype(np.float32)
    q = QTensor.quantize(w, "q4_k")
    assert q.activations == "float32"
    x = rng.standard_normal((2, 512)).astype(np.float32)
    exact = q.matmul_t(x)
    q.activations = "q8"
    assert np.array_equal(q.matmul_t(x), q8dot.q8_matmul_numpy(x, q.data, "Q4_K", 48))
    assert not np.array_equal(q.matmul_t(x), exact)
    layer = ember.nn.Sequential(QLinear(QTensor.quantize(w, "q8_0")), ember.nn.Linear(48, 4))
    assert set_activations(layer, "q8") == 1 and layer[0].weight.activations == "q8"
    y = layer[0](ember.tensor(x)).numpy()
    assert np.array_equal(y, q8dot.q8_matmul_numpy(x, layer[0].weight.data, "Q8_0", 48))
    assert set_activations(layer, "float32") == 1
    with pytest.raises(ValueError, match="activations must be 'float32' or 'q8'"):
        q.activations = "int4"
    with pytest.raises(ValueError, match="not Q3_K"):
        QTensor.quantize(w, "q3_k").activations = "q8"
    assert set_activations(ember.nn.Sequential(QLinear(QTensor.quantize(w, "q3_k"))), "q8") == 0  # stays float32


# ------------------------------------------------------------------------------------------ building and loading

def _python(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_without_kernels_numpy_gives_the_same_bits(tmp_path):
    raw, x = _inputs("Q5_0")
    np.save(tmp_path / "raw.npy", raw)
    np.save(tmp_path / "x.npy", x)
    code = f"""
        import numpy as np
        from ember.backends import cpu_matmul
        from ember.backends import cpu_q8dot as q8dot
        raw, x = np.load({str(tmp_path / 'raw.npy')!r}), np.load({str(tmp_path / 'x.npy')!r})
        assert cpu_matmul.native_kernels() is None
        print(cpu_matmul.native_kernels_status())
        np.save({str(tmp_path / 'y.npy')!r}, q8dot.q8_matmul(x, raw, "Q5_0", (raw.shape[0], x.shape[1])))
    """
    want = q8dot.q8_matmul(x, raw, "Q5_0", (raw.shape[0], x.shape[1]))
    for env, why in (({"EMBER_NATIVE_KERNELS": "0"}, "switched off by EMBER_NATIVE_KERNELS=0"),
                     ({"CC": "false", "EMBER_CACHE": str(tmp_path / "cache")}, "kernel build or load failed"),
                     ({"CC": "", "PATH": str(tmp_path), "EMBER_CACHE": str(tmp_path / "cache")}, "no C compiler")):
        r = _python(code, **env)
        assert r.returncode == 0, r.stderr
        assert why in r.stdout, r.stdout
        assert np.array_equal(np.load(tmp_path / "y.npy"), want)


def test_the_library_is_built_once_into_the_cache(tmp_path):
    code = """
        from ember.backends import cpu_matmul
        k = cpu_matmul.native_kernels()
        print(k.path)
    """
    first = _python(code, EMBER_CACHE=str(tmp_path))
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip())
    assert path.parent == tmp_path / "kernels" and path.is_file()
    mtime = path.stat().st_mtime_ns
    again = _python(code, EMBER_CACHE=str(tmp_path))
    assert again.stdout.strip() == str(path) and path.stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_multiplies_in_parallel(builds):
    k = builds[next(iter(builds))]
    k.set_threads(2)
    raw, x = _inputs("Q8_0", rows=4099, m=2, blocks=20)
    want = k.q8_matmul(x, raw, 8, raw.shape[0])  # the workers run
    pid = os.fork()
    if pid == 0:  # the child has no workers: threads.c starts none, the caller computes every chunk
        ok = np.array_equal(k.q8_matmul(x, raw, 8, raw.shape[0]), want)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_q8dot_in_pyodide(pyodide_session):
    """The page's wasm build: the same bits as the native one, for every type."""
    import base64
    cases = {name: _inputs(name, rows=19, m=5, blocks=9, seed=7) for name in TYPES}
    enc = lambda a: base64.b64encode(a.tobytes()).decode()  # noqa: E731
    code = "import base64, numpy as np\nfrom ember.backends import cpu_q8dot as q8dot\nfrom ember.backends import cpu_matmul\n" \
           "assert cpu_matmul.wasm_kernels() is not None, cpu_matmul.matmul_path()\nresult = {}\n"
    for name, (raw, x) in cases.items():
        code += (f"raw = np.frombuffer(base64.b64decode({enc(raw)!r}), np.uint8).reshape({raw.shape})\n"
                 f"x = np.frombuffer(base64.b64decode({enc(x)!r}), np.float32).reshape({x.shape})\n"
                 f"result[{name!r}] = base64.b64encode(q8dot.q8_matmul(x, raw, {name!r}, {(raw.shape[0], x.shape[1])})"
                 f".tobytes()).decode()\n")
    out = pyodide_session.run(code, timeout=300)["result"]
    for name, (raw, x) in cases.items():
        got = np.frombuffer(base64.b64decode(out[name]), np.float32).reshape(x.shape[0], raw.shape[0])
        assert np.array_equal(got, q8dot.q8_matmul(x, raw, name, (raw.shape[0], x.shape[1]))), name
