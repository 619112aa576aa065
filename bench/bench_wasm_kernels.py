"""Matmul GFLOP/s in Pyodide under Node: the wasm SIMD128 kernels vs Pyodide's numpy (einsum, the path
without the kernels, and np.matmul), against native numpy on one BLAS thread, in one run.

    python bench/bench_wasm_kernels.py [--sizes 512,1024,2048] [--rounds 5] [--relaxed] [--chromium]

Square float32 products n x n x n, plus the shapes a model's layers make (Whisper tiny's linear layers
with 1500 frames, a decoding step's row vector x weight, attention scores per head). Each round times
every engine once, interleaved (this VM slows under sustained load); a figure is the best round.
Results go to stdout and bench/results/wasm_kernels.json. Goal: >= 20 GFLOP/s at 1024^2.
--relaxed times the relaxed-SIMD module (cpu_wasm_kernels_relaxed.wasm, what Chromium loads) beside the
plain one in the same rounds (Node runs with --experimental-wasm-relaxed-simd). --chromium runs the same in
Pyodide on a page of headless Chromium (/usr/bin/chromium under Playwright) instead of Node.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pyodide_runner import PyodideSession, ember_wheel  # noqa: E402

CHROMIUM = "/usr/bin/chromium"

# (name, batch, M, K, N, transposed B)
MODEL_SHAPES = [("whisper fc1 1500x384 @ 384x1536^T", 1, 1500, 384, 1536, True),
                ("whisper attn q k^T 6 x 1500x64 @ 64x1500", 6, 1500, 64, 1500, False),
                ("decode 1x384 @ 384x1536^T", 1, 1, 384, 1536, True),
                ("decode 1x384 @ 384x51864 (head, row-major)", 1, 1, 384, 51864, False)]

SNIPPET = r'''
import json, time
import numpy as np
from ember.backends import cpu_matmul
cases, rounds = json.loads(CASES), ROUNDS
kern = cpu_matmul.wasm_kernels()
assert kern is not None, cpu_matmul.matmul_path()
engines = {"kernels": kern.matmul}
if WITH_RELAXED:  # both modules side by side: the plain one (Node's default path) and the relaxed one
    import ctypes
    from ember.backends import cpu_wasm_kernels as W
    engines = {"kernels": W.WasmKernels(ctypes.CDLL(str(W.MODULE))).matmul,
               "kernels+relaxed": W.WasmKernels(ctypes.CDLL(str(W.RELAXED_MODULE))).matmul}
engines |= {"einsum": cpu_matmul.einsum_matmul,  # the path without the kernels
            "np.matmul": np.matmul}
rng = np.random.default_rng(0)
best, errors = {}, {}
for name, batch, m, k, n, bt in cases:
    a = rng.standard_normal((batch, m, k) if batch > 1 else (m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k) if batch > 1 else (n, k)).astype(np.float32).swapaxes(-1, -2)
    if not bt:
        b = np.ascontiguousarray(b)
    skip = {"np.matmul"} if 2.0 * batch * m * k * n > 3e9 else set()  # its fallback loop: minutes at 2048^3
    ref = kern.matmul(a, b)
    reps = {}
    for e, f in engines.items():  # warm-up: V8 runs a module's first calls in its baseline tier
        if e.startswith("kernels"):
            f(a, b)
        # calls per timing, enough for 20 ms: a page's clock ticks in 0.1 ms (Chromium's coarsened timers)
        reps[e], t = 0, time.perf_counter()
        while time.perf_counter() - t < 0.02 and e not in skip:
            f(a, b); reps[e] += 1
    errors[name] = float(np.abs(ref - cpu_matmul.einsum_matmul(a, b)).max())
    for r in range(rounds):
        order = list(engines.items())
        for e, f in (order if r % 2 == 0 else order[::-1]):  # (alternated: neither kernel always runs first)
            fast = e.startswith("kernels")
            if e in skip or (not fast and r >= 2):  # the slow engines: best of 2
                continue
            for _ in range(3 if fast else 1):  # the fast ones: three shots at a quiet moment
                t = time.perf_counter()
                for _ in range(reps[e]):
                    f(a, b)
                dt = (time.perf_counter() - t) / reps[e]
                best[(name, e)] = min(best.get((name, e), 1e9), dt)
result = {"path": cpu_matmul.matmul_path(), "errors": errors,
          "seconds": [[name, e, s] for (name, e), s in best.items()]}
'''


def in_node(snippet: str, relaxed: bool) -> dict:
    with PyodideSession(node_args=["--experimental-wasm-relaxed-simd"] if relaxed else []) as s:
        return s.run(snippet, timeout=1800)["result"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def in_chromium(snippet: str) -> dict:
    """`snippet`'s result from Pyodide on the main thread of a page in headless Chromium."""
    from playwright.sync_api import sync_playwright

    from ember.wasm.assets import ensure_pyodide
    with tempfile.TemporaryDirectory(prefix="ember-bench-") as tmp:
        site, wheel = Path(tmp), ember_wheel()
        os.symlink(ensure_pyodide(), site / "pyodide")
        os.symlink(wheel, site / wheel.name)
        (site / "snippet.py").write_text(snippet + "\nimport json as _json\n_json.dumps(result)\n")
        (site / "index.html").write_text(f"""<!doctype html><script src="pyodide/pyodide.js"></script>
<script type="module">
try {{
  const py = await loadPyodide({{indexURL: "pyodide/"}});
  await py.loadPackage(["numpy", "micropip"]);
  await py.pyimport("micropip").install(new URL("{wheel.name}", location.href).href);
  window.benchResult = await py.runPythonAsync(await (await fetch("snippet.py")).text());
}} catch (e) {{ window.benchResult = JSON.stringify({{error: String(e)}}); }}
</script>""")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=tmp))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{server.server_port}/index.html")
                page.wait_for_function("window.benchResult !== undefined", timeout=1800_000)
                res = json.loads(page.evaluate("window.benchResult"))
                res["browser"] = f"Chromium {browser.version}"
                browser.close()
        finally:
            server.shutdown()
    if "error" in res:
        raise RuntimeError(f"ember: the benchmark failed in Chromium: {res['error']}")
    return res


