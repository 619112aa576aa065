"""Training throughput, as ratios measured in one run: steps/s of the digits CNN (batch 64) and of the
demo Llama (its config: 4 layers, dim 192, vocab 2048; batch 8 x 128 tokens) with ember's autograd and
AdamW vs torch eager on the same CPU, and the digits CNN in Pyodide (the page's CPU runtime, under Node)
vs native ember.

    python bench/bench_train.py [--steps 10] [--no-llama] [--no-pyodide]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def best_rate(step, steps, repeat=3):
    """Steps per second, best of `repeat` timed runs of `steps` steps, after one warm-up step."""
    step()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t) / steps)
    return 1.0 / best


def digits_pair(batch=64):
    import torch

    import ember
    from ember.models.digits import TrainConfig, make_trainer
    t = make_trainer(TrainConfig(batch_size=batch))
    xb, yb = next(iter(t.loader))

    def ember_step():
        t.train_step((xb, yb))

    sys.path.insert(0, str(ROOT / "tests"))
    from test_train_digits import TorchCNN
    ref = TorchCNN()
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in t.model.state_dict().items()})
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    x, y = torch.tensor(xb.numpy()), torch.tensor(yb.numpy())

    def torch_step():
        loss = torch.nn.functional.cross_entropy(ref(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
    del ember
    return ember_step, torch_step


def llama_pair(batch=8, seq=128):
    import torch
    import transformers

    import ember
    from ember.models.llama import names
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    from ember.models.llama.train import lm_loss
    hf_cfg = json.loads((ROOT / "models" / "llama" / "demo" / "config.json").read_text())
    hc = transformers.LlamaConfig(**{k: v for k, v in hf_cfg.items() if k not in ("architectures", "torch_dtype")},
                                  attn_implementation="eager")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hc)
    c = LlamaConfig.from_hf(hc.to_dict())
    m = Llama(c)
    m.load_state_dict(names.from_hf({k: ember.tensor(v.detach().numpy()) for k, v in hf.state_dict().items()}, c))
    ids = np.random.default_rng(0).integers(0, c.vocab_size, (batch, seq + 1))
    x, y = ember.tensor(ids[:, :-1]), ember.tensor(ids[:, 1:])
    opt = ember.optim.AdamW(m.parameters(), lr=1e-3)

    def ember_step():
        loss = lm_loss(m, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    tx, ty = torch.tensor(ids[:, :-1]), torch.tensor(ids[:, 1:])
    topt = torch.optim.AdamW(hf.parameters(), lr=1e-3)

    def torch_step():
        logits = hf(tx).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c.vocab_size), ty.reshape(-1))
        topt.zero_grad()
        loss.backward()
        topt.step()
        loss.item()
    return ember_step, torch_step


PYODIDE_SNIPPET = """
import time
import numpy as np
from ember.models.digits import TrainConfig, make_trainer
from ember.models.digits.recipe import digits_arrays
from ember.backends.cpu_matmul import matmul_path
x, y = digits_arrays("/data/digits.csv.gz")
t = make_trainer(TrainConfig(batch_size=64), arrays=(x, y))
xb, yb = next(iter(t.loader))
t.train_step((xb, yb))
best = 1e9
for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(STEPS):
        t.train_step((xb, yb))
    best = min(best, (time.perf_counter() - t0) / STEPS)
result = {"steps_per_s": 1 / best, "matmul": matmul_path()}
"""


def pyodide_digits(steps):
    sys.path.insert(0, str(ROOT / "tests"))
    from pyodide_runner import PyodideSession

    from ember.data import sklearn_data_file
    folder = os.path.dirname(sklearn_data_file("digits.csv.gz"))
    with PyodideSession(mounts={"/data": folder}) as s:
        return s.run(PYODIDE_SNIPPET.replace("STEPS", str(steps)), timeout=900)["result"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-pyodide", action="store_true")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"CPU threads: {os.cpu_count()}; best of 3 x {a.steps} steps after a warm-up step")
    e, t = digits_pair()
    de, dt = best_rate(e, a.steps), best_rate(t, a.steps)
    print(f"digits CNN (batch 64):     ember {de:7.2f} steps/s   torch {dt:7.2f} steps/s   ember/torch {de / dt:.2f}")
    if not a.no_llama:
        e, t = llama_pair()
        n = max(2, a.steps // 4)
        le, lt = best_rate(e, n), best_rate(t, n)
        print(f"demo Llama (8 x 128 tok):  ember {le:7.2f} steps/s   torch {lt:7.2f} steps/s   ember/torch {le / lt:.2f}")
    if not a.no_pyodide:
        r = pyodide_digits(a.steps)
        print(f"digits CNN in Pyodide (Node, CPU, matmul {r['matmul']}): {r['steps_per_s']:.2f} steps/s   "
              f"Pyodide/native ember {r['steps_per_s'] / de:.2f}")


if __name__ == "__main__":
    main()
