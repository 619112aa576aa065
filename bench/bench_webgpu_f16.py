"""16-bit storage on WebGPU, one run: each op on float16 / bfloat16 arrays stored as f32 words ("wide", the
default), two per u32 word ("packed", backend.set_pack16) and, for float16 on shader-f16 adapters, in f16
words ("native"); time (best of --reps after a warm-up, ending with a wait for the queue) and bytes held.
Ratios against "wide" in the same run; every result is checked against the wide one. The machine's load
moves the figures: the modes run in turn, twice, best of all.

    python bench/bench_webgpu_f16.py [--reps 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import time

import numpy as np

import ember
from ember.webgpu.buffers import F16_NATIVE

OPS = {
    "add 1M": (lambda a, m, w, x: a + a),
    "matvec 1x1024x1024": (lambda a, m, w, x: x @ w),
    "matmul 128x1024x1024": (lambda a, m, w, x: m @ w),
    "softmax 128x1024": (lambda a, m, w, x: m.softmax(-1)),
}


def _mode(be, mode):
    be.f16_native = mode == "native"
    if be.f16_native:
        be.words[ember.float16] = F16_NATIVE
    be.set_pack16(mode == "packed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    be = ember.device("webgpu").backend
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(s).astype(np.float32) for s in ((1 << 20,), (128, 1024), (1024, 1024), (1, 1024))]
    rows = []
    print(f"adapter: {be.adapter.info}")
    for dt in (ember.float16, ember.bfloat16):
        modes = ["wide", "packed"] + (["native"] if dt is ember.float16 and be.has_f16 else [])
        times = {(m, name): float("inf") for m in modes for name in OPS}
        ref, held = {}, {}
        for _ in range(2):  # the modes one after another, twice: load on the machine hits each alike
            for m in modes:
                gc.collect()  # no float16/bfloat16 array may outlive its mode (words are per dtype)
                _mode(be, m)
                arrays = [ember.tensor(h, device="webgpu").to(dt) for h in host]
                held[m] = arrays[2]._data.storage.nbytes
                with ember.no_grad():
                    for name, fn in OPS.items():
                        y = fn(*arrays).float().numpy()  # warm-up (compile, pool buffers) and the check
                        np.testing.assert_allclose(y, ref.setdefault(name, y), rtol=2e-2, atol=2e-2)
                        for _ in range(args.reps):
                            be.synchronize()
                            t = time.perf_counter()
                            fn(*arrays)
                            be.synchronize()
                            times[m, name] = min(times[m, name], time.perf_counter() - t)
                del arrays, y
        for name in OPS:
            row = {"dtype": dt.name, "op": name, **{f"{m}_ms": round(times[m, name] * 1e3, 3) for m in modes},
                   **{f"{m}/wide": round(times[m, name] / times["wide", name], 3) for m in modes if m != "wide"},
                   **{f"weight_bytes_{m}": held[m] for m in modes}}
            rows.append(row)
            print("  ".join(f"{k}={v}" for k, v in row.items()))
    gc.collect()
    _mode(be, "native" if be.has_f16 else "wide")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
