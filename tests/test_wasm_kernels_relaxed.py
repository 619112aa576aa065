"""The relaxed-SIMD kernel module (cpu_wasm_kernels_relaxed.wasm) in Pyodide under Node 20 with
--experimental-wasm-relaxed-simd (Chromium ships relaxed SIMD, Node 20 only behind that flag): chosen when
WebAssembly validates the relaxed probe and its byte dot products pass a known-answer product, the plain module
with a reason when either fails (Node 20's V8 11 miscomputes a relaxed dot whose weight register feeds several
rows; Chromium 156 does not), and its kernels against float64 numpy computed in the same run.

Tolerance: relaxed_madd may fuse each multiply-add (one rounding instead of two, engine's choice), which
changes the bits but not the error bound of a blocked float32 sum, so the plain GEMM's bound applies:
1e-6 sqrt(K) of sum_k |a_ik b_kj| (test_wasm_kernels.py). The other kernel families do not use relaxed
instructions: their outputs equal the plain module's bit for bit.
"""
import numpy as np
import pytest

from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401
from test_wasm_kernels import CHECK, PLAIN, SHAPES

RELAXED = "wasm-simd128+relaxed"


@pytest.fixture(scope="module")
def relaxed_session(pyodide_dist):
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    with PyodideSession(dist=pyodide_dist, node_args=["--experimental-wasm-relaxed-simd"]) as session:
        yield session


def _run(session, body):
    return session.run(CHECK + body, timeout=300)["result"]


def test_relaxed_gemm_matches_float64_numpy(relaxed_session):
    got = _run(relaxed_session, f'''
import ctypes
from ember.backends import cpu_wasm_kernels as W
rng = np.random.default_rng(11)
k = W.WasmKernels(ctypes.CDLL(str(W.RELAXED_MODULE)))  # the relaxed module itself, whatever load() chose
result = {{"gemm": []}}
for layout in ("nn", "nt"):  # "nt": B the transpose of a C-contiguous array (linear's x @ w.T)
    for m, kk, n in {SHAPES}:
        a = rng.standard_normal((m, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        if layout == "nt":
            b = np.ascontiguousarray(b.T).T
        y = k.matmul(a, b)
        result["gemm"].append([[m, kk, n], list(y.shape), str(y.dtype), *rel_err(y, a, b)])
a, b = rng.standard_normal((6, 9, 33)).astype(np.float32), rng.standard_normal((6, 33, 10)).astype(np.float32)
result["batched"] = rel_err(k.matmul(a, b), a, b)[0]
''')
    for shape, y_shape, dtype, err, ref_shape in got["gemm"]:
        assert y_shape == ref_shape and dtype == "float32", shape
        assert err < 1e-6 * np.sqrt(shape[1]) + 1e-6, (shape, err)
    assert got["batched"] < 1e-5


def test_relaxed_module_keeps_the_other_kernels_bit_for_bit(relaxed_session):
    got = _run(relaxed_session, '''
import ctypes
from ember.backends import cpu_wasm_kernels as W
from ember.ggml import types as ggml_types
from ember.ggml.codec import quantize
plain, relaxed = (W.WasmKernels(ctypes.CDLL(str(p))) for p in (W.MODULE, W.RELAXED_MODULE))
rng = np.random.default_rng(12)
x = (rng.standard_normal((37, 256)) * 4).astype(np.float32)
w = rng.standard_normal((45, 256)).astype(np.float32)
result = {}
for name in ("silu", "gelu"):
    result[name] = getattr(plain, name)(x).tobytes() == getattr(relaxed, name)(x).tobytes()
result["exp_rowmax"] = plain.exp_rowmax(x.copy()).tobytes() == relaxed.exp_rowmax(x.copy()).tobytes()
for qtype in ("q8_0", "q4_k"):
    t = ggml_types.get(qtype)
    raw = quantize(w, t)
    result[qtype] = (plain.qmatmul(x, raw, t.id, 45).tobytes() == relaxed.qmatmul(x, raw, t.id, 45).tobytes()
                     and plain.qdequant(raw, t.id, 256).tobytes() == relaxed.qdequant(raw, t.id, 256).tobytes())
''')
    assert got == {"silu": True, "gelu": True, "exp_rowmax": True, "q8_0": True, "q4_k": True}


def test_a_browser_without_relaxed_simd_gets_the_plain_module_with_the_reason(relaxed_session):
    got = _run(relaxed_session, '''
from ember.backends import cpu_wasm_kernels as W
import js
from pyodide.ffi import to_js
result = {"probe_validates": bool(js.WebAssembly.validate(to_js(W._RELAXED_PROBE)))}
real = W._validates
W._validates = lambda probe: False if probe is W._RELAXED_PROBE else real(probe)
try:
    result["path"] = cpu_matmul.use_wasm_kernels()
    a, b = np.ones((64, 300), np.float32), np.ones((300, 70), np.float32)
    result["mm"] = float(np.abs(cpu_matmul.mm(a, b) - 300).max())
finally:
    W._validates = real
    result["restored"] = cpu_matmul.use_wasm_kernels()
''')
    assert got["probe_validates"] and got["path"] == PLAIN and got["mm"] == 0.0
    assert got["restored"] == RELAXED or "miscompute on this engine" in got["restored"]


def test_relaxed_module_is_used_only_where_its_byte_dots_are_right(relaxed_session):
    got = _run(relaxed_session, '''
import ctypes
from ember.backends import cpu_wasm_kernels as W
relaxed, plain = (W.WasmKernels(ctypes.CDLL(str(p))) for p in (W.RELAXED_MODULE, W.MODULE))
result = {"relaxed_right": relaxed.q8_known_answer(), "plain_right": plain.q8_known_answer(),
          "path": cpu_matmul.use_wasm_kernels()}
''')
    assert got["plain_right"]
    assert (got["path"] == RELAXED) == got["relaxed_right"], got
    if not got["relaxed_right"]:
        assert got["path"].startswith(PLAIN.split(" (")[0]) and "miscompute" in got["path"], got
