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

// h[0:n] = w[0:n] as halves where every value is exactly a half (a float16 checkpoint's weight, widened at load):
// 0, or -1 at the first value that is not (a float32 model's weight: told in its first vector; h then holds
// nothing useful). A NaN is not exact (as numpy's array_equal has it). One pass with the CPU's conversions (F16C),
// where numpy's cast there and back took ~14x as long (Whisper tiny.en's decoder and tied head: ~0.16 s of a cold
// request).
EMBER_EXPORT(ember_f16_exact_copy)
int ember_f16_exact_copy(const float *w, long n, uint16_t *h) {
    long i = 0;
#if defined(__AVX512F__) && !defined(EMBER_SIMD_SCALAR)
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(w + i);
        __m256i q = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm512_cmp_ps_mask(_mm512_cvtph_ps(q), v, _CMP_EQ_OQ) != 0xFFFF)
            return -1;
        _mm256_storeu_si256((__m256i *)(h + i), q);
    }
#elif defined(__AVX__) && defined(__F16C__) && !defined(EMBER_SIMD_SCALAR)
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(w + i);
        __m128i q = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_cvtph_ps(q), v, _CMP_EQ_OQ)) != 0xFF)
            return -1;
        _mm_storeu_si128((__m128i *)(h + i), q);
    }
#endif
    for (; i < n; i++) {
        uint16_t q = f32_to_f16(w[i]);
        uint8_t b[2] = {(uint8_t)q, (uint8_t)(q >> 8)};
        if (!(f16_to_f32(b) == w[i]))
            return -1;
        h[i] = q;
    }
    return 0;
}
