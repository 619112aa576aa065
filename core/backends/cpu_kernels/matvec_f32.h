// y = W x for a float32 weight stored input-major (the CPU backend's nn.Linear layout: W^T, (in, out) rows `lead`
// floats apart), for output rows [o0, o1), cols a multiple of 8: decode.c's and decode_xattn.c's float32 matvecs.
//
// Each output is sum_i x[i] W^T[i, o] added in input order from 0, a multiply then an add per input (no fused
// multiply-add), as the plain loop `for i: for o: y[o] += x[i] wt[i][o]` computes it: the same bits on every
// target and for any split of the rows between threads. What changes is the memory traffic: eight inputs' rows
// are streamed a pass over y (eight sequential streams the prefetcher follows, y read and written once per eight
// inputs instead of once per input), which is what a token of a small float32 model waits on.
//
// With AVX-512 the outputs go 16 at a time (fvec.h's fw: each lane's steps are f8's, so the bits stay; stories15M's
// decode 1.2x the tokens a second on one thread). MATVEC_INPUT_MAJOR(name, type, ...) makes the loop for another
// stored type whose values are exact floats: matvec_f16_input_major reads IEEE halves (a float16 checkpoint's
// weights: half the bytes, the same sums and so the same bits).
#pragma once
#include <stdint.h>

#include "fvec.h"  // (simd.h, half.h; fw: 16 lanes with AVX-512)

// The main loop on vector T (its functions V##_..., VL lanes, loadv reading VL stored values as floats); outputs
// left after it go 8 at a time (load8), then one at a time (load1): every lane and output gets the same steps.
#define MATVEC_SPLATS(T, V, v)                                                                                 \
    T v##0 = V##_splat(x[i]), v##1 = V##_splat(x[i + 1]), v##2 = V##_splat(x[i + 2]), v##3 = V##_splat(x[i + 3]); \
    T v##4 = V##_splat(x[i + 4]), v##5 = V##_splat(x[i + 5]), v##6 = V##_splat(x[i + 6]);                      \
    T v##7 = V##_splat(x[i + 7]);
#define MATVEC_STEP(T, V, load, v)                                                                             \
    T a = V##_load(y + o);                                                                                     \
    a = V##_add(a, V##_mul(v##0, load(w0 + o)));                                                               \
    a = V##_add(a, V##_mul(v##1, load(w1 + o)));                                                               \
    a = V##_add(a, V##_mul(v##2, load(w2 + o)));                                                               \
    a = V##_add(a, V##_mul(v##3, load(w3 + o)));                                                               \
    a = V##_add(a, V##_mul(v##4, load(w4 + o)));                                                               \
    a = V##_add(a, V##_mul(v##5, load(w5 + o)));                                                               \
    a = V##_add(a, V##_mul(v##6, load(w6 + o)));                                                               \
    a = V##_add(a, V##_mul(v##7, load(w7 + o)));                                                               \
    V##_store(y + o, a);
