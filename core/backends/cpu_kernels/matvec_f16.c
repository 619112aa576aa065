// y = W x for a weight stored as IEEE halves, input-major ((in, out) rows `lead` halves apart): matvec_f32.h's
// matvec_f16_input_major, threaded. Every half is exactly a float, so y has the bits ember_matvec_f32 gives on
// the same weight in float32: a large re-stored weight whose values are all halves (Whisper's tied LM head, a
// float16 checkpoint) is streamed at half the memory traffic a token. Native only (the page's head runs on its
// pool).
#include <stdint.h>

#include "fvec.h"  // (EMBER_EXPORT, simd.h, half.h)
#include "matvec_f32.h"
#include "parallel.h"

typedef struct {
    const uint16_t *wt;
    long lead;
    int rows, cols;
    const float *x;
    float *y;
} f16_job;

static void f16_rows(const void *p, int r0, int r1, int thread) {  // (parallel.h) blocks of 8 outputs
    const f16_job *j = (const f16_job *)p;
    (void)thread;
    int o1 = 8 * r1 < j->rows ? 8 * r1 : j->rows;
    matvec_f16_input_major(j->wt, j->lead, j->x, j->cols, j->y, 8 * r0, o1);
}

// y (rows) = x (cols) @ wt (cols, rows, `lead` halves a row), split between threads by blocks of 8 outputs in ~4
// chunks (matvec_f32.h's MATVEC_HEAD_CHUNK_WORK: a thread streams long pieces of each input's row). 0, -1 for cols
// not a multiple of 8, or PARALLEL_LOST.
EMBER_EXPORT(ember_matvec_f16)
int ember_matvec_f16(const uint16_t *wt, long lead, int rows, int cols, const float *x, float *y) {
    if (cols % 8 != 0)
        return -1;
    f16_job j = {wt, lead, rows, cols, x, y};
    int blocks = (rows + 7) / 8;
    int chunks = ember_chunks_sized(blocks, 16L * cols, PARALLEL_MIN_WORK, MATVEC_HEAD_CHUNK_WORK);
    return ember_parallel(f16_rows, &j, blocks, chunks);
}
