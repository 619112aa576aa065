// Worker threads for the native build of the kernels: ember_parallel (parallel.h) on pthreads. The calling thread
// and `threads - 1` workers claim the chunks of one job; every chunk is computed by the same code whichever thread
// runs it, so the result does not depend on the number of threads.
//
// A decoded token makes ~150 jobs of 0.02-3 ms with some serial work between them (a small model's rope and
// cache writes, its norms), so a worker spins (pausing, and yielding to any other thread on its core) for a while
// after each job, as llama.cpp's do, and sleeps on a condition variable only after IDLE_NS of nothing, timed by
// the clock: a pause takes from ~10 to ~140 cycles by CPU, and 512 of them were 16 us on a recent Xeon, where
// SmolLM2's worker then slept (and was woken by a system call) ~63 times a token instead of ~2. The caller wakes
// sleepers only when there are any. A forked child has no workers (pthread_atfork).
// One job at a time: a second caller (another Python thread, or a kernel inside a chunk) runs its job serially.
//
// OpenBLAS's jobs run here too (ember_blas_jobs, installed by cpu_blas_pool.py): its own workers spin for ~0.1 s
// of CPU after every BLAS call without yielding, and on two cores a kernel worker that shared a core with that
// spin waited out the scheduler's time slices: two threads decoded the stories15M shape no faster than one after
// a BLAS prefill, and the Whisper encoder (GEMMs beside attention.c) gained nothing from a second thread.
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define CPU_PAUSE() __asm__ volatile("yield")
#else
#define CPU_PAUSE() ((void)0)
#endif

#include "parallel.h"

#define SPIN 512         // pauses before the caller, waiting for a job's last chunk, yields
#define IDLE_NS 100000L  // a worker's spin after a job before it sleeps
#define CLOCK_EVERY 32   // pauses between its looks at the clock
#define CLOSED (-1)

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int workers;        // started
    int active;         // threads a job uses (ember_threads), workers + 1 at most
    atomic_int busy;    // a job is running
    atomic_int gen;     // the current job's number; CLOSED while the caller writes the next one
    atomic_int inside;  // workers reading the current job's fields (the caller waits for none before writing)
    atomic_int next;    // its next unclaimed chunk
    atomic_int done;    // its chunks computed
    atomic_int sleeping;
    ember_rows_fn fn;
    const void *args;
    int n, chunks;
    int gang;           // 1: chunk c is computed by thread c, all at once (ember_gang)
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .active = 1};

static _Thread_local int in_chunk;  // this thread is computing a chunk (a worker always is while in work)

// Claim and compute chunks of the current job until none is left (a gang's: this thread's one).
static void work(int thread) {
    if (pool.gang) {
        pool.fn(pool.args, thread, thread + 1, thread);
        atomic_fetch_add(&pool.done, 1);
        return;
    }
    for (;;) {
        int c = atomic_fetch_add(&pool.next, 1);
        if (c >= pool.chunks)
            return;
        long r0 = (long)pool.n * c / pool.chunks, r1 = (long)pool.n * (c + 1) / pool.chunks;
        pool.fn(pool.args, (int)r0, (int)r1, thread);
        atomic_fetch_add(&pool.done, 1);
    }
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

// the job number when each worker was started: a worker whose thread first ran after the next job was posted
// would otherwise take that job as seen, and miss it (a gang would then wait for it for ever)
static int born_gen[PARALLEL_MAX_THREADS];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg, seen = born_gen[id];
    in_chunk = 1;
    for (;;) {
        int g, spin = 0;
        int64_t idle_since = -1;
        while ((g = atomic_load(&pool.gen)) == seen || g == CLOSED) {
            CPU_PAUSE();
            if (++spin % CLOCK_EVERY)
                continue;
            int64_t t = now_ns();
            if (idle_since < 0)
                idle_since = t;
            if (t - idle_since < IDLE_NS) {
                sched_yield();  // a runnable thread on this core (BLAS's, between our jobs) goes first
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleeping, 1);
            while ((g = atomic_load(&pool.gen)) == seen || g == CLOSED)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleeping, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = g;
        atomic_fetch_add(&pool.inside, 1);
        // (a worker beyond the count in use sits a job out; a gang's chunks are one per thread)
        if (atomic_load(&pool.gen) == g && id < (pool.gang ? pool.chunks : pool.active))
            work(id);
        atomic_fetch_sub(&pool.inside, 1);
    }
    return 0;
}

static void after_fork_in_child(void) {  // the child has only the thread that forked
    pthread_mutex_init(&pool.lock, 0);
    pthread_cond_init(&pool.wake, 0);
    pool.workers = 0;
    pool.active = 1;
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.inside, 0);
    atomic_store(&pool.sleeping, 0);
}

// Start workers until there are n (never stopping any); how many there are.
static int start_workers(int n) {
    pthread_mutex_lock(&pool.lock);
    while (pool.workers < n) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        born_gen[pool.workers + 1] = atomic_load(&pool.gen);
        int rc = pthread_create(&th, &attr, worker, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.workers++;
    }
    int got = pool.workers;
    pthread_mutex_unlock(&pool.lock);
    return got;
}

// Use n threads (1 <= n <= PARALLEL_MAX_THREADS), starting workers until there are n - 1 (never stopping any);
// returns how many threads jobs now use.
__attribute__((visibility("default")))
int ember_threads(int n) {
    static int registered;
    if (!registered) {
        pthread_atfork(0, 0, after_fork_in_child);
        registered = 1;
    }
    n = n < 1 ? 1 : n > PARALLEL_MAX_THREADS ? PARALLEL_MAX_THREADS : n;
    start_workers(n - 1);
    pool.active = n < pool.workers + 1 ? n : pool.workers + 1;
    return pool.active;
}