#define MATVEC_INPUT_MAJOR(name, type, T, V, VL, loadv, load8, load1)                                          \
    static inline void name(const type *wt, long lead, const float *x, int cols, float *y, int o0, int o1) {    \
        for (int o = o0; o < o1; o++)                                                                          \
            y[o] = 0.0f;                                                                                       \
        for (int i = 0; i < cols; i += 8) {                                                                    \
            const type *w0 = wt + (long)i * lead, *w1 = w0 + lead, *w2 = w1 + lead, *w3 = w2 + lead;           \
            const type *w4 = w3 + lead, *w5 = w4 + lead, *w6 = w5 + lead, *w7 = w6 + lead;                     \
            MATVEC_SPLATS(T, V, x)                                                                             \
            int o = o0;                                                                                        \
            for (; o + VL <= o1; o += VL) {                                                                    \
                MATVEC_STEP(T, V, loadv, x)                                                                    \
            }                                                                                                  \
            if (VL > 8 && o + 8 <= o1) {                                                                       \
                MATVEC_SPLATS(f8, f8, e)                                                                       \
                MATVEC_STEP(f8, f8, load8, e)                                                                  \
                o += 8;                                                                                        \
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
MATVEC_INPUT_MAJOR(matvec_f32_input_major, float, fw, fw, FW, fw_load, f8_load, load1_f32)

static inline f8 load8_f16(const uint16_t *p) {
#if defined(__AVX2__) && defined(__F16C__) && !defined(EMBER_SIMD_SCALAR)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    return f8_halves((const uint8_t *)p, 2);
#endif
}
static inline float load1_f16(const uint16_t *p) { return f16_to_f32((const uint8_t *)p); }
#if FW == 16  // (AVX-512: 16 halves a vector, converted in one instruction; each lane's steps are f8's)
static inline fw loadw_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#else
#define loadw_f16 load8_f16
#endif
MATVEC_INPUT_MAJOR(matvec_f16_input_major, uint16_t, fw, fw, FW, loadw_f16, load8_f16, load1_f16)

// A decode step's input-major weight split between threads by inputs: MATVEC_SEG_INPUTS inputs a unit, each unit's
// partial sums of every output (a contiguous band of the weight, what the prefetcher streams) in part (units, rows);
// by outputs, a thread read a short piece of every input's row and the stories15M shape gained nothing from a second
// thread. matvec_sum_partials adds them in unit order after the job: the same bits on any thread count. 48 inputs:
// stories15M's 288-wide inputs in 6 units (an even split on two threads), 1-3% faster a token than 32 on one thread
// and 2-7% on two; 64 was 5% faster on one thread but 3% slower on two (units of 64, 64, 64, 64, 32).
#define MATVEC_SEG_INPUTS 48

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

// The same products from a copy of the weight laid out in blocks of MATVEC_BLOCK outputs: wb (ceil(rows / 16), cols,
// 16), block b holding W[16 b + j, i] at wb[b][i][j] (rows past the last zero). A block of outputs is one contiguous
// stream the prefetcher follows to its end, where the input-major loop reads eight short rows of every input's row
// a pass (the stories15M shape's 288-768 outputs: ~14 GB/s on a Zen 4 core, the long rows of an LM head ~29).
// Each output is summed as matvec_f32_input_major sums it over inputs [s, s + seg) from 0, and those segments' sums
// added in order as matvec_sum_partials adds them (seg >= cols: one chain): the same bits as the input-major weight
// split by segments of seg inputs. Four blocks go at once (four independent chains of adds in flight).
#define MATVEC_BLOCK 16
#define MATVEC_BLOCK_VECS (MATVEC_BLOCK / FW)
#define MATVEC_BLOCKS_AT_ONCE (FW == 16 ? 4 : 2)  // (AVX2: 2 x 2 chains and their totals in 16 registers)

__attribute__((always_inline)) static inline void matvec_f32_blocks(const float *wb, int cols, int seg, const float *x,
                                                                   float *y, int b, int nb, int rows) {
    // (nb is a constant where this is inlined: the arrays are registers)
    fw total[MATVEC_BLOCKS_AT_ONCE][MATVEC_BLOCK_VECS], acc[MATVEC_BLOCKS_AT_ONCE][MATVEC_BLOCK_VECS];
    const float *w = wb + (long)b * cols * MATVEC_BLOCK;
    long stride = (long)cols * MATVEC_BLOCK;
    for (int s = 0; s < cols; s += seg) {
        int e = s + seg < cols ? s + seg : cols;
        for (int k = 0; k < nb; k++)
            for (int v = 0; v < MATVEC_BLOCK_VECS; v++)
                acc[k][v] = fw_zero();
        for (int i = s; i < e; i++) {
            fw xi = fw_splat(x[i]);
            const float *wi = w + (long)i * MATVEC_BLOCK;
            for (int k = 0; k < nb; k++)
                for (int v = 0; v < MATVEC_BLOCK_VECS; v++)
                    acc[k][v] = fw_add(acc[k][v], fw_mul(xi, fw_load(wi + k * stride + v * FW)));
        }
        for (int k = 0; k < nb; k++)
            for (int v = 0; v < MATVEC_BLOCK_VECS; v++)
                total[k][v] = s ? fw_add(total[k][v], acc[k][v]) : acc[k][v];
    }
    for (int k = 0; k < nb; k++) {
        int o = (b + k) * MATVEC_BLOCK, n = rows - o < MATVEC_BLOCK ? rows - o : MATVEC_BLOCK;
        if (n == MATVEC_BLOCK) {
            for (int v = 0; v < MATVEC_BLOCK_VECS; v++)
                fw_store(y + o + v * FW, total[k][v]);
        } else {
            float tmp[MATVEC_BLOCK];
            for (int v = 0; v < MATVEC_BLOCK_VECS; v++)
                fw_store(tmp + v * FW, total[k][v]);
            for (int j = 0; j < n; j++)
                y[o + j] = tmp[j];
        }
    }
}

// y[o0:o1] of a blocked weight (o0 a multiple of MATVEC_BLOCK; o1 one too, or the weight's rows)
static inline void matvec_f32_blocked(const float *wb, int cols, int seg, const float *x, float *y, int o0, int o1,
                                      int rows) {
    int b = o0 / MATVEC_BLOCK, end = (o1 + MATVEC_BLOCK - 1) / MATVEC_BLOCK;
    for (; b + MATVEC_BLOCKS_AT_ONCE <= end; b += MATVEC_BLOCKS_AT_ONCE)
        matvec_f32_blocks(wb, cols, seg, x, y, b, MATVEC_BLOCKS_AT_ONCE, rows);
    for (; b < end; b++)
        matvec_f32_blocks(wb, cols, seg, x, y, b, 1, rows);
}
