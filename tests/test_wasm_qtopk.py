"""Sampling's top-k over a Q8_0 tied output (quant.c ember_q8_0_bounds + ember_q8_0_rows_above) in Pyodide under
Node: the rows it returns hold every row among the k largest of ember_qmatmul's full output (ties with the k-th
too), with the very values of that output (NaN where it is NaN), and the sampler draws the same token from them as from all the logits
for the same seed, on random weights and on the inputs that could break a bound (as test_wasm_qargmax.py): ties,
near ties, one huge outlier in x, x all zeros, k = 1 and k = every row; non-finite x or scales make the kernel
decline and QTensor.topk_matmul_t fall back to every row. Natively topk_matmul_t is every row."""
import numpy as np

from pyodide_runner import ember_wheel, pyodide_dist, pyodide_session  # noqa: F401
from ember.models.common.generate import Sampler, SamplingParams
from ember.quant import QTensor

CASES = r'''
import numpy as np
import ember
from ember.backends import cpu_matmul
from ember.models.common.generate import Sampler, SamplingParams
from ember.quant import QTensor
kern = cpu_matmul.wasm_kernels()
rng = np.random.default_rng(0)
out = []

def draws(ids, values, full, k):
    """tokens drawn from the subset and from every logit, for a few seeds and filters"""
    got = []
    for seed in range(4):
        for temperature, top_p in ((0.8, 1.0), (1.3, 0.9)):
            p = SamplingParams(temperature, k, top_p, 1.0, seed)
            got.append([Sampler(p).draw(ids, values), Sampler(p)(full, [])])
    return got

def check(name, q, x, k):
    full = kern.qmatmul(x[None], q.data, q.ggml_type.id, q.shape[0])[0]
    kth = np.partition(full, -k)[-k]
    want = np.flatnonzero(full >= kth)                        # the k largest and their ties
    got = kern.q8_0_topk(q.data, kern.q8_0_l1(q.data, q.shape[1]), x, k)
    ids, values = q.topk_matmul_t(ember.tensor(x[None, None]), k)
    out.append([name, k, q.shape[0], want.tolist(), None if got is None else got[0].tolist(),
                None if got is None else bool((got[1] == full[got[0]]).all()), ids.tolist(),
                bool(((values == full[ids]) | np.isnan(full[ids])).all()),
                draws(ids, values, full, k) if np.isfinite(full).all() else []])

for n, k in ((1, 32), (37, 96), (1001, 640), (4099, 640)):
    q = QTensor.quantize(rng.standard_normal((n, k)).astype(np.float32), "q8_0")
    for top in sorted({1, min(n, 40), n}):
        check(f"random {n}x{k}", q, rng.standard_normal(k).astype(np.float32) * 3, top)
w = rng.standard_normal((513, 128)).astype(np.float32)
w[400] = w[77]; w[401] = w[78]                                # exact duplicates, at the top ...
x = (w[77] + w[78]) * 2
check("ties", QTensor.quantize(w, "q8_0"), x, 1)              # ... and at the k-th place
check("ties", QTensor.quantize(w, "q8_0"), x, 3)
w2 = np.repeat(w[:1], 64, 0) + rng.standard_normal((64, 128)).astype(np.float32) * 1e-3  # near-equal rows
check("near ties", QTensor.quantize(w2, "q8_0"), w[0].copy(), 10)
x = rng.standard_normal(128).astype(np.float32); x[5] = 1e4   # one outlier: the scale is loose elsewhere
check("outlier", QTensor.quantize(w, "q8_0"), x, 20)
check("zeros", QTensor.quantize(w, "q8_0"), np.zeros(128, np.float32), 5)  # every row ties
q = QTensor.quantize(w, "q8_0")
for name, bad in (("nan x", np.float32("nan")), ("inf x", np.float32("inf"))):
    x = rng.standard_normal(128).astype(np.float32); x[3] = bad
    check(name, q, x, 7)
raw = q.data.copy(); raw[9, 0:2] = np.array([0x7C00], np.uint16).view(np.uint8)  # an inf scale in row 9
check("inf scale", QTensor(raw, "Q8_0", q.shape), rng.standard_normal(128).astype(np.float32), 7)
result = out
'''


def test_wasm_topk_holds_the_k_largest_and_samples_as_every_logit(pyodide_session):
    got = pyodide_session.run(CASES, timeout=600)["result"]
    for name, k, n, want, kernel_ids, kernel_exact, ids, exact, drawn in got:
        if name in ("nan x", "inf x", "inf scale"):
            assert kernel_ids is None, name  # declined: topk_matmul_t computed every row
            assert ids == list(range(n)), name
        else:
            assert set(want) <= set(kernel_ids) and kernel_ids == sorted(kernel_ids), (name, k)
            assert kernel_exact and kernel_ids == ids, (name, k)
            assert drawn, name
        assert exact, (name, k)  # the values are the full output's, bit for bit
        assert all(a == b for a, b in drawn), (name, k, drawn)
    big = [len(r[4]) for r in got if r[0] == "random 4099x640" and r[1] == 40]
    assert big and max(big) < 4099 // 4, big  # the bound prunes: most rows are never computed exactly
    ties = [r for r in got if r[0] == "ties"]
    assert {77, 400} <= set(ties[0][3]) and {77, 78, 400, 401} <= set(ties[1][3])  # the ties are kept


def test_sampler_draws_the_same_token_from_a_superset_of_the_top_k():
    """The property the wasm path relies on, natively: any superset of the top k (in id order) gives the token
    all the logits give, for every seed; the rest of the vocabulary never matters."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(5000).astype(np.float32) * 4
    logits[[10, 2000]] = logits.max() + 1  # a tie at the top
    for k, top_p in ((1, 1.0), (40, 1.0), (40, 0.9), (700, 0.5)):
        kth = np.partition(logits, -k)[-k]
        extra = rng.choice(np.flatnonzero(logits < kth), 300, replace=False)
        ids = np.union1d(np.flatnonzero(logits >= kth), extra)
        for seed in range(20):
            p = SamplingParams(0.9, k, top_p, 1.0, seed)
            assert Sampler(p).draw(ids, logits[ids]) == Sampler(p)(logits, []), (k, top_p, seed)


def test_native_topk_matmul_t_is_every_row():
    rng = np.random.default_rng(1)
    q = QTensor.quantize(rng.standard_normal((300, 64)).astype(np.float32), "q8_0")
    x = rng.standard_normal(64).astype(np.float32)
    ids, values = q.topk_matmul_t(x, 5)
    assert ids.tolist() == list(range(300)) and np.array_equal(values, q.matmul_t(x[None])[0])
