"""numpy's OpenBLAS runs its threaded jobs on the native kernels' threads (cpu_blas_pool.py, threads.c's
ember_blas_jobs): the products are OpenBLAS's own bits, callers on several Python threads at once beside the kernels'
jobs and in forked children get their answers, and the gang under it (every job of a call at once, on threads of their own: OpenBLAS's GEMM
threads wait for one another's packed panels) holds where it could deadlock: workers started just before the jobs
are posted, a gang asked for from inside a kernel's chunk, a gang waiting for another thread's job."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember.backends import cpu_matmul
from ember.backends import cpu_native_kernels as cnk

if cpu_matmul.native_kernels() is None:
    pytest.skip(f"no compiled CPU kernels here ({cpu_matmul.native_kernels_status()})", allow_module_level=True)

_PRODUCTS = textwrap.dedent("""
    import json, sys, threading
    import numpy as np
    from threadpoolctl import threadpool_limits
    from ember.backends import cpu_matmul
    status = cpu_matmul.native_kernels_status()
    def _check(_):
        return bool(np.array_equal(a @ b, want))
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 301, 517)).astype(np.float32), rng.normal(size=(517, 263)).astype(np.float32)
    out = {"status": status}
    with threadpool_limits(int(sys.argv[1])):
        out["gemm"] = (a @ b).tobytes().hex()
        out["gemv"] = (b.T @ a[0, 0]).tobytes().hex()
        x = rng.normal(size=(200, 200))
        out["inv"] = bool(np.allclose(np.linalg.inv(x) @ x, np.eye(200), atol=1e-8))
        wrong = []
        def loop():  # numpy's products on 3 Python threads and the kernels' own jobs on a fourth, all at once
            for _ in range(40):
                if not np.array_equal(a @ b, want):
                    wrong.append(1)
        def kernels():  # the kernels' threaded row-vector product (an LM head's)
            kern = cpu_matmul.native_kernels()
            wt, x = rng.normal(size=(512, 4096)).astype(np.float32), rng.normal(size=512).astype(np.float32)
            first = kern.matvec_f32(x, wt)
            for _ in range(200):
                if not np.array_equal(kern.matvec_f32(x, wt), first):
                    wrong.append(2)
        want = a @ b
        ts = [threading.Thread(target=loop) for _ in range(3)] + [threading.Thread(target=kernels)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        out["concurrent_ok"] = not wrong
        import multiprocessing as mp  # a forked child has none of the pool's workers: it starts its own
        ctx = mp.get_context("fork")
        with ctx.Pool(2) as p:
            out["forked_ok"] = all(p.map(_check, range(2)))
    print(json.dumps(out))
""")


def _products(threads: int, pool: bool) -> dict:
    env = {**__import__("os").environ, "EMBER_BLAS_POOL": "1" if pool else "0", "EMBER_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", _PRODUCTS, str(threads)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("threads", [2, 3])
def test_openblas_jobs_on_the_kernels_threads_give_openblas_own_bits(threads):
    """3 BLAS threads over 2 kernel threads: the pool starts a worker for the third job."""
    pooled, own = _products(threads, True), _products(threads, False)
    if sys.platform.startswith("linux"):  # numpy's wheels bring OpenBLAS >= 0.3.28 there (CI: must hold)
        assert "jobs on these threads" in pooled["status"], pooled["status"]
    assert "EMBER_BLAS_POOL=0" in own["status"]
    for key in ("gemm", "gemv"):
        assert pooled[key] == own[key], key
    assert pooled["inv"] and own["inv"]
    assert pooled["concurrent_ok"] and own["concurrent_ok"]
    assert pooled["forked_ok"] and own["forked_ok"]


_HARNESS = r"""
#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include "parallel.h"
int ember_threads(int n);
typedef void (*blas_dojob)(int thread, void *job, int data);
void ember_blas_jobs(int sync, blas_dojob dojob, int numjobs, size_t el, void *jobdata, int data);

typedef struct { atomic_int arrived[64], finished; } gang_state;
typedef struct { int ran_as; gang_state *st; } job_data;
static void job(int t, void *p, int n) {  /* each job waits until every job of its gang has started */
    job_data *j = p;
    j->ran_as = t;
    atomic_fetch_add(&j->st->arrived[t], 1);
    for (int i = 0; i < n; i++)
        while (atomic_load(&j->st->arrived[i]) == 0)
            ;
    atomic_fetch_add(&j->st->finished, 1);
}
static int gang(int n) {
    gang_state st = {0};
    job_data jobs[64];
    for (int i = 0; i < n; i++) jobs[i] = (job_data){-1, &st};
    ember_blas_jobs(1, job, n, sizeof jobs[0], jobs, n);
    for (int i = 0; i < n; i++)
        if (jobs[i].ran_as != i || atomic_load(&st.arrived[i]) != 1) return 1;
    return atomic_load(&st.finished) != n;
}
static atomic_int inner_bad;
static void rows(const void *args, int r0, int r1, int thread) {  /* a gang from inside a chunk */
    (void)args, (void)thread;
    for (int r = r0; r < r1; r++)
        if (r % 7 == 0) inner_bad |= gang(3);
}
int main(void) {
    int bad = 0;
    ember_threads(1);
    for (int n = 2; n <= 6; n++)        /* each gang starts a worker just before it posts its jobs */
        for (int round = 0; round < 50; round++) bad |= gang(n);
    ember_threads(2);
    bad |= ember_parallel(rows, 0, 64, 8) << 1;
    bad |= inner_bad << 2;
    for (int round = 0; round < 2000; round++) bad |= gang(2 + round % 3) << 3;
    printf("%d\n", bad);
    return bad;
}
"""


def test_gangs_run_every_job_at_once_without_deadlock(tmp_path):
    cc = cnk.compiler()
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "h.c").write_text(_HARNESS)
    exe = tmp_path / "h"
    subprocess.run([cc, "-O2", "-pthread", "-std=c11", f"-I{cnk.SOURCES}", "-o", str(exe), str(tmp_path / "h.c"),
                    str(cnk.SOURCES / "threads.c")], check=True, capture_output=True, timeout=120)
    for _ in range(3):  # the start-up race is per process
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "0", (proc.returncode, proc.stdout, proc.stderr)
