"""Thread counts for the benchmarks: every engine of a run at the same count, 1 and 2 by default, each figure
printed with the count it was measured at (so figures in notes and issues compare like with like).

ember's threads are two pools: the BLAS library's (numpy's matmuls; set with threadpoolctl) and the compiled
kernels' (threads.c: the float and quantized C kernels; set_threads, or EMBER_NUM_THREADS for a fresh process).
`use(n)` sets both in this process; `child_env(n)` gives a subprocess the same.
"""
from __future__ import annotations

import os


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
