// ember_parallel (parallel.h) for the Pyodide side module, which has no threads: every job on the calling thread.
// (The page's threads are the kernel pool's: pool.c, a module of its own.)
#include "parallel.h"

int ember_parallel(ember_rows_fn fn, const void *args, int n, int chunks) {
    (void)chunks;
    fn(args, 0, n, 0);
    return 0;
}

int ember_parallel_threads(void) { return 1; }
