"""WebGPU benchmark, one run: matmul GFLOP/s natively (webgpu's three matmul kernels vs numpy on
the same machine) and in headless Chromium (webgpu on the page's adapter vs Pyodide's numpy),
and a transformer block forward (d=384) on webgpu vs cpu.

    python bench/bench_webgpu.py [--sizes 512 1024 2048] [--no-browser] [--json out.json]

Each figure is the best of a few timed runs after a warm-up (pipelines compiled, buffers
pooled); GPU timings end with a wait for the queue. Every result is also checked against numpy.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import ember
import ember.nn as nn
import ember.nn.functional as F


def best(fn, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def reps_for(n):
    return 3 if n <= 512 else 1


# ---------------------------------------------------------------------- native matmul

def native_matmul(sizes):
    be = ember.device("webgpu").backend
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        flop = 2 * n ** 3
        row = {"n": n, "numpy": flop / best(lambda: a @ b, 3) / 1e9}
        ga, gb = ember.tensor(a, device="webgpu"), ember.tensor(b, device="webgpu")
        want = a.astype(np.float64) @ b
        for kernel in ("auto", "tiled", "regs"):
            be.matmul_kernel = kernel
            with ember.no_grad():
                c = ga @ gb                                       # warm-up: compile + allocate
                err = float(np.abs(c.numpy() - want).max() / np.abs(want).max())

                def run():
                    ga @ gb
                    be.synchronize()
                row[f"webgpu_{kernel}"] = flop / best(run, reps_for(n)) / 1e9
                row[f"rel_err_{kernel}"] = err
        be.matmul_kernel = "auto"
        rows.append(row)
        print(f"  matmul {n}^2: numpy {row['numpy']:.2f}  webgpu vec4 {row['webgpu_auto']:.2f}  "
              f"tiled {row['webgpu_tiled']:.2f}  regs {row['webgpu_regs']:.2f} GFLOP/s  "
              f"(rel err {row['rel_err_auto']:.1e})", flush=True)
    return {"adapter": be.adapter.info, "matmul": rows}


# ---------------------------------------------------------------------- transformer block

class Block(nn.Module):
    """Pre-norm transformer encoder block (Whisper-tiny sized: d=384, 6 heads, FFN 1536)."""

    def __init__(self, d=384, heads=6, ffn=1536):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x):                                          # (batch, seq, d)
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)                # (batch, heads, seq, d / heads)
        x = x + self.out(a.permute(0, 2, 1, 3).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def transformer_block(seq):
    ember.manual_seed(0)
    blk = Block()
    x = np.random.default_rng(0).standard_normal((1, seq, 384), dtype=np.float32)
    out = {"seq": seq}
    ref = None
    for dev in ("cpu", "webgpu"):
        blk.to(dev)
        xt = ember.tensor(x, device=dev)
        be = ember.device(dev).backend
        with ember.no_grad():
            y = blk(xt).numpy()
            ref = y if ref is None else ref

            def run():
                blk(xt)
                be.synchronize()
            out[f"{dev}_ms"] = best(run, 3) * 1e3
        out[f"{dev}_max_abs_diff_vs_cpu"] = float(np.abs(y - ref).max())
    print(f"  transformer block d=384 seq={seq}: cpu {out['cpu_ms']:.1f} ms, webgpu {out['webgpu_ms']:.1f} ms "
          f"(max |diff| {out['webgpu_max_abs_diff_vs_cpu']:.1e})", flush=True)
    return out


# ---------------------------------------------------------------------- browser

PAGE_BENCH = """
import json, time
import numpy as np
import ember
from ember.webgpu import init_async
await init_async()
be = ember.device("webgpu").backend
rows = []
for n in SIZES:
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    reps = 3 if n <= 512 else 1
    def best(fn):
        ts = []
        for _ in range(reps):
            t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
        return min(ts)
    ga, gb = ember.tensor(a, device="webgpu"), ember.tensor(b, device="webgpu")
    with ember.no_grad():
        c = (ga @ gb).numpy()
        want = a @ b
        err = float(np.abs(c - want).max() / np.abs(want).max())
        def run():
            ga @ gb
            be.synchronize()
        gpu = best(run)
    rows.append({"n": n, "pyodide_numpy": 2 * n**3 / best(lambda: a @ b) / 1e9,
                 "webgpu": 2 * n**3 / gpu / 1e9, "rel_err": err})
json.dumps({"adapter": be.adapter.info, "matmul": rows})
"""


def browser_matmul(sizes):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from test_webgpu_browser import open_page, run_python
    with open_page(timeout_ms=1_800_000) as page:
        out = json.loads(run_python(page, PAGE_BENCH.replace("SIZES", repr(list(sizes)))))
    for r in out["matmul"]:
        print(f"  page matmul {r['n']}^2: Pyodide numpy {r['pyodide_numpy']:.2f}  webgpu {r['webgpu']:.2f} "
              f"GFLOP/s  (rel err {r['rel_err']:.1e})", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--seq", type=int, default=128, help="transformer block sequence length")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    res = {}
    print("native (wgpu):", flush=True)
    res["native"] = native_matmul(args.sizes)
    print(f"  adapter: {res['native']['adapter']}")
    res["transformer_block"] = transformer_block(args.seq)
    if not args.no_browser:
        print("headless Chromium:", flush=True)
        try:
            res["browser"] = browser_matmul(args.sizes)
            print(f"  adapter: {res['browser']['adapter']}")
        except LookupError as e:
            print(f"  skipped: {e}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
