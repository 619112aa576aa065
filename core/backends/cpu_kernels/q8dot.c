// Quantized matmul as llama.cpp computes it on a CPU: y = x W^T with W kept as GGML blocks and x quantized to
// 8 bits per block (GGML's "vec_dot_type"), integer dot products per block, one float scale step per block.
//
//   weights              activations (x86 llama.cpp's own quantizer, reproduced bit for bit)
//   Q4_0, Q5_0, Q8_0     Q8_0: per 32, d = f16(amax / 127), q = round_even(x * 127 / amax)
//   Q4_1, Q5_1           Q8_1: Q8_0 plus s = f16(d * sum q) (the min's term)
//   Q4_K, Q5_K, Q6_K     Q8_K: per 256, d = max / -127 (max: the x of largest |x|, first one), q = round_even(x / d)
//                        clamped to 127, and sums of q per 16 (the mins' term)
//
// Every target (wasm SIMD128, AVX2, SSSE3, plain C: simd.h) computes the same integers, and the float steps below
// are scalar, in one order, with no contraction into FMAs (the build passes -ffp-contract=off): the page and the
// desktop, and ember.quant.q8dot's numpy version of these steps, give the same bits.
//   Q8_0 types: p[b % 8] += (dw * dx) * (float)isum                   per block b of 32
//   Q8_1 types: p[b % 8] += (dw * dx) * (float)isum + mw * sx         per block b of 32
//               y = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
//   K types:    y += (dw * dx) * (float)sum_j sc_j isum_j ; y -= (dmin * dx) * (float)sum_j mn_j bsum_j   per 256
// Freestanding: no libc; the caller passes every buffer (act: ember_q8_act_bytes). Type ids are GGML's.
#include <stdint.h>

#include "simd.h"

#if defined(__wasm__)
#define EMBER_EXPORT(name) __attribute__((export_name(#name)))
#else
#define EMBER_EXPORT(name) __attribute__((visibility("default")))
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };
enum { ACT_Q8_0, ACT_Q8_1, ACT_Q8_K };

static int act_of(int type) {  // the activations' block type for a weight type, -1 for a type without a kernel
    switch (type) {
    case Q4_0: case Q5_0: case Q8_0: return ACT_Q8_0;
    case Q4_1: case Q5_1: return ACT_Q8_1;
    case Q4_K: case Q5_K: case Q6_K: return ACT_Q8_K;
    default: return -1;
    }
}

// ---------------------------------------------------------------------------------------------- activations
// act: m rows of  q (k xact: int8, int16 in wasm) | d (one float per block) | s (Q8_1: a float per 32) or bsums (Q8_K: an int32 per 16),
// each part a whole number of 16 bytes

typedef struct {
    xact *q;
    float *d, *s;
    int32_t *bsum;
} act_t;

static long align16(long n) { return (n + 15) & ~15L; }

static act_t act_at(void *base, int kind, int m, int k) {
    uint8_t *p = (uint8_t *)base;
    act_t a;
    long nd = kind == ACT_Q8_K ? k / 256 : k / 32;
    a.q = (xact *)p;
    a.d = (float *)(p + align16((long)m * k * (long)sizeof(xact)));
    a.s = (float *)((uint8_t *)a.d + align16((long)m * nd * 4));
    a.bsum = (int32_t *)a.s;
    return a;
}

static long act_bytes(int kind, int m, int k) {
    long nd = kind == ACT_Q8_K ? k / 256 : k / 32, ns = kind == ACT_Q8_K ? k / 16 : kind == ACT_Q8_1 ? k / 32 : 0;
    return align16((long)m * k * (long)sizeof(xact)) + align16((long)m * nd * 4) + align16((long)m * ns * 4);
}

static inline int nearest_int(float v) {  // ggml's: round half to even through the float adder, |v| <= 2^22
    float t = v + 12582912.0f;
    int32_t i;
    __builtin_memcpy(&i, &t, 4);
    return (i & 0x007FFFFF) - 0x00400000;
}

static void quantize_q8_0(const float *x, int k, xact *q, float *d, float *s) {  // s: Q8_1's, or 0
    for (int b = 0; b < k / 32; b++, x += 32, q += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float a = __builtin_fabsf(x[i]);
            amax = a > amax ? a : amax;
        }
        float db = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            int v = nearest_int(x[i] * id);
            q[i] = (xact)v;
            sum += v;
        }
        d[b] = f16_round(db);
        if (s)
            s[b] = f16_round(db * (float)sum);
    }
}

