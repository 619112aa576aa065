"""Quantized matvec/matmul vs float32 numpy: time and extra memory, printed as a table.

    python bench/bench_quant.py [--n 4096] [--batches 1 32] [--types q4_0 q8_0 q4_k] [--repeat 5]
    python bench/bench_quant.py --pyodide [...]   # the same table inside Pyodide (Node), via tests/pyodide_runner.py

For each weight type: y = x @ W.T with W (n, n) held as GGML blocks (ember.quant.qmatmul, which
dequantizes slabs of rows into a bounded scratch), against x @ W.T with W in float32. Times are the
median and min of --repeat runs; "vs f32" compares min times; "extra MiB" is the tracemalloc peak
during one call (the output included), "weight MiB" what W occupies. Quantize time is one run.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import statistics
import time
import tracemalloc

import numpy as np

from ember.ggml import codec
from ember.quant import qmatmul


def _times_ms(fn, repeat):
    """(median, min) wall time in ms; min is the better estimate on a machine shared with other jobs."""
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times), 1e3 * min(times)


def _peak_mib(fn):
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main(argv=None):
    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()  # as the ember CLI does (EMBER_MALLOC_TUNING=0 opts out)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--types", nargs="+", default=["q4_0", "q8_0", "q4_k"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS threads (threadpoolctl; default 1: on a machine shared with other jobs, multi-threaded "
                         "BLAS stalls on every small GEMM and the numbers mean nothing); 0 leaves BLAS alone")
    ap.add_argument("--pyodide", action="store_true", help="run the benchmark inside Pyodide instead")
    args = ap.parse_args(argv)
    if args.pyodide:
        return _in_pyodide([a for a in (sys.argv[1:] if argv is None else argv) if a != "--pyodide"])
    wasm = platform.machine() == "wasm32"  # no threads, no BLAS
    if args.threads and not wasm:
        from threadpoolctl import threadpool_limits  # bench-only dependency
        threadpool_limits(args.threads)
    rng = np.random.default_rng(0)
    n = args.n
    w = rng.standard_normal((n, n)).astype(np.float32)  # (out, in)
    print(f"# {platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}, "
          f"{platform.machine()}; W {n}x{n}; {args.repeat} runs; BLAS threads: {'n/a' if wasm else args.threads or 'default'}")
    print(f"{'type':6} {'batch':>5} {'median ms':>10} {'min ms':>8} {'vs f32':>7} {'extra MiB':>10} "
          f"{'weight MiB':>11} {'quantize s':>11}")
    rows = [("f32", None, None)]
    for t in args.types:
        start = time.perf_counter()
        raw = codec.quantize(w, t)
        rows.append((t, raw, time.perf_counter() - start))
    base = {}
    for name, raw, qsec in rows:
        for m in args.batches:
            x = rng.standard_normal((m, n)).astype(np.float32)
            if raw is None:
                fn = lambda x=x: x @ w.T  # noqa: E731
                weight = w.nbytes
            else:
                fn = lambda x=x, raw=raw, name=name: qmatmul(x, raw, name, w.shape)  # noqa: E731
                weight = raw.nbytes
            med, best = _times_ms(fn, args.repeat)
            base.setdefault(m, best)
            print(f"{name:6} {m:5d} {med:10.1f} {best:8.1f} {best / base[m]:6.1f}x {_peak_mib(fn):10.1f} "
                  f"{weight / 2**20:11.1f} {'' if qsec is None else f'{qsec:.2f}':>11}")


def _in_pyodide(argv):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from pyodide_runner import PyodideSession  # Node + offline Pyodide + numpy + the ember wheel
    with open(os.path.abspath(__file__)) as f:
        source = f.read().replace('if __name__ == "__main__":', "if False:")
    with PyodideSession() as session:
        out = session.run(source + f"\nmain({argv!r})\nresult = None\n", timeout=3600)
    print(out["stdout"], end="")


if __name__ == "__main__":
    main()
