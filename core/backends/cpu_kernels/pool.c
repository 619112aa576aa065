// ember_parallel (parallel.h) for the page's kernel pool: the kernels built as one wasm module that imports a shared
// WebAssembly.Memory, instantiated in N - 1 workers (Web Workers, or Node worker_threads) and in the thread that
// calls (the Pyodide worker). Every instance sees the same memory, so a job is a few words in it: the caller writes
// the job, bumps `gen` and wakes sleeping workers (memory.atomic.notify); everyone claims chunks; the caller waits
// for the last one (memory.atomic.wait32, in slices).
//
// Nothing here blocks for ever. A worker waits for work in slices of WORKER_SLICE_NS and leaves its loop when
// `stop` is set. The caller's wait ends in PARALLEL_LOST when a worker is reported lost (`lost`, set by
// web/pool.js when a worker's script fails, its kernel traps, or its owner terminates it) or when no chunk has
// completed for `timeout_ms`; the pool is then broken: later jobs run on the caller alone (the results stay those
// of any thread count) and cpu_pool.py says why. Protocol of the job fields: threads.c's (CLOSED while written).
//
// Each instance needs its own stack: web/pool.js sets the exported __stack_pointer of a worker's instance to its
// own region before the worker enters ember_pool_worker; the caller keeps the module's stack.
#include <stdatomic.h>
#include <stdint.h>

#include "parallel.h"

#define CLOSED (-1)
#define WORKER_SLICE_NS 100000000LL  // 100 ms: how soon a sleeping worker sees `stop`
#define CALLER_SLICE_NS 10000000LL   // 10 ms: the caller's checks for a lost worker

// the control words, an Int32Array for web/pool.js at ember_pool_ctl() (the order is its CTL table)
enum {
    C_GEN,       // the current job's number, CLOSED while the caller writes the next
    C_INSIDE,    // workers reading the current job's fields
    C_NEXT,      // its next unclaimed chunk
    C_DONE,      // its chunks computed
    C_SLEEPING,  // workers in memory.atomic.wait32 on C_GEN
    C_ACTIVE,    // threads a job uses (the caller and active - 1 workers)
    C_READY,     // workers in their loop
    C_LOST,      // 0, or 1 + the index of a worker that died (web/pool.js)
    C_BROKEN,    // 0, or why jobs run on the caller alone: 1 a worker lost, 2 no progress for timeout_ms
    C_STOP,      // workers leave their loop
    C_SPIN,      // loads of a word before waiting on it (0.4-2 ns each in V8: 10^7 is ~4-20 ms; see SPIN)
    C_TIMEOUT_MS,
    C_BUSY,      // a job is running (a nested ember_parallel runs serially)
    C_JOBS,      // jobs run in parallel (the tests check the pool was used)
    C_FIELDS
};

// A worker spins for a while after a job before it sleeps, long enough to span the page's Python between two
// jobs (a YOLOv8s forward: ~0.3-1 ms of it between convs, a few ms at its maps' passes): woken by the caller after
// each, it joined every job late (Chromium 156, 2 threads: the forward 8-10% slower than with the spin, where ~20 us
// of it let the worker sleep between nearly every two convs). Native threads.c spins ~100 us, timed by its clock;
// the page's Python is ~5-10x slower between jobs, and the pool's wasm has no clock.
#define SPIN 10000000
static _Atomic int ctl[C_FIELDS] = {[C_ACTIVE] = 1, [C_SPIN] = SPIN, [C_TIMEOUT_MS] = 10000};
static struct {
    ember_rows_fn fn;
    const void *args;
    int n, chunks;
} job;

__attribute__((export_name("ember_pool_ctl")))
_Atomic int *ember_pool_ctl(void) { return ctl; }

int ember_parallel_threads(void) {
    int active = atomic_load(&ctl[C_ACTIVE]), ready = atomic_load(&ctl[C_READY]) + 1;
    return atomic_load(&ctl[C_BROKEN]) ? 1 : active < ready ? active : ready;
}

static int wait32(_Atomic int *word, int value, long long ns) {
    return __builtin_wasm_memory_atomic_wait32((int *)word, value, ns);
}

static void wake(_Atomic int *word, unsigned count) { __builtin_wasm_memory_atomic_notify((int *)word, count); }

static void work(int thread) {
    for (;;) {
        int c = atomic_fetch_add(&ctl[C_NEXT], 1);
        if (c >= job.chunks)
            return;
        long r0 = (long)job.n * c / job.chunks, r1 = (long)job.n * (c + 1) / job.chunks;
        job.fn(job.args, (int)r0, (int)r1, thread);
        if (atomic_fetch_add(&ctl[C_DONE], 1) + 1 == job.chunks)
            wake(&ctl[C_DONE], 1);
    }
}