static void quantize_q8_k(const float *x, int k, xact *q, float *d, int32_t *bsum) {
    for (int b = 0; b < k / 256; b++, x += 256, q += 256, bsum += 16) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 256; i++) {
            float a = __builtin_fabsf(x[i]);
            if (a > amax)
                amax = a, max = x[i];
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            for (int i = 0; i < 256; i++) q[i] = 0;
            for (int j = 0; j < 16; j++) bsum[j] = 0;
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) {
                int v = nearest_int(iscale * x[i]);
                v = v < 127 ? v : 127;
                q[i] = (xact)v;
                sum += v;
            }
            bsum[j] = sum;
        }
        d[b] = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------------------------- dot products
// dot_T(R, k, w, a, r0, out): out[r] = (row w of W) . (activation row r0 + r), R (1..4) rows of x per decoded
// weight chunk. The levels of one chunk of 32 (element order) are a v32; sc/mn: a K block's 6-bit scales.

static inline void scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {  // ggml's get_scale_min_k4
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// the 32-element types: levels, and whether the block has a min (Q8_1 activations)
static inline v32 levels_q4_0(const uint8_t *b) { return v32_sub8(v32_nibbles(b + 2), v32_splat8(8)); }
static inline v32 levels_q4_1(const uint8_t *b) { return v32_nibbles(b + 4); }
static inline v32 levels_q5_0(const uint8_t *b) {
    return v32_sub8(v32_or(v32_nibbles(b + 6), v32_fifth(b + 2)), v32_splat8(16));
}
static inline v32 levels_q5_1(const uint8_t *b) { return v32_or(v32_nibbles(b + 8), v32_fifth(b + 4)); }
static inline v32 levels_q8_0(const uint8_t *b) { return v32_load(b + 2); }

// eight partial sums (block b into part b % 8), added as ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)): blocks
// go eight at a time, so eight integer sums are reduced together and each float step is one 8-lane operation;
// the last nb % 8 blocks go one at a time into their lanes
#define DEFINE_DOT32(T, TSIZE, MIN)                                                                            \
    static inline __attribute__((always_inline)) void dot_##T(int R, int k, const uint8_t *w, act_t a, int r0, \
                                                              float *out) {                                    \
        int nb = k / 32, b = 0;                                                                                 \
        f8 part[4];                                                                                             \
        for (int r = 0; r < R; r++)                                                                             \
            part[r] = f8_zero();                                                                                \
        for (; b + 8 <= nb; b += 8) {                                                                           \
            const uint8_t *blk = w + (long)b * TSIZE;                                                           \
            f8 dw = f8_halves(blk, TSIZE), mw = MIN ? f8_halves(blk + 2, TSIZE) : f8_zero();                   \
            for (int r = 0; r < R; r++) {                                                                       \
                long i = (long)(r0 + r) * nb + b;                                                               \
                const xact *xq = a.q + (long)(r0 + r) * k + 32 * b;                                           \
                acc t[8];                                                                                       \
                for (int l = 0; l < 8; l++)                                                                     \
                    t[l] = acc_dot(levels_##T(blk + l * TSIZE), xv_load(xq + 32 * l));                         \
                f8 p = f8_mul(f8_mul(dw, f8_load(a.d + i)), acc_sum8(t));                                       \
                part[r] = f8_add(part[r], MIN ? f8_add(p, f8_mul(mw, f8_load(a.s + i))) : p);                   \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++) {                                                                           \
            float p[8];                                                                                         \
            long row = (long)(r0 + r);                                                                          \
            f8_store(p, part[r]);                                                                               \
            for (int bt = b; bt < nb; bt++) {                                                                   \
                const uint8_t *blk = w + (long)bt * TSIZE;                                                      \
                float d = f16_to_f32(blk) * a.d[row * nb + bt];                                                 \
                float is = (float)acc_sum(acc_dot(levels_##T(blk), xv_load(a.q + row * k + 32 * bt)));        \
                p[bt & 7] += MIN ? d * is + f16_to_f32(blk + 2) * a.s[row * nb + bt] : d * is;                  \
            }                                                                                                   \
            out[r] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));                        \
        }                                                                                                       \
    }

DEFINE_DOT32(q4_0, 18, 0)
DEFINE_DOT32(q4_1, 20, 1)
DEFINE_DOT32(q5_0, 22, 0)
DEFINE_DOT32(q5_1, 24, 1)
DEFINE_DOT32(q8_0, 34, 0)

// the K types: 8 chunks of 32 per block of 256; sc0/sc1: chunk j's scales for its elements 0-15 and 16-31
typedef struct {
    v32 q[8];
    int sc0[8], sc1[8], mn[8];
    float d, dmin;
} kblock_t;

static inline void kblock_q4_k(const uint8_t *b, kblock_t *kb) {  // f16 d | f16 dmin | scales[12] | qs[128]
    kb->d = f16_to_f32(b), kb->dmin = f16_to_f32(b + 2);
    for (int j = 0; j < 8; j++) {
        scale_min_k4(b + 4, j, &kb->sc0[j], &kb->mn[j]);
        kb->sc1[j] = kb->sc0[j];
        kb->q[j] = v32_bits(v32_load(b + 16 + 32 * (j >> 1)), (j & 1) * 4, 0xF);
    }
}

static inline void kblock_q5_k(const uint8_t *b, kblock_t *kb) {  // ... | qh[32] | qs[128]: bit j of qh[l] is the 5th
    kb->d = f16_to_f32(b), kb->dmin = f16_to_f32(b + 2);
    v32 qh = v32_load(b + 16);
    for (int j = 0; j < 8; j++) {
        scale_min_k4(b + 4, j, &kb->sc0[j], &kb->mn[j]);
        kb->sc1[j] = kb->sc0[j];
        kb->q[j] = v32_or(v32_bits(v32_load(b + 48 + 32 * (j >> 1)), (j & 1) * 4, 0xF), v32_shl(v32_bits(qh, j, 1), 4));
    }
}

// ql[128] | qh[64] | i8 scales[16] | f16 d. Chunk j: half h = j / 4, quarter r = j % 4: low 4 bits from
// ql[64 h + 32 (r & 1) ...] (low nibbles for r < 2), 2 high bits from qh[32 h ...] >> 2 r; levels q - 32
static inline void kblock_q6_k(const uint8_t *b, kblock_t *kb) {
    kb->d = f16_to_f32(b + 208), kb->dmin = 0.0f;
    for (int j = 0; j < 8; j++) {
        int h = j >> 2, r = j & 3;
        v32 lo = v32_bits(v32_load(b + 64 * h + 32 * (r & 1)), (r >> 1) * 4, 0xF);
        v32 hi = v32_shl(v32_bits(v32_load(b + 128 + 32 * h), 2 * r, 3), 4);
        kb->q[j] = v32_sub8(v32_or(lo, hi), v32_splat8(32));
        kb->sc0[j] = ((const int8_t *)b)[192 + 2 * j], kb->sc1[j] = ((const int8_t *)b)[193 + 2 * j];
        kb->mn[j] = 0;
    }
}

#define DEFINE_DOTK(T, TSIZE, MIN)                                                                             \
    static inline __attribute__((always_inline)) void dot_##T(int R, int k, const uint8_t *w, act_t a, int r0, \
                                                              float *out) {                                    \
        int nb = k / 256;                                                                                       \
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                \
        for (int b = 0; b < nb; b++) {                                                                          \
            kblock_t kb;                                                                                        \
            kblock_##T(w + (long)b * TSIZE, &kb);                                                               \
            for (int r = 0; r < R; r++) {                                                                       \
                long row = (long)(r0 + r);                                                                      \
                const xact *xq = a.q + row * k + 256 * b;                                                     \
                acc t = acc_zero();                                                                             \
                for (int j = 0; j < 8; j++)                                                                     \
                    t = acc_add(t, acc_dot_scaled(kb.q[j], xv_load(xq + 32 * j), kb.sc0[j], kb.sc1[j]));       \
                float dx = a.d[row * nb + b];                                                                   \
                sum[r] += (kb.d * dx) * (float)acc_sum(t);                                                      \
                if (MIN) {                                                                                      \
                    const int32_t *bs = a.bsum + row * (k / 16) + 16 * b;                                       \
                    int32_t im = 0;                                                                             \
                    for (int j = 0; j < 8; j++)                                                                 \
                        im += kb.mn[j] * (bs[2 * j] + bs[2 * j + 1]);                                           \
                    sum[r] -= (kb.dmin * dx) * (float)im;                                                       \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++)                                                                             \
            out[r] = sum[r];                                                                                    \
    }

DEFINE_DOTK(q4_k, 144, 1)
DEFINE_DOTK(q5_k, 176, 1)
DEFINE_DOTK(q6_k, 210, 0)

// every weight row o against every activation row, 4 activation rows per decoded weight row at a time
#define DEFINE_ROWS(T, TSIZE, BLOCK)                                                                           \
    static void rows_##T(int m, int n, int k, const uint8_t *w, act_t a, float *y, int ldy) {                 \
        long rb = (long)(k / BLOCK) * TSIZE;                                                                    \
        float out[4];                                                                                           \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + o * rb;                                                                     \
            int r = 0;                                                                                          \
            for (; r + 4 <= m; r += 4) {                                                                        \
                dot_##T(4, k, wr, a, r, out);                                                                   \
                for (int i = 0; i < 4; i++) y[(long)(r + i) * ldy + o] = out[i];                                \
            }                                                                                                   \
            for (; r < m; r++) {                                                                                \
                dot_##T(1, k, wr, a, r, out);                                                                   \
                y[(long)r * ldy + o] = out[0];                                                                  \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_ROWS(q4_0, 18, 32)
DEFINE_ROWS(q4_1, 20, 32)
DEFINE_ROWS(q5_0, 22, 32)
DEFINE_ROWS(q5_1, 24, 32)
DEFINE_ROWS(q8_0, 34, 32)
DEFINE_ROWS(q4_k, 144, 256)
DEFINE_ROWS(q5_k, 176, 256)
DEFINE_ROWS(q6_k, 210, 256)

// ---------------------------------------------------------------------------------------------- exports

static int block_of(int type) { return act_of(type) == ACT_Q8_K ? 256 : 32; }

// bytes of the activations buffer for m rows of k (the caller's scratch), or -1: no kernel for the type / k
// not whole blocks
EMBER_EXPORT(ember_q8_act_bytes)
long ember_q8_act_bytes(int type, int m, int k) {
    int kind = act_of(type);
    if (kind < 0 || k <= 0 || k % block_of(type) != 0)
        return -1;
    return act_bytes(kind, m, k);
}

// the SIMD path this build uses ("avx2", "ssse3", "wasm-simd128", "scalar"), for `ember info` and the tests
EMBER_EXPORT(ember_q8_simd)
const char *ember_q8_simd(void) { return EMBER_SIMD; }

// act = m rows of x (stride ldx floats) quantized as llama.cpp quantizes them for W of `type`. 0, or -1.
EMBER_EXPORT(ember_q8_quantize)
int ember_q8_quantize(int type, int m, int k, const float *x, int ldx, void *act) {
    int kind = act_of(type);
    if (ember_q8_act_bytes(type, m, k) < 0)
        return -1;
    act_t a = act_at(act, kind, m, k);
    for (int r = 0; r < m; r++) {
        const float *xr = x + (long)r * ldx;
        if (kind == ACT_Q8_K)
            quantize_q8_k(xr, k, a.q + (long)r * k, a.d + (long)r * (k / 256), a.bsum + (long)r * (k / 16));
        else
            quantize_q8_0(xr, k, a.q + (long)r * k, a.d + (long)r * (k / 32), kind == ACT_Q8_1 ? a.s + (long)r * (k / 32) : 0);
    }
    return 0;
}

// y (m rows, stride ldy) = the m activation rows of act . the n rows of W (GGML blocks of `type`, k per row):
// y[r][o] for o < n. A caller splitting W's rows between threads passes each its rows' w and y + first row.
EMBER_EXPORT(ember_q8_dot)
int ember_q8_dot(int type, int m, int n, int k, const uint8_t *w, const void *act, float *y, int ldy) {
    if (ember_q8_act_bytes(type, m, k) < 0)
        return -1;
    act_t a = act_at((void *)act, act_of(type), m, k);
    switch (type) {
    case Q4_0: rows_q4_0(m, n, k, w, a, y, ldy); break;
    case Q4_1: rows_q4_1(m, n, k, w, a, y, ldy); break;
    case Q5_0: rows_q5_0(m, n, k, w, a, y, ldy); break;
    case Q5_1: rows_q5_1(m, n, k, w, a, y, ldy); break;
    case Q8_0: rows_q8_0(m, n, k, w, a, y, ldy); break;
    case Q4_K: rows_q4_k(m, n, k, w, a, y, ldy); break;
    case Q5_K: rows_q5_k(m, n, k, w, a, y, ldy); break;
    default:   rows_q6_k(m, n, k, w, a, y, ldy); break;
    }
    return 0;
}

// quantize then dot in one call (a call costs ~10 us under Pyodide's ctypes)
EMBER_EXPORT(ember_q8_matmul)
int ember_q8_matmul(int type, int m, int n, int k, const uint8_t *w, const float *x, int ldx, float *y, int ldy,
                    void *act) {
    if (ember_q8_quantize(type, m, k, x, ldx, act) != 0)
        return -1;
    return ember_q8_dot(type, m, n, k, w, act, y, ldy);
}
