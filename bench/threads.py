"""Thread counts for the benchmarks: every engine of a run at the same count, 1 and 2 by default, each figure
printed with the count it was measured at (so figures in notes and issues compare like with like).

ember's threads are two pools: the BLAS library's (numpy's matmuls; set with threadpoolctl) and the compiled
kernels' (threads.c: the float and quantized C kernels; set_threads, or EMBER_NUM_THREADS for a fresh process).
`use(n)` sets both in this process; `child_env(n)` gives a subprocess the same.
"""
from __future__ import annotations

import glob
import os
import threading
import time


def parse(text: str | None) -> list[int]:
    """'1,2' -> [1, 2]; None -> [1, 2]."""
    counts = [int(t) for t in (text or "1,2").split(",") if t.strip()]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--threads wants positive counts like 1,2, got {text!r}")
    return counts


_limit = []


def use(n: int) -> str:
    """ember at n threads in this process (BLAS and the compiled kernels); returns what was set, for the report."""
    from threadpoolctl import threadpool_limits

    from ember.backends import cpu_matmul
    for lim in _limit:
        lim.restore_original_limits()
    _limit[:] = [threadpool_limits(n)]
    kern = cpu_matmul.native_kernels()
    got = kern.set_threads(n) if kern is not None else None
    return f"BLAS {n}, ember kernels {got if got is not None else 'none'}"


def child_env(n: int) -> dict:
    """The environment of a subprocess that runs an engine at n threads (BLAS, OpenMP, ember's kernels)."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": str(n), "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n),
            "EMBER_NUM_THREADS": str(n)}


def _others_cpu_ticks() -> int:
    """CPU clock ticks (user + system) of this process's threads other than the calling one."""
    me, total = threading.get_native_id(), 0
    for path in glob.glob("/proc/self/task/*/stat"):
        if int(path.split("/")[-2]) == me:
            continue
        try:
            fields = open(path).read().rsplit(")", 1)[1].split()
        except OSError:  # (a thread that ended)
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def settle(max_s: float = 5.0, window: float = 0.05) -> None:
    """Wait, up to max_s, until no other thread of this process has used the CPU for `window` seconds: the engine
    timed before may leave worker threads spinning that take a core from the next one (onnxruntime's spin ~10-50
    ms after a run; torch's OpenMP workers 1-2 s: ember's ResNet conv on 2 threads took 2.1 ms right after torch's
    against 1.25 ms alone). Without /proc, a fixed 2 s."""
    if not os.path.isdir("/proc/self/task"):
        time.sleep(min(max_s, 2.0))
        return
    end, last = time.monotonic() + max_s, _others_cpu_ticks()
    while time.monotonic() < end:
        time.sleep(window)
        now = _others_cpu_ticks()
        if now == last:
            return
        last = now
