// y = W x for a float32 weight stored input-major (the CPU backend's nn.Linear layout: W^T, (in, out) rows `lead`
// floats apart), for output rows [o0, o1), cols a multiple of 8: decode.c's and decode_xattn.c's float32 matvecs.
//
// Each output is sum_i x[i] W^T[i, o] added in input order from 0, a multiply then an add per input (no fused
// multiply-add), as the plain loop `for i: for o: y[o] += x[i] wt[i][o]` computes it: the same bits on every
// target and for any split of the rows between threads. What changes is the memory traffic: eight inputs' rows
// are streamed a pass over y (eight sequential streams the prefetcher follows, y read and written once per eight
// inputs instead of once per input), which is what a token of a small float32 model waits on.
//
// MATVEC_INPUT_MAJOR(name, type, load8, load1) makes the loop for another stored type whose values are exact
// floats: matvec_f16_input_major reads IEEE halves (a float16 checkpoint's weights: half the bytes, the same sums
// and so the same bits).
#pragma once
#include <stdint.h>

#include "half.h"
#include "simd.h"

#define MATVEC_INPUT_MAJOR(name, type, load8, load1)                                                          \
    static inline void name(const type *wt, long lead, const float *x, int cols, float *y, int o0, int o1) {    \
        for (int o = o0; o < o1; o++)                                                                          \
            y[o] = 0.0f;                                                                                       \
        for (int i = 0; i < cols; i += 8) {                                                                    \
            const type *w0 = wt + (long)i * lead, *w1 = w0 + lead, *w2 = w1 + lead, *w3 = w2 + lead;           \
            const type *w4 = w3 + lead, *w5 = w4 + lead, *w6 = w5 + lead, *w7 = w6 + lead;                     \
            f8 x0 = f8_splat(x[i]), x1 = f8_splat(x[i + 1]), x2 = f8_splat(x[i + 2]), x3 = f8_splat(x[i + 3]); \
            f8 x4 = f8_splat(x[i + 4]), x5 = f8_splat(x[i + 5]), x6 = f8_splat(x[i + 6]);                      \
            f8 x7 = f8_splat(x[i + 7]);                                                                        \
            int o = o0;                                                                                        \
            for (; o + 8 <= o1; o += 8) {                                                                      \
                f8 a = f8_load(y + o);                                                                         \
                a = f8_add(a, f8_mul(x0, load8(w0 + o)));                                                      \
                a = f8_add(a, f8_mul(x1, load8(w1 + o)));                                                      \
                a = f8_add(a, f8_mul(x2, load8(w2 + o)));                                                      \
                a = f8_add(a, f8_mul(x3, load8(w3 + o)));                                                      \
                a = f8_add(a, f8_mul(x4, load8(w4 + o)));                                                      \
                a = f8_add(a, f8_mul(x5, load8(w5 + o)));                                                      \
                a = f8_add(a, f8_mul(x6, load8(w6 + o)));                                                      \
                a = f8_add(a, f8_mul(x7, load8(w7 + o)));                                                      \
                f8_store(y + o, a);                                                                            \
            }                                                                                                  \
            for (; o < o1; o++) {                                                                              \
                float a = y[o];                                                                                \
                a += x[i] * load1(w0 + o);                                                                     \
                a += x[i + 1] * load1(w1 + o);                                                                 \
                a += x[i + 2] * load1(w2 + o);                                                                 \
                a += x[i + 3] * load1(w3 + o);                                                                 \
                a += x[i + 4] * load1(w4 + o);                                                                 \
                a += x[i + 5] * load1(w5 + o);                                                                 \
                a += x[i + 6] * load1(w6 + o);                                                                 \
                a += x[i + 7] * load1(w7 + o);                                                                 \
                y[o] = a;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
    }

static inline float load1_f32(const float *p) { return *p; }
MATVEC_INPUT_MAJOR(matvec_f32_input_major, float, f8_load, load1_f32)

static inline f8 load8_f16(const uint16_t *p) {
#if defined(__AVX2__) && defined(__F16C__) && !defined(EMBER_SIMD_SCALAR)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    return f8_halves((const uint8_t *)p, 2);
#endif
}
static inline float load1_f16(const uint16_t *p) { return f16_to_f32((const uint8_t *)p); }
MATVEC_INPUT_MAJOR(matvec_f16_input_major, uint16_t, load8_f16, load1_f16)

// A decode step's input-major weight split between threads by inputs: MATVEC_SEG_INPUTS inputs a unit, each unit's
// partial sums of every output (a contiguous band of the weight, what the prefetcher streams) in part (units, rows);
// by outputs, a thread read a short piece of every input's row and the stories15M shape gained nothing from a second
// thread. matvec_sum_partials adds them in unit order after the job: the same bits on any thread count.
#define MATVEC_SEG_INPUTS 32

// An LM head's row-vector product (ember_matvec_f32, ember_matvec_f16) is cut into ~4 chunks of this much work
// (stories15M's 32000 x 288, Whisper's 51864 x 384): in 64, a chunk read 288 pieces of 2 KB, each in another page
// of the weight, and a stories15M token took 1.2x the time on two threads (8 chunks: 1.04x, 2: 0.98x)
#define MATVEC_HEAD_CHUNK_WORK (1L << 23)

static inline void matvec_sum_partials(const float *part, int units, int rows, const float *bias, float *y) {
    for (int o = 0; o < rows; o++) {
        float t = part[o];
        for (int s = 1; s < units; s++)
            t += part[(long)s * rows + o];
        y[o] = bias ? t + bias[o] : t;
    }
}
