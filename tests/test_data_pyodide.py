"""ember.data in Pyodide (Node): a seeded shuffle, a random_split and the digits CNN's seeded init give
the same indices and weights as in CPython (numpy 2.0 there, a newer numpy here), and one training
step gives the same loss and gradient norm, so a run in the page retraces the native one."""
from __future__ import annotations

from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401

SNIPPET = """
import hashlib
import numpy as np
import ember
from ember.data import DataLoader, TensorDataset, random_split
from ember.models.digits import DigitsCNN, init_weights
from ember.nn.utils import clip_grad_norm_

ds = TensorDataset(np.arange(103))
orders = {}
for seed in (0, 1, 12345):
    dl = DataLoader(ds, batch_size=10, shuffle=True, seed=seed, drop_last=True)
    orders[str(seed)] = [[int(v) for v in b[0].numpy()] for epoch in range(3) for b in dl]
split = [s.indices for s in random_split(ds, [0.8, 0.2], seed=7)]
m = DigitsCNN()
init_weights(m, 0)
weights = hashlib.sha256(b"".join(p.numpy().tobytes() for p in m.parameters())).hexdigest()
rs = np.random.RandomState(3)
x = ember.tensor(rs.uniform(0, 1, (16, 1, 8, 8)).astype(np.float32))
y = ember.tensor(rs.randint(0, 10, 16).astype(np.int64))
loss = ember.nn.functional.cross_entropy(m(x), y)
loss.backward()
result = {"orders": orders, "split": split, "weights": weights, "loss": float(loss.item()),
          "grad_norm": float(clip_grad_norm_(m.parameters(), 1e9).item())}
"""


def test_seeded_data_and_first_step_agree_with_cpython(pyodide_session):
    native = {}
    exec(SNIPPET, native)
    ref = native["result"]
    got = pyodide_session.run(SNIPPET, timeout=300)["result"]
    assert got["orders"] == ref["orders"]
    assert got["split"] == ref["split"]
    assert got["weights"] == ref["weights"]
    assert abs(got["loss"] - ref["loss"]) < 1e-5 * max(1.0, ref["loss"])
    assert abs(got["grad_norm"] - ref["grad_norm"]) < 1e-4 * ref["grad_norm"]
