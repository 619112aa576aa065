// Rows of a kernel's output split between threads: one interface, three builds of it.
//
//   threads.c   native: the calling thread and pthread workers (cpu_native_kernels.py)
//   pool.c      the page's kernel pool: the same kernels in a wasm module over a shared WebAssembly.Memory,
//               instantiated in Web Workers (or Node worker_threads) and in the Pyodide worker, which calls
//               (cpu_pool.py, web/pool.js)
//   serial.c    the Pyodide side module (no threads): every chunk on the calling thread
//
// A job is `fn` over rows [0, n) cut into `chunks` ranges, chunk c = [n c / chunks, n (c + 1) / chunks); threads
// claim chunks (a thread the OS has not scheduled leaves its share to the others). The cut depends on the job
// only (ember_chunks), never on the thread count, and every row is computed by the same code whichever thread
// runs it: a kernel whose output rows do not depend on one another gives the same bits on any number of threads.
//
// Threading a kernel (the recipe; q8dot.c's ember_q8_matmul, gemm.c's ember_sgemm, decode.c's and decode_xattn.c's
// matvecs, conv.c, attention.c and rows.c follow it): put what one range of output rows needs in a struct, write
//     static void my_rows(const void *args, int r0, int r1, int thread) { ... rows [r0, r1) ... }
// and call  rc = ember_parallel(my_rows, &args, n, ember_chunks(n, work_per_row));  where the old loop was.
// `thread` (0 = the caller, < PARALLEL_MAX_THREADS) picks per-thread scratch; the rows a call writes must not overlap
// another range's; a nonzero rc (the page's pool lost a worker mid-job: pool.c) means the output is incomplete
// and is returned to the caller as an error. Nested calls (a kernel calling ember_parallel from inside a chunk)
// run serially on the thread that makes them.
#pragma once

#define PARALLEL_MAX_THREADS 64
#define PARALLEL_MIN_WORK (1L << 18)    // multiply-adds below which a job stays on the calling thread
#define PARALLEL_CHUNK_WORK (1L << 16)  // about this much work per chunk (~10-50 us: a claim costs ~0.1 us)
#define PARALLEL_MAX_CHUNKS 64

#define PARALLEL_LOST (-2)  // ember_parallel's error: a worker died or stopped answering mid-job

typedef void (*ember_rows_fn)(const void *args, int r0, int r1, int thread);

// Run fn over rows [0, n) in `chunks` ranges, on the calling thread and the workers; 0, or PARALLEL_LOST.
int ember_parallel(ember_rows_fn fn, const void *args, int n, int chunks);

// How many threads a job may use now (1: serial).
int ember_parallel_threads(void);

// The chunks of a job of n rows of `per_row` multiply-adds each: 1 below min_work, else ~chunk_work each, at most
// PARALLEL_MAX_CHUNKS and at most n. A function of the job alone (see above).
static inline int ember_chunks_sized(long n, long per_row, long min_work, long chunk_work) {
    long work = n * per_row;
    if (n < 2 || work < min_work)
        return 1;
    long c = work / chunk_work;
    c = c > PARALLEL_MAX_CHUNKS ? PARALLEL_MAX_CHUNKS : c;
    return (int)(c > n ? n : c);
}

static inline int ember_chunks(long n, long per_row) {
    return ember_chunks_sized(n, per_row, PARALLEL_MIN_WORK, PARALLEL_CHUNK_WORK);
}

// A decode step's jobs (decode.c, decode_xattn.c) come one after another with the workers spinning between them
// (threads.c, pool.c), so a job there pays off on threads from less work than PARALLEL_MIN_WORK (which allows for
// waking a sleeping worker).
#define PARALLEL_STEP_MIN_WORK (1L << 15)

// A step's job of a few rows (attention's heads) split a row a chunk, from PARALLEL_STEP_MIN_WORK in all.
static inline int ember_step_chunks_each(long n, long per_row) {
    return ember_chunks_sized(n, per_row, PARALLEL_STEP_MIN_WORK, 1);
}