int ember_parallel_threads(void) { return pool.active; }

// A job run by its caller, who holds pool.busy. Its fields are written while its number reads CLOSED and no worker
// is inside the last one: a worker that saw the last job late finds its chunks all claimed (or, a gang's, its
// number gone) and leaves without reading the new fields half-written. Sleeping workers are woken; the caller
// computes its share, then waits for the last chunk spinning, then yielding the CPU.
static void run_job(ember_rows_fn fn, const void *args, int n, int chunks, int gang) {
    static int number;
    atomic_store(&pool.gen, CLOSED);
    for (int spin = 0; atomic_load(&pool.inside) > 0; spin++)
        spin < SPIN ? CPU_PAUSE() : sched_yield();
    pool.fn = fn;
    pool.args = args;
    pool.n = n;
    pool.chunks = chunks;
    pool.gang = gang;
    atomic_store(&pool.done, 0);
    atomic_store(&pool.next, 0);
    number = (number + 1) & 0x3fffffff;
    atomic_store(&pool.gen, number);
    if (atomic_load(&pool.sleeping) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    in_chunk = 1;
    work(0);
    in_chunk = 0;
    for (int spin = 0; atomic_load(&pool.done) < chunks; spin++)
        spin < SPIN ? CPU_PAUSE() : sched_yield();
    atomic_store(&pool.busy, 0);
}

int ember_parallel(ember_rows_fn fn, const void *args, int n, int chunks) {
    int expected = 0;
    if (pool.active <= 1 || chunks < 2 || n < 2 || !atomic_compare_exchange_strong(&pool.busy, &expected, 1)) {
        fn(args, 0, n, 0);
        return 0;
    }
    run_job(fn, args, n, chunks, 0);
    return 0;
}

// ---------------------------------------------------------------------------------------------- a gang

typedef struct {
    ember_rows_fn fn;
    const void *args;
    int chunk;
} own_thread;

static void *run_own(void *p) {
    const own_thread *t = (const own_thread *)p;
    t->fn(t->args, t->chunk, t->chunk + 1, t->chunk);
    return 0;
}

// Chunks [0, n) each on a thread of its own, all at once (threads made for this call and joined): a gang the pool
// cannot run (asked for from inside a chunk, where the pool is taken by that chunk's job; more chunks than the
// pool has threads; workers that could not be started).
static void gang_on_own_threads(ember_rows_fn fn, const void *args, int n) {
    pthread_t *th = malloc(n * sizeof *th);
    own_thread *t = malloc(n * sizeof *t);
    char *made = calloc(n, 1);
    for (int c = 1; c < n; c++) {
        t[c] = (own_thread){fn, args, c};
        made[c] = th && t && made && pthread_create(&th[c], 0, run_own, &t[c]) == 0;
        if (!made[c])  // (no thread to be had: a chunk that waits for a later one then waits for ever)
            fn(args, c, c + 1, c);
    }
    fn(args, 0, 1, 0);
    for (int c = 1; c < n; c++)
        if (made && made[c])
            pthread_join(th[c], 0);
    free(th), free(t), free(made);
}

// Chunk c of [0, n) computed by thread c, the n at once, for work whose chunks wait for one another (OpenBLAS's
// GEMM threads exchange packed panels). Workers are started as needed (beyond the count in use for the kernels'
// jobs, which this does not change); while another thread's job holds the pool, this waits for it.
static void ember_gang(ember_rows_fn fn, const void *args, int n) {
    if (n <= 1) {
        if (n == 1)
            fn(args, 0, 1, 0);
        return;
    }
    if (in_chunk || n > PARALLEL_MAX_THREADS || start_workers(n - 1) < n - 1) {
        gang_on_own_threads(fn, args, n);
        return;
    }
    for (int spin = 0, expected = 0; !atomic_compare_exchange_weak(&pool.busy, &expected, 1); spin++, expected = 0)
        spin < SPIN ? CPU_PAUSE() : sched_yield();
    run_job(fn, args, n, n, 1);
}

// OpenBLAS's threads callback (cblas.h's openblas_threads_callback): numjobs jobs of jobdata_elsize bytes at
// jobdata, job i as dojob(i, job i, dojob_data), all at once; i is the thread OpenBLAS's per-thread buffers are
// picked by. Synchronous whatever `sync` says (OpenBLAS asks for 1).
typedef void (*blas_dojob)(int thread, void *job, int data);
typedef struct {
    blas_dojob dojob;
    char *jobs;
    size_t size;
    int data;
} blas_jobs;

static void blas_job_rows(const void *p, int r0, int r1, int thread) {
    const blas_jobs *j = (const blas_jobs *)p;
    (void)thread;
    for (int r = r0; r < r1; r++)
        j->dojob(r, j->jobs + (size_t)r * j->size, j->data);
}

__attribute__((visibility("default")))
void ember_blas_jobs(int sync, blas_dojob dojob, int numjobs, size_t jobdata_elsize, void *jobdata, int dojob_data) {
    (void)sync;
    blas_jobs j = {dojob, (char *)jobdata, jobdata_elsize, dojob_data};
    ember_gang(blas_job_rows, &j, numjobs);
}