def native(cases, rounds):
    from threadpoolctl import threadpool_limits
    rng = np.random.default_rng(0)
    out = {}
    with threadpool_limits(1, "blas"):
        for name, batch, m, k, n, bt in cases:
            a = rng.standard_normal((batch, m, k) if batch > 1 else (m, k)).astype(np.float32)
            b = rng.standard_normal((batch, n, k) if batch > 1 else (n, k)).astype(np.float32).swapaxes(-1, -2)
            if not bt:
                b = np.ascontiguousarray(b)
            for _ in range(rounds):
                t = time.perf_counter(); np.matmul(a, b); dt = time.perf_counter() - t
                out[name] = min(out.get(name, 1e9), dt)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="512,1024,2048")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--relaxed", action="store_true", help="also the relaxed-SIMD module (Node flag)")
    p.add_argument("--chromium", action="store_true", help="Pyodide in headless Chromium instead of Node")
    args = p.parse_args()
    cases = [(f"{n}^2", 1, n, n, n, False) for n in map(int, args.sizes.split(","))] + MODEL_SHAPES
    flops = {c[0]: 2.0 * c[1] * c[2] * c[3] * c[4] for c in cases}
    snippet = SNIPPET.replace("CASES", repr(json.dumps(cases))).replace("ROUNDS", str(args.rounds))
    snippet = snippet.replace("WITH_RELAXED", str(args.relaxed))
    res = in_chromium(snippet) if args.chromium else in_node(snippet, args.relaxed)
    nat = native(cases, args.rounds)  # after the Pyodide run: the two never share the cores
    table = {name: {"native 1-thread BLAS": nat[name]} for name in flops}
    for name, engine, seconds in res["seconds"]:
        table[name][f"pyodide {engine}"] = seconds
    engines = ["pyodide kernels", *(["pyodide kernels+relaxed"] if args.relaxed else []), "pyodide einsum",
               "pyodide np.matmul", "native 1-thread BLAS"]
    print(f"{res.get('browser', 'Node')}: matmul path in Pyodide: {res['path']}; GFLOP/s (best of {args.rounds} interleaved rounds)")
    print(f"{'shape':46s}" + "".join(f"{e:>22s}" for e in engines) + f"{'kernels/einsum':>16s}{'kernels/native':>16s}"
          + (f"{'relaxed/plain':>16s}" if args.relaxed else ""))
    report = {}
    for name, row in table.items():
        g = {e: flops[name] / row[e] / 1e9 for e in engines if e in row}
        report[name] = {"gflops": g, "max_abs_diff_kernels_vs_einsum": res["errors"][name]}
        print(f"{name:46s}" + "".join(f"{g[e]:22.2f}" if e in g else f"{'-':>22s}" for e in engines)
              + f"{g['pyodide kernels'] / g['pyodide einsum']:16.1f}"
              + f"{g['pyodide kernels'] / g['native 1-thread BLAS']:16.2f}"
              + (f"{g['pyodide kernels+relaxed'] / g['pyodide kernels']:16.2f}" if args.relaxed else ""))
    out = ROOT / "bench" / "results" / "wasm_kernels.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"host": res.get("browser", "Node"), "path": res["path"], "rounds": args.rounds,
                               "shapes": report}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
