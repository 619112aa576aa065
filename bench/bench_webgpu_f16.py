"""16-bit floats on WebGPU, one run, ratios within it (time: best of --reps after a warm-up, ending with a wait
for the queue; every result checked against a reference computed in the same run):

1. storage: each op on float16 / bfloat16 arrays stored as f32 words ("wide"), two per u32 word ("packed",
   backend.set_pack16) and, for float16 on shader-f16 adapters, in f16 words ("native"); ratios against wide.
2. packed stores: packed-output row/matmul kernels storing through two atomics per element ("atomic", the
   old path) against f32 words packed a word per thread ("words", PipelineCache.word_stores).
3. f16 compute (shader-f16 only): float16 matmul GFLOP/s (vec4 and tiled kernels, a decode row) and attention
   time (composed and flash) with f16 products (backend.f16_compute) against f32 products.

The machine's load moves the figures: variants run in turn, twice, best of all.

    python bench/bench_webgpu_f16.py [--reps 5] [--json out.json] [--only storage,stores,compute]
"""
from __future__ import annotations

import argparse
import gc
import json
import time

import numpy as np

import ember
import ember.nn.functional as F
from ember.nn.fused_ops import flash_attention
from ember.webgpu.buffers import F16_NATIVE, WORD

def _ran(t):
    """t with its kernel dispatched: a fused elementwise result is pending until its buffer is used (fusion.py)."""
    t._data.storage.handle
    return t


OPS = {
    "add 1M": (lambda a, m, w, x: _ran(a + a)),
    "matvec 1x1024x1024": (lambda a, m, w, x: x @ w),
    "matmul 128x1024x1024": (lambda a, m, w, x: m @ w),
    "softmax 128x1024": (lambda a, m, w, x: m.softmax(-1)),
    "rms_norm 128x1024": (lambda a, m, w, x: F.rms_norm(m, (1024,), x[0])),
}


def _mode(be, mode):
    """Storage words: wide, packed, or native (float16 in f16 words, bfloat16 packed)."""
    be.f16_native = mode == "native"
    be.words[ember.float16] = F16_NATIVE if be.f16_native else WORD[ember.float16]
    be.set_pack16(mode != "wide")


def _best(be, fn, reps):
    fn()  # warm-up: compile, pool buffers
    best = float("inf")
    for _ in range(reps):
        be.synchronize()
        t = time.perf_counter()
        fn()
        be.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def _host(rng):
    return [rng.standard_normal(s).astype(np.float32) for s in ((1 << 20,), (128, 1024), (1024, 1024), (1, 1024))]


