"""Greedy decoding's argmax over a Q8_0 tied output (quant.c ember_q8_0_argmax) in Pyodide under Node: the index
equals np.argmax of ember_qmatmul's full output, computed in the same run, on random weights and on the inputs
that could break a bound: ties (duplicate rows: the lowest index wins), one huge outlier in x (a loose bound),
x all zeros (every row ties), rows nearly equal to the winner, odd row counts; non-finite x or scales make the
kernel decline and QTensor.argmax_matmul_t fall back to every row. Natively argmax_matmul_t is np.argmax itself."""
import numpy as np

from pyodide_runner import ember_wheel, pyodide_dist, pyodide_session  # noqa: F401
from ember.quant import QTensor

CASES = r'''
import numpy as np
import ember
from ember.backends import cpu_matmul
from ember.quant import QTensor
kern = cpu_matmul.wasm_kernels()
rng = np.random.default_rng(0)
out = []

def check(name, q, x):
    full = kern.qmatmul(x[None], q.data, q.ggml_type.id, q.shape[0])[0]
    want = int(np.argmax(full))
    arg, exact = kern.q8_0_argmax(q.data, kern.q8_0_l1(q.data, q.shape[1]), x)
    out.append([name, want, arg, exact, q.argmax_matmul_t(x), q.argmax_matmul_t(ember.tensor(x[None, None]))])

for n, k in ((1, 32), (3, 64), (37, 96), (1001, 640), (4099, 640)):
    q = QTensor.quantize(rng.standard_normal((n, k)).astype(np.float32), "q8_0")
    for trial in range(3):
        check(f"random {n}x{k}", q, rng.standard_normal(k).astype(np.float32) * 3)
w = rng.standard_normal((513, 128)).astype(np.float32)
w[400] = w[77]                      # an exact duplicate of ...
x = w[77] * 4                       # ... the best row: the lowest index must win
check("tie", QTensor.quantize(w, "q8_0"), x)
w2 = np.repeat(w[:1], 64, 0) + rng.standard_normal((64, 128)).astype(np.float32) * 1e-3  # near-equal rows
check("near ties", QTensor.quantize(w2, "q8_0"), w[0].copy())
x = rng.standard_normal(128).astype(np.float32); x[5] = 1e4  # one outlier: the scale is loose elsewhere
check("outlier", QTensor.quantize(w, "q8_0"), x)
check("zeros", QTensor.quantize(w, "q8_0"), np.zeros(128, np.float32))
q = QTensor.quantize(w, "q8_0")
for name, bad in (("nan x", np.float32("nan")), ("inf x", np.float32("inf"))):
    x = rng.standard_normal(128).astype(np.float32); x[3] = bad
    full = kern.qmatmul(x[None], q.data, q.ggml_type.id, q.shape[0])[0]
    out.append([name, int(np.argmax(full)), kern.q8_0_argmax(q.data, kern.q8_0_l1(q.data, 128), x)[0], 0,
                q.argmax_matmul_t(x), q.argmax_matmul_t(x)])
raw = q.data.copy(); raw[9, 0:2] = np.array([0x7C00], np.uint16).view(np.uint8)  # an inf scale in row 9
qi = QTensor(raw, "Q8_0", q.shape)
x = rng.standard_normal(128).astype(np.float32)
full = kern.qmatmul(x[None], raw, 8, q.shape[0])[0]
out.append(["inf scale", int(np.argmax(full)), kern.q8_0_argmax(raw, kern.q8_0_l1(raw, 128), x)[0], 0,
            qi.argmax_matmul_t(x), qi.argmax_matmul_t(x)])
result = out
'''


def test_wasm_argmax_equals_argmax_of_the_full_matmul(pyodide_session):
    got = pyodide_session.run(CASES, timeout=600)["result"]
    for name, want, arg, exact, via_q, via_tensor in got:
        assert via_q == want and via_tensor == want, (name, want, via_q, via_tensor)
        if name in ("nan x", "inf x", "inf scale"):
            assert arg == -1, name  # declined: the caller computed every row
        else:
            assert arg == want, (name, want, arg)
            assert exact >= 1
    random = [e for name, _, _, e, _, _ in got if name.startswith("random 4099")]
    assert max(random) < 4099 // 4, random  # the bound prunes: most rows are never computed exactly
    assert {r[0] for r in got if r[0] == "tie"} and [r for r in got if r[0] == "tie"][0][1] == 77


def test_native_argmax_matmul_t_is_argmax_of_matmul_t():
    rng = np.random.default_rng(1)
    for t in ("q8_0", "q4_0"):
        q = QTensor.quantize(rng.standard_normal((300, 64)).astype(np.float32), t)
        x = rng.standard_normal(64).astype(np.float32)
        assert q.argmax_matmul_t(x) == int(np.argmax(q.matmul_t(x[None])))
