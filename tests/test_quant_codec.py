"""GGML quantize/dequantize parity.

References, computed in the test:
- gguf-py (`gguf.quants`): byte-exact quantize for the types it implements (Q4_0, Q4_1, Q5_0, Q5_1,
  Q8_0, BF16, F16), value-exact dequantize for those plus Q2_K..Q6_K.
- ggml-quants.c itself (llama.cpp as vendored in llama-cpp-python 0.3.36, compiled here with the system
  C compiler): byte-exact `quantize_row_*_ref` and `dequantize_row_*` for every type, including the
  K-quant quantizers gguf-py lacks. Skipped when no C compiler or no network/cache.

NaN/Inf: ember refuses to quantize non-finite values (ValueError); ggml would silently produce garbage
blocks. Signed zeros: ember follows ggml's C loops (an all-zero block whose first element is -0.0 gets
the scale +0.0 in Q4_0 etc.); gguf-py can differ there in the sign of the zero scale only.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from ember.ggml import codec
from ember.ggml import types as T
from expected_skips import missing

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as G  # noqa: E402
from gguf import quants as gq  # noqa: E402

LEGACY = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
KQUANTS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
ALL_QUANT = LEGACY + KQUANTS + ["Q8_K"]


def _cases(rng, width=512):
    """Random and adversarial rows; every row length is a multiple of 256 (K-quant super-block)."""
    normal = rng.standard_normal((6, width)).astype(np.float32)
    sparse = normal * (rng.random(normal.shape) < 0.05)  # mostly +-0.0 (negative * 0 = -0.0)
    return {
        "normal": normal,
        "uniform_pos": rng.random((4, width)).astype(np.float32),
        "heavy_tail": rng.standard_t(2, (4, width)).astype(np.float32),
        "zeros": np.zeros((2, width), np.float32),
        "neg_zeros": np.full((2, width), -0.0, np.float32),
        "constant": np.full((2, width), -3.25, np.float32),
        "sparse": sparse.astype(np.float32),
        "one_spike": np.where(np.arange(width) % 97 == 3, 50.0, 1e-3).astype(np.float32)[None].repeat(2, 0),
        "huge": (normal[:2] * 1e30).astype(np.float32),  # scales overflow float16 -> inf
        "tiny": (normal[:2] * 1e-30).astype(np.float32),  # scales underflow float16 -> 0
        "small_ints": rng.integers(-8, 8, (4, width)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def cases():
    return _cases(np.random.default_rng(1234))


# ----------------------------------------------------------------------------- gguf-py parity

@pytest.mark.parametrize("name", LEGACY + ["BF16", "F16"])
def test_quantize_bytes_match_gguf_py(name, cases):
    for case, x in cases.items():
        if case in ("neg_zeros", "sparse"):
            continue  # sign of a zero scale: see module docstring and test_signed_zero_blocks_follow_ggml
        ours = codec.quantize(x, name)
        with np.errstate(all="ignore"):
            ref = gq.quantize(x, G[name]).view(np.uint8).reshape(ours.shape)
        assert np.array_equal(ours, ref), f"{name} {case}: {np.count_nonzero(ours != ref)} bytes differ"


@pytest.mark.parametrize("name", LEGACY + KQUANTS + ["BF16", "F16"])
def test_dequantize_matches_gguf_py(name, cases, rng):
    t = T.get(name)
    # arbitrary bytes exercise every bit pattern, not just the ones our quantizer emits; scales are
    # overwritten with finite float16 so the comparison is not NaN vs NaN
    raw = rng.integers(0, 256, (8, 512 // t.block_size * t.type_size), dtype=np.uint8)
    if name not in ("F16", "BF16"):
        raw = codec.quantize(cases["normal"][:2].repeat(4, 0), name)
        raw = np.where(rng.random(raw.shape) < 0.3, rng.integers(0, 256, raw.shape, dtype=np.uint8), raw)
    with np.errstate(all="ignore"):
        ours = codec.dequantize(raw, name, (8, 512))
        ref = gq.dequantize(raw, G[name]).reshape(8, 512)
    assert np.array_equal(ours, ref, equal_nan=True)


def test_signed_zero_blocks_follow_ggml():
    # ggml's loop never updates max = 0.0f on a block of -0.0, so d = +0.0 / -8 = -0.0 (float16 0x8000);
    # gguf-py picks the first element (-0.0) and gets +0.0. Both dequantize to zeros.
    x = np.full((1, 32), -0.0, np.float32)
    raw = codec.quantize(x, "Q4_0")
    assert raw[0, :2].tobytes() == np.float16(-0.0).tobytes()
    assert np.array_equal(codec.dequantize(raw, "Q4_0", x.shape), np.zeros_like(x))


# ----------------------------------------------------------------------------- ggml C reference

LLAMA_CPP_PY = "0.3.36"


def _ggml_reference_lib():
    """Compile ggml-quants.c (from the llama-cpp-python sdist, cached under ~/.cache/ember) into a .so."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        missing("no C compiler to build the ggml-quants.c reference")
    from ember import hub
    cache = hub.cache_dir("llama-cpp")
    lib = cache / f"libggml_quants_ref-{LLAMA_CPP_PY}.so"
    if lib.exists():
        return ctypes.CDLL(str(lib))
    cache.mkdir(parents=True, exist_ok=True)
    try:
        sdist = hub.fetch_pypi("llama-cpp-python", LLAMA_CPP_PY, sdist=True, timeout=600)
    except hub.HubError:
        missing("cannot download the llama-cpp-python sdist for the ggml C reference")
    root = f"llama_cpp_python-{LLAMA_CPP_PY}/vendor/llama.cpp/ggml"
    src = cache / "ggml-src"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.startswith(root)
                   and (m.name.endswith(".h") or m.name.endswith("ggml-quants.c"))]
        for m in members:
            m.name = m.name[len(root) + 1:]
        tf.extractall(src, members=members, filter="data")
    stubs = src / "stubs.c"  # ggml-quants.c references a few ggml.c helpers it never calls on these paths
    stubs.write_text("#include <stdlib.h>\n#include <stddef.h>\n"
                     "void ggml_abort(const char *f, int l, const char *fmt, ...) { abort(); }\n"
                     "size_t ggml_row_size(int t, long long n) { abort(); }\n"
                     "const char *ggml_type_name(int t) { return \"?\"; }\n"
                     "size_t ggml_type_size(int t) { abort(); }\n")
    # -DNDEBUG: nearest_int() asserts |x| < 2^22, which the huge-value cases exceed by design
    r = subprocess.run([cc, "-O2", "-DNDEBUG", "-shared", "-fPIC", f"-I{src}/include", f"-I{src}/src",
                        str(src / "src" / "ggml-quants.c"), str(stubs), "-lm", "-o", str(lib)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        missing(f"cannot compile ggml-quants.c: {r.stderr[-500:]}")
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module")
def cref():
    lib = _ggml_reference_lib()

    def fn(kind, name):
        suffix = name.lower().replace("_k", "_K")
        return getattr(lib, f"quantize_row_{suffix}_ref" if kind == "q" else f"dequantize_row_{suffix}")

    def quantize(x, name):
        t = T.get(name)
        x = np.ascontiguousarray(x, np.float32)
        out = np.zeros((x.shape[0], x.shape[1] // t.block_size * t.type_size), np.uint8)
        fn("q", name)(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
        return out

    def dequantize(raw, name, shape):
        out = np.zeros(shape, np.float32)
        raw = np.ascontiguousarray(raw)
        fn("d", name)(raw.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(out.size))
        return out

    return quantize, dequantize


@pytest.mark.parametrize("name", ALL_QUANT)
def test_quantize_bytes_match_ggml_c(name, cases, cref):
    c_quantize, c_dequantize = cref
    for case, x in cases.items():
        ours = codec.quantize(x, name)
        ref = c_quantize(x, name)
        assert np.array_equal(ours, ref), f"{name} {case}: {np.count_nonzero((ours != ref).any(-1))} rows differ"
        with np.errstate(all="ignore"):
            got = codec.dequantize(ref, name, x.shape)
        assert np.array_equal(got, c_dequantize(ref, name, x.shape), equal_nan=True), f"{name} {case} dequantize"


@pytest.mark.slow
@pytest.mark.parametrize("name", KQUANTS + ["Q8_K"])
def test_kquants_match_ggml_c_many_blocks(name, cref):
    """A larger random sweep (2048 super-blocks of mixed scales) for the searches' tie-breaking."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 8192)) * np.exp(rng.uniform(-6, 6, (64, 1)))).astype(np.float32)
    assert np.array_equal(codec.quantize(x, name), cref[0](x, name))


# ----------------------------------------------------------------------------- errors and round trips

@pytest.mark.parametrize("name", ALL_QUANT)
def test_roundtrip_error_is_small(name, rng):
    # a sanity bound on quantization noise (relative RMS), loose enough for every data draw
    bound = {"Q2_K": 0.45, "Q3_K": 0.25, "Q4_0": 0.15, "Q4_1": 0.15, "Q4_K": 0.1, "Q5_0": 0.07, "Q5_1": 0.07,
             "Q5_K": 0.05, "Q6_K": 0.025, "Q8_0": 0.01, "Q8_K": 0.01}[name]
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    y = codec.dequantize(codec.quantize(x, name), name, x.shape)
    assert np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)) < bound


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_refused(bad):
    x = np.ones((2, 256), np.float32)
    x[1, 7] = bad
    for name in ("Q4_0", "Q4_K"):
        with pytest.raises(ValueError, match=f"ember: cannot quantize w of shape \\(2, 256\\) to {name}: it holds NaN"):
            codec.quantize(x, name, name="w")


def test_bad_shapes_and_types_are_refused():
    with pytest.raises(ValueError, match="row length 100 is not a multiple of the Q4_0 block size 32"):
        codec.quantize(np.zeros((2, 100), np.float32), "q4_0")
    with pytest.raises(ValueError, match="multiple of the Q4_K block size 256"):
        codec.quantize(np.zeros((2, 128), np.float32), "Q4_K")
    with pytest.raises(ValueError, match="unknown GGML type 'q9_9'"):
        codec.quantize(np.zeros(32, np.float32), "q9_9")
    with pytest.raises(NotImplementedError, match="quantizing to IQ2_XXS is not implemented"):
        codec.quantize(np.zeros(256, np.float32), "IQ2_XXS")
    with pytest.raises(TypeError, match="dtype int32"):
        codec.quantize(np.zeros(32, np.int32), "Q8_0")
    with pytest.raises(ValueError, match="17 bytes of Q4_0 data for shape \\(32,\\), expected 18"):
        codec.dequantize(np.zeros(17, np.uint8), "Q4_0", (32,))


def test_type_table_matches_gguf_py():
    from gguf.constants import GGML_QUANT_SIZES
    for qt, (block, size) in GGML_QUANT_SIZES.items():
        t = T.BY_ID.get(int(qt))
        if t is not None and qt.name != "Q8_1":  # gguf-py says 40 bytes; ggml's sizeof(block_q8_1) is 36
            assert (t.name, t.block_size, t.type_size) == (qt.name, block, size)
    assert {t.name for t in T.BY_ID.values()} - {q.name for q in GGML_QUANT_SIZES} == set()