def bench_storage(be, reps, rng):
    host, rows = _host(rng), []
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
                        y = fn(*arrays).float().numpy()
                        r = ref.setdefault(name, y)  # f16 products (native) move big sums by a few f16 ulps
                        np.testing.assert_allclose(y, r, rtol=2e-2, atol=2e-3 * max(np.abs(r).max(), 1.0))
                        times[m, name] = min(times[m, name], _best(be, lambda: fn(*arrays), reps))
                del arrays, y
        for name in OPS:
            row = {"dtype": dt.name, "op": name, **{f"{m}_ms": round(times[m, name] * 1e3, 3) for m in modes},
                   **{f"{m}/wide": round(times[m, name] / times["wide", name], 3) for m in modes if m != "wide"},
                   **{f"weight_bytes_{m}": held[m] for m in modes}}
            rows.append(row)
            print("storage  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return rows


def bench_stores(be, reps, rng):
    """Packed outputs of the row and matmul kernels: atomic half-word stores against f32 words + one pack."""
    host, rows = _host(rng), []
    for dt in (ember.float16, ember.bfloat16):
        gc.collect()
        _mode(be, "packed")  # float16 packed too, as on an adapter without shader-f16
        arrays = [ember.tensor(h, device="webgpu").to(dt) for h in host]
        for name, fn in OPS.items():
            if name == "add 1M":  # elementwise always packs a word per thread
                continue
            times, ys = {}, {}
            with ember.no_grad():
                for _ in range(2):
                    for kind in ("atomic", "words"):
                        be.pipelines.word_stores = kind == "words"
                        ys[kind] = fn(*arrays).float().numpy()
                        times[kind] = min(times.get(kind, float("inf")), _best(be, lambda: fn(*arrays), reps))
            np.testing.assert_array_equal(ys["words"], ys["atomic"])  # the same values, stored another way
            row = {"dtype": dt.name, "op": name, "atomic_ms": round(times["atomic"] * 1e3, 3),
                   "words_ms": round(times["words"] * 1e3, 3),
                   "words/atomic": round(times["words"] / times["atomic"], 3)}
            rows.append(row)
            print("stores   " + "  ".join(f"{k}={v}" for k, v in row.items()))
        del arrays
    be.pipelines.word_stores = True
    return rows


def bench_compute(be, reps, rng):
    """float16 in f16 words: f16 products (f32 accumulators) against f32 products, same kernels, same data."""
    gc.collect()
    _mode(be, "native")
    rows = []

    def h(*shape):
        return ember.tensor(rng.standard_normal(shape).astype(np.float32), device="webgpu").half()
    mats = {"matmul 256x1024x1024 (vec4, x @ W^T)": (256, 1024, 1024, True),
            "matmul 255x1023x1021 (tiled)": (255, 1023, 1021, False),
            "matvec 1x2048x2048 (decode, x @ W^T)": (1, 2048, 2048, True)}
    for name, (M, K, N, wt) in mats.items():
        a = h(M, K)
        b = h(N, K).t() if wt else h(K, N)
        r = _compare(be, lambda: a @ b, reps)
        row = {"op": name, **{f"{k}_gflops": round(2 * M * K * N / v / 1e9, 3) for k, v in r.items()},
               "f16/f32 time": round(r["f16"] / r["f32"], 3)}
        rows.append(row)
        print("compute  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    atts = {"attention composed 1x6x256x256x64": ((1, 6, 256, 64), (1, 6, 256, 64), "composed"),
            "attention flash decode 1x8x1x64x64": ((1, 8, 1, 64), (1, 8, 64, 64), "flash")}
    for name, (qs, ks, kind) in atts.items():
        q, k, v = h(*qs), h(*ks), h(*ks)
        if kind == "flash":
            fn = (lambda: flash_attention(q, k, v))
        else:
            fn = (lambda: F.scaled_dot_product_attention(q, k, v))
        with ember.kernels.tuned("flash_attention", "webgpu", mode=kind):
            r = _compare(be, fn, reps)
        row = {"op": name, **{f"{k}_ms": round(t * 1e3, 3) for k, t in r.items()},
               "f16/f32 time": round(r["f16"] / r["f32"], 3)}
        rows.append(row)
        print("compute  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    be.f16_compute = True
    return rows


def _compare(be, fn, reps):
    r, ys = {}, {}
    with ember.no_grad():
        for _ in range(2):
            for kind in ("f16", "f32"):
                be.f16_compute = kind == "f16"
                ys[kind] = fn().float().numpy()
                r[kind] = min(r.get(kind, float("inf")), _best(be, fn, reps))
    scale = np.abs(ys["f32"]).max()
    assert np.abs(ys["f16"] - ys["f32"]).max() <= 2e-2 * scale  # a few f16 roundings of each product apart
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="storage,stores,compute")
    args = ap.parse_args()
    be = ember.device("webgpu").backend
    rng = np.random.default_rng(0)
    print(f"adapter: {be.adapter.info}")
    out = {"adapter": be.adapter.info}
    parts = args.only.split(",")
    if "storage" in parts:
        out["storage"] = bench_storage(be, args.reps, rng)
    if "stores" in parts:
        out["stores"] = bench_stores(be, args.reps, rng)
    if "compute" in parts and be.has_f16:
        out["compute"] = bench_compute(be, args.reps, rng)
    gc.collect()
    _mode(be, "native" if be.has_f16 else "wide")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