// A worker's loop (worker `id` >= 1), until `stop`; web/pool.js calls it once the instance has its stack.
__attribute__((export_name("ember_pool_worker")))
void ember_pool_worker(int id) {
    int seen = atomic_load(&ctl[C_GEN]);
    atomic_fetch_add(&ctl[C_READY], 1);
    for (;;) {
        int g, spin = 0;
        while ((g = atomic_load(&ctl[C_GEN])) == seen || g == CLOSED) {
            if (atomic_load(&ctl[C_STOP])) {
                atomic_fetch_sub(&ctl[C_READY], 1);
                return;
            }
            if (++spin < atomic_load(&ctl[C_SPIN]))
                continue;
            atomic_fetch_add(&ctl[C_SLEEPING], 1);
            wait32(&ctl[C_GEN], g, WORKER_SLICE_NS);
            atomic_fetch_sub(&ctl[C_SLEEPING], 1);
            spin = 0;
        }
        seen = g;
        atomic_fetch_add(&ctl[C_INSIDE], 1);
        if (atomic_load(&ctl[C_GEN]) == g && id < atomic_load(&ctl[C_ACTIVE]))
            work(id);
        atomic_fetch_sub(&ctl[C_INSIDE], 1);
    }
}

// The caller's wait for the job's last chunk: spin, then wait in slices; PARALLEL_LOST (and the pool broken)
// when a worker is lost or nothing completes for timeout_ms.
static int wait_done(int chunks) {
    int spin = atomic_load(&ctl[C_SPIN]);
    long long idle_ns = 0, limit_ns = (long long)atomic_load(&ctl[C_TIMEOUT_MS]) * 1000000LL;
    int last = atomic_load(&ctl[C_DONE]);
    for (int i = 0; last < chunks; last = atomic_load(&ctl[C_DONE])) {
        if (atomic_load(&ctl[C_LOST])) {
            atomic_store(&ctl[C_BROKEN], 1);
            return PARALLEL_LOST;
        }
        if (++i < spin)
            continue;
        int rc = wait32(&ctl[C_DONE], last, CALLER_SLICE_NS);
        int now = atomic_load(&ctl[C_DONE]);
        idle_ns = now != last ? 0 : idle_ns + (rc == 2 ? CALLER_SLICE_NS : 0);
        if (idle_ns >= limit_ns) {
            atomic_store(&ctl[C_BROKEN], 2);
            return PARALLEL_LOST;
        }
    }
    return 0;
}

int ember_parallel(ember_rows_fn fn, const void *args, int n, int chunks) {
    int expected = 0;
    // a loss reported between jobs (a job its worker took no part in completes without seeing it) ends the next
    // job, once: the caller learns that the pool is down to one thread, whatever the timing
    if (atomic_load(&ctl[C_LOST]) && !atomic_load(&ctl[C_BROKEN])) {
        atomic_store(&ctl[C_BROKEN], 1);
        return PARALLEL_LOST;
    }
    if (chunks < 2 || n < 2 || ember_parallel_threads() <= 1 ||
        !atomic_compare_exchange_strong(&ctl[C_BUSY], &expected, 1)) {
        fn(args, 0, n, 0);
        return 0;
    }
    static int number;
    atomic_store(&ctl[C_GEN], CLOSED);
    int rc = 0;
    for (long long i = 0, waited = 0; atomic_load(&ctl[C_INSIDE]) > 0; i++) {  // a worker late to the last job
        if (atomic_load(&ctl[C_LOST]) || waited > (long long)atomic_load(&ctl[C_TIMEOUT_MS]) * 1000000LL) {
            atomic_store(&ctl[C_BROKEN], atomic_load(&ctl[C_LOST]) ? 1 : 2);
            rc = PARALLEL_LOST;
            break;
        }
        int inside = atomic_load(&ctl[C_INSIDE]);
        if (i >= atomic_load(&ctl[C_SPIN]) && inside > 0 && wait32(&ctl[C_INSIDE], inside, 1000000LL) == 2)
            waited += 1000000LL;
    }
    if (rc == 0) {
        job.fn = fn;
        job.args = args;
        job.n = n;
        job.chunks = chunks;
        atomic_store(&ctl[C_DONE], 0);
        atomic_store(&ctl[C_NEXT], 0);
        number = (number + 1) & 0x3fffffff;
        atomic_store(&ctl[C_GEN], number);
        if (atomic_load(&ctl[C_SLEEPING]) > 0)
            wake(&ctl[C_GEN], PARALLEL_MAX_THREADS);
        atomic_fetch_add(&ctl[C_JOBS], 1);
        work(0);
        rc = wait_done(chunks);
    }
    atomic_store(&ctl[C_BUSY], 0);
    return rc;
}
