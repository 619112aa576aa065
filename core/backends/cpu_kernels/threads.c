// Worker threads for the native build of the kernels (the page's wasm has none): the calling thread and
// `threads - 1` workers each compute a slice of a matmul's output rows. Every output row is computed by the same
// code whichever thread runs it, so the result does not depend on the number of threads.
//
// A decoded token makes ~130 matmuls of 0.05-20 ms with a few us of Python between them, so a worker spins (with a
// pause) for a while after each job, as llama.cpp's do, and sleeps on a condition variable only after ~0.1 ms of
// nothing; the caller wakes sleepers only when there are any. A forked child has no workers (pthread_atfork).
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define CPU_PAUSE() __asm__ volatile("yield")
#else
#define CPU_PAUSE() ((void)0)
#endif

#define MAX_THREADS 64
#define SPIN 512  // pauses before a worker sleeps or the caller yields (~0.1 ms)

int ember_q8_dot(int type, int m, int n, int k, const uint8_t *w, const void *act, float *y, int ldy);
long ember_q8_act_bytes(int type, int m, int k);

// a row-range kernel (conv.c, attention.c, rows.c): fn(arg, r0, r1) computes rows [r0, r1) of its output
typedef void (*ember_rows_fn)(const void *arg, int r0, int r1);

typedef struct {
    int type, m, n, k, ldy, chunks;
    long row_bytes;
    const uint8_t *w;
    const void *act;
    float *y;
    ember_rows_fn fn;  // set: a row-range job over n rows, else ember_q8_dot's
    const void *arg;
} job_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int workers;        // started
    atomic_int gen;     // the current job's number
    atomic_int next;    // its next unclaimed chunk
    atomic_int done;    // its chunks computed
    atomic_int sleeping;
    job_t job;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

// Claim and compute chunks of the current job until none is left. Chunks are claimed, not assigned: a thread
// the OS has not scheduled yet (another process, llama.cpp's or OpenBLAS's spinning threads on a 2-core machine)
// leaves its share to the others instead of holding up the caller.
static void work(void) {
    for (;;) {
        int c = atomic_fetch_add(&pool.next, 1);
        job_t *j = &pool.job;
        if (c >= j->chunks)
            return;
        long n0 = (long)j->n * c / j->chunks, n1 = (long)j->n * (c + 1) / j->chunks;
        if (j->fn)
            j->fn(j->arg, (int)n0, (int)n1);
        else
            ember_q8_dot(j->type, j->m, (int)(n1 - n0), j->k, j->w + n0 * j->row_bytes, j->act, j->y + n0, j->ldy);
        atomic_fetch_add(&pool.done, 1);
    }
}

static void *worker(void *arg) {
    (void)arg;
    int seen = atomic_load(&pool.gen);
    for (;;) {
        int g, spin = 0;
        while ((g = atomic_load(&pool.gen)) == seen) {
            if (++spin < SPIN) {
                CPU_PAUSE();
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleeping, 1);
            while (atomic_load(&pool.gen) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleeping, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = g;
        work();
    }
    return 0;
}

static void after_fork_in_child(void) {  // the child has only the thread that forked
    pthread_mutex_init(&pool.lock, 0);
    pthread_cond_init(&pool.wake, 0);
    pool.workers = 0;
    atomic_store(&pool.sleeping, 0);
}

// Start workers until there are n - 1 (n <= MAX_THREADS); returns how many threads matmuls now use.
__attribute__((visibility("default")))
int ember_threads(int n) {
    static int registered;
    if (!registered) {
        pthread_atfork(0, 0, after_fork_in_child);
        registered = 1;
    }
    n = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    while (pool.workers < n - 1) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &attr, worker, 0);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.workers++;
    }
    return pool.workers + 1;
}

// Run the current job (pool.job set) on the caller and the workers; returns when every chunk is computed.
static void run_job(int chunks) {
    atomic_store(&pool.done, 0);
    atomic_store(&pool.next, 0);
    atomic_fetch_add(&pool.gen, 1);
    if (atomic_load(&pool.sleeping) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    work();
    for (int spin = 0; atomic_load(&pool.done) < chunks; spin++) {
        if (spin < SPIN)
            CPU_PAUSE();
        else
            sched_yield();
    }
}

// ember_q8_dot with W's n rows cut into chunks (about 4 per thread, of at least 16 rows) that the caller and the
// workers claim (row_bytes: bytes of one row of W). Not reentrant: one caller at a time (the Python side holds a
// lock). The caller waits for the last chunk spinning, then yielding the CPU to whoever computes it.
__attribute__((visibility("default")))
int ember_q8_dot_parallel(int type, int m, int n, int k, const uint8_t *w, long row_bytes, const void *act, float *y,
                          int ldy, int threads) {
    if (ember_q8_act_bytes(type, m, k) < 0)
        return -1;
    threads = threads > pool.workers + 1 ? pool.workers + 1 : threads;
    int chunks = 4 * threads < n / 16 ? 4 * threads : n / 16;
    if (threads <= 1 || chunks < 2)
        return ember_q8_dot(type, m, n, k, w, act, y, ldy);
    pool.job = (job_t){type, m, n, k, ldy, chunks, row_bytes, w, act, y, 0, 0};
    run_job(chunks);
    return 0;
}

// fn(arg, r0, r1) over rows [0, n), cut into about 4 chunks per thread that the caller and the workers claim; the
// kernel computes each row alike in any range, so the result does not depend on `threads`. Not reentrant (the
// Python side holds the pool's lock).
__attribute__((visibility("default")))
int ember_parallel_rows(ember_rows_fn fn, const void *arg, int n, int threads) {
    threads = threads > pool.workers + 1 ? pool.workers + 1 : threads;
    int chunks = 4 * threads < n ? 4 * threads : n;
    if (threads <= 1 || chunks < 2) {
        if (n > 0)
            fn(arg, 0, n);
        return 0;
    }
    pool.job = (job_t){0, 0, n, 0, 0, chunks, 0, 0, 0, 0, fn, arg};
    run_job(chunks);
    return 0;
}
