"""Core benchmarks, as ratios measured in one run: per-op overhead (ember vs numpy vs torch eager),
matmul 1024^2, encoder-shaped products (an activation of 32-128 rows times a weight, a model's worth of weights
cycled so each comes from memory as in a forward pass: ember's gemm_native.c against numpy's OpenBLAS and torch)
and a ResNet-like conv2d vs torch on CPU at each thread count (1 and 2 by default, ember's BLAS and kernels and
torch alike, interleaved, best of), `import ember` vs `import torch`.

    python bench/bench_core.py [--threads 1,2]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_core.py   # current numpy's own kernel
"""
from __future__ import annotations

import os
import subprocess
import sys
import timeit

import numpy as np


# (rows, k, n): MiniLM's projections and FFN at 128 tokens, a 32-token prompt through a 768-wide FFN
ENCODER_PRODUCTS = [(128, 384, 384), (128, 384, 1536), (128, 1536, 384), (32, 768, 3072)]


def best(f, number, repeat=5):
    return min(timeit.repeat(f, number=number, repeat=repeat)) / number


def import_time(mod):
    """Best of 5 fresh interpreters, with bytecode caches allowed (as an installed package has them)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    code = f"import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"
    subprocess.check_output([sys.executable, "-c", f"import {mod}"], env=env)  # warm: write .pyc files
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True, env=env)) for _ in range(5)]
    return min(runs)


def _np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="thread counts for the matmul and conv (default 1,2)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    import threads as bench_threads
    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()  # as the ember CLI does (EMBER_MALLOC_TUNING=0 opts out)
    import torch

    import ember
    import ember.nn.functional as F
    try:
        from threadpoolctl import threadpool_info
        blas = [f"{i['internal_api']} {i.get('architecture')}" for i in threadpool_info() if i["user_api"] == "blas"]
    except ImportError:
        blas = ["?"]
    print(f"BLAS: {', '.join(blas)}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE')}")

    a = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    ea, ta = ember.tensor(a), torch.tensor(a)
    ops = {
        "add": (lambda: a + a, lambda: ea + ea, lambda: ta + ta),
        "mul scalar": (lambda: a * 2.0, lambda: ea * 2.0, lambda: ta * 2.0),
        "exp": (lambda: np.exp(a), lambda: ea.exp(), lambda: ta.exp()),
        "matmul": (lambda: a @ a, lambda: ea @ ea, lambda: ta @ ta),
        "sum(-1)": (lambda: np.add.reduce(a, -1), lambda: ea.sum(-1), lambda: ta.sum(-1)),
        "reshape": (lambda: a.reshape(16), lambda: ea.reshape(16), lambda: ta.reshape(16)),
        "transpose": (lambda: a.T, lambda: ea.transpose(0, 1), lambda: ta.transpose(0, 1)),
        "getitem [1]": (lambda: a[1], lambda: ea[1], lambda: ta[1]),
        "slice [1:3, ::2]": (lambda: a[1:3, ::2], lambda: ea[1:3, ::2], lambda: ta[1:3, ::2]),
        "cat (two, axis 0)": (lambda: np.concatenate([a, a]), lambda: ember.cat([ea, ea]), lambda: torch.cat([ta, ta])),
        "linear (4 -> 4, bias)": (lambda: a @ a.T + a[0], lambda: F.linear(ea, ea, ea[0]),
                                  lambda: torch.nn.functional.linear(ta, ta, ta[0])),
        "softmax(-1)": (lambda: _np_softmax(a), lambda: ea.softmax(-1), lambda: ta.softmax(-1)),
    }
    print(f"\nper-op time on a 4x4 float32 tensor (us)   {'numpy':>8s} {'ember':>8s} {'torch':>8s}  ember-numpy")
    over = []
    for name, (fn, fe, ft) in ops.items():
        tn, te, tt = (best(f, 20000) * 1e6 for f in (fn, fe, ft))
        over.append(te - tn)
        print(f"  {name:38s} {tn:8.2f} {te:8.2f} {tt:8.2f}  {te - tn:8.2f}")
    print(f"  median ember overhead over numpy: {np.median(over):.2f} us/op")

    m = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    em, tm = ember.tensor(m), torch.tensor(m)
    x = np.random.default_rng(2).standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
    ex, ew, tx, tw = ember.tensor(x), ember.tensor(w), torch.tensor(x), torch.tensor(w)
    for n in bench_threads.parse(args.threads):
        what = bench_threads.use(n)
        torch.set_num_threads(n)
        bench_threads.settle()  # (torch's workers spin on after its last op: each engine is timed alone)
        te = best(lambda: em @ em, 5)
        tt = best(lambda: tm @ tm, 5)
        print(f"\nthreads {n} ({what}; torch {n}):")
        print(f"  matmul 1024^2: ember {te * 1e3:.1f} ms ({2 * 1024 ** 3 / te / 1e9:.1f} GFLOP/s), "
              f"torch {tt * 1e3:.1f} ms ({2 * 1024 ** 3 / tt / 1e9:.1f} GFLOP/s), ember/torch {te / tt:.2f}x")
        for rows, k, n in ENCODER_PRODUCTS:
            t = {"ember": float("inf"), "numpy": float("inf"), "torch": float("inf")}
            xs = np.random.default_rng(4).standard_normal((rows, k)).astype(np.float32)
            ws = [np.random.default_rng(5 + i).standard_normal((k, n)).astype(np.float32)
                  for i in range(max(2, (64 << 20) // (k * n * 4)))]  # 64 MiB of weights: past L3, as in a model
            runs = {"ember": (ember.tensor(xs), [ember.tensor(w) for w in ws]), "numpy": (xs, ws),
                    "torch": (torch.tensor(xs), [torch.tensor(w) for w in ws])}
            for _ in range(3):
                for name, (xx, wl) in runs.items():
                    bench_threads.settle()
                    t[name] = min(t[name], best(lambda: [xx @ w for w in wl], 3) / len(wl))
            print(f"  {rows} x {k} @ {k} x {n} (weights from memory): ember {t['ember'] * 1e6:.0f} us, "
                  f"numpy {t['numpy'] * 1e6:.0f} us, torch {t['torch'] * 1e6:.0f} us: ember/numpy "
                  f"{t['ember'] / t['numpy']:.2f}x, ember/torch {t['ember'] / t['torch']:.2f}x")
        te = tt = float("inf")
        with torch.no_grad():
            for _ in range(3):  # interleaved rounds, best of
                bench_threads.settle()
                te = min(te, best(lambda: ember.nn.functional.conv2d(ex, ew, padding=1), 3))
                bench_threads.settle()
                tt = min(tt, best(lambda: torch.nn.functional.conv2d(tx, tw, padding=1), 3))
        print(f"  conv2d 64->64 3x3 on 56x56 (ResNet layer): ember {te * 1e3:.2f} ms, torch {tt * 1e3:.2f} ms, "
              f"ember/torch {te / tt:.2f}x")

    ie, it = import_time("ember"), import_time("torch")
    print(f"\nimport ember {ie * 1e3:.0f} ms, import torch {it * 1e3:.0f} ms ({it / ie:.1f}x slower)")


if __name__ == "__main__":
    main()
