"""The WebAssembly quantized-matmul kernels (core/backends/cpu_kernels/quant.c) in Pyodide under Node, against ember's own
numpy dequantize (ember.quant) computed in the same Pyodide run: dequantization bit for bit (also on random
bytes: every scale bit pattern, subnormal, inf and NaN halves), x @ W.T within float32 summation error on odd
shapes, for every block type the kernels cover, and the dispatch from ember.quant.qmatmul / QTensor.matmul_t
(fused for a few rows, wasm-dequantized slabs + wasm GEMM for more)."""
import pytest

from pyodide_runner import ember_wheel, pyodide_dist, pyodide_session  # noqa: F401

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]

CHECK = r'''
import numpy as np
from ember.backends import cpu_matmul
from ember.ggml import types as T
from ember.ggml.codec import dequantize_rows, quantize
kern = cpu_matmul.wasm_kernels()

def rel_err(y, w, x):
    """max |y - x w^T| / (|x| |w|^T), the reference in float64 from ember's numpy dequantize."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    ref = x64 @ w64.T
    scale = np.abs(x64) @ np.abs(w64).T + 1e-30
    return float((np.abs(y.astype(np.float64) - ref) / scale).max()) if ref.size else 0.0
'''


def _run(session, body):
    return session.run(CHECK + body, timeout=300)["result"]


def test_the_kernels_cover_these_types(pyodide_session):
    got = _run(pyodide_session, "result = sorted(T.get(i).name for i in kern.qmatmul_types)\n")
    assert sorted(got) == sorted(TYPES)


@pytest.mark.parametrize("qtype", TYPES)
def test_dequant_is_bit_exact_with_numpy(pyodide_session, qtype):
    got = _run(pyodide_session, f'''
t = T.get("{qtype}")
rng = np.random.default_rng(0)
out = []
for rows, blocks in ((1, 1), (3, 2), (7, 3), (64, 3)):  # 64 x 3 random scales: some inf/NaN
    k = blocks * t.block_size
    real = quantize(rng.standard_normal((rows, k)).astype(np.float32) * 3, t)     # blocks a quantizer writes
    noise = rng.integers(0, 256, (rows, blocks * t.type_size), dtype=np.uint8)    # every bit pattern
    for raw in (real, noise):
        ref = dequantize_rows(raw, t)
        mine = kern.qdequant(raw, t.id, k)
        same = bool(np.array_equal(mine, ref, equal_nan=True))
        out.append([rows, k, same, int(np.isnan(ref).sum()), int(np.isinf(ref).sum())])
result = out
''')
    for rows, k, same, _, _ in got:
        assert same, (qtype, rows, k)
    assert any(nans or infs for *_, nans, infs in got), "the random blocks should include inf/NaN scales"


@pytest.mark.parametrize("qtype", TYPES)
def test_qmatmul_matches_dequantize_then_matmul(pyodide_session, qtype):
    got = _run(pyodide_session, f'''
t = T.get("{qtype}")
rng = np.random.default_rng(1)
out = []
# m: decode (1), a group of 4, 4 + a remainder, odd; n: 1 and odd; k: one block and several
for m, n, blocks in ((1, 1, 1), (1, 37, 3), (4, 5, 2), (5, 19, 1), (7, 3, 4), (9, 64, 2)):
    k = blocks * t.block_size
    w = rng.standard_normal((n, k)).astype(np.float32)
    raw = quantize(w, t)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = kern.qmatmul(x, raw, t.id, n)
    out.append([m, n, k, list(y.shape), str(y.dtype), rel_err(y, dequantize_rows(raw, t), x)])
result = out
''')
    for m, n, k, shape, dtype, err in got:
        assert shape == [m, n] and dtype == "float32"
        assert err < 1e-6 * k ** 0.5 + 1e-6, (qtype, m, n, k, err)


def test_dispatch_from_quant_qmatmul_and_qtensor(pyodide_session):
    got = _run(pyodide_session, '''
import ember
from ember.quant import QTensor, qmatmul
import importlib; qmod = importlib.import_module("ember.backends.cpu_quant")
rng = np.random.default_rng(2)
w = rng.standard_normal((70, 512)).astype(np.float32)
out = []
for name in ("Q4_K", "Q6_K", "Q5_0", "Q8_0"):
    q = QTensor.quantize(w, name)
    ref_w = q.numpy()
    for m in (1, qmod.FUSED_ROWS, qmod.FUSED_ROWS + 3):  # fused; fused at the limit; wasm slabs + GEMM
        x = rng.standard_normal((2, m, 512)).astype(np.float32)[0]
        a = qmatmul(x, q.data, q.ggml_type, q.shape)
        b = q.matmul_t(ember.tensor(x)).numpy()
        out.append([name, m, rel_err(a, ref_w, x), bool(np.array_equal(a, b))])
# a type without a kernel still goes through numpy's dequantize
q = QTensor.quantize(w, "Q3_K")
x = rng.standard_normal((3, 512)).astype(np.float32)
out.append(["Q3_K", 3, rel_err(qmatmul(x, q.data, q.ggml_type, q.shape), q.numpy(), x), True])
result = out
''')
    for name, m, err, same in got:
        assert err < 1e-6 * 512 ** 0.5 + 1e-6, (name, m, err)
        assert same, (name, m)
