// Quantized matmul for the CPU backend under Pyodide (WebAssembly SIMD128): y = x W^T with W kept as GGML
// blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), dequantized in registers 32 elements at a time.
//
// Every block type is read as "chunks" of 32 elements whose weights are  w = s * q - off : integer levels q
// (as f32, exact), a scale per 16 elements (s0, s1) and an offset per 32 (off, only the types with a min).
// The kernel accumulates t = sum q x per 16 in f32x4, then adds s * t, and subtracts off * sum(x) with the
// x sums computed once per call: the same products as dequantize-then-matmul, summed in another order
// (f32 throughout: activations are not quantized, unlike GGML's own dot products).
//
// ember_qmatmul: x rows in groups of 4 (each weight chunk is decoded once per group), so decode (one row)
// and small prefills run here; the caller switches to ember_qdequant + ember_sgemm for many rows.
// ember_qdequant writes the same f32 values as ember.quant's numpy dequantize (same operations, bit-exact).
// Freestanding: no libc; the caller passes every buffer. Type ids are GGML's (ggml.h enum ggml_type).
#include <stdint.h>
#include <wasm_simd128.h>

#include "half.h"
#include "parallel.h"
#include "simd.h"  // FIFTH

#define Q4_0 2
#define Q4_1 3
#define Q5_0 6
#define Q5_1 7
#define Q8_0 8
#define Q4_K 12
#define Q5_K 13
#define Q6_K 14
#define Q5_0B (256 + Q5_0)  // q8dot.c's: Q5_0 with its levels as bytes (f16 d | 32 bytes q), q - 16

typedef struct {
    v128_t q[8];  // the 32 levels of one chunk as f32, element order
} chunk_t;

typedef struct {   // one block's scales, decoded once per block (8 chunks of a K super-block share 12 bytes)
    float s[16];   // w = s[2 j] q (elements 0-15 of chunk j), s[2 j + 1] q (16-31) ...
    float off[8];  // ... minus off[j] (only the types with a min)
} scales_t;

// ---------------------------------------------------------------------------- helpers

static inline void u8_levels(v128_t lo, v128_t hi, chunk_t *c) {  // 32 unsigned bytes -> 8 f32x4
    v128_t h[4] = {wasm_u16x8_extend_low_u8x16(lo), wasm_u16x8_extend_high_u8x16(lo),
                   wasm_u16x8_extend_low_u8x16(hi), wasm_u16x8_extend_high_u8x16(hi)};
    for (int i = 0; i < 4; i++) {
        c->q[2 * i] = wasm_f32x4_convert_i32x4(wasm_u32x4_extend_low_u16x8(h[i]));
        c->q[2 * i + 1] = wasm_f32x4_convert_i32x4(wasm_u32x4_extend_high_u16x8(h[i]));
    }
}

static inline void i8_levels(v128_t lo, v128_t hi, chunk_t *c) {  // 32 signed bytes -> 8 f32x4
    v128_t h[4] = {wasm_i16x8_extend_low_i8x16(lo), wasm_i16x8_extend_high_i8x16(lo),
                   wasm_i16x8_extend_low_i8x16(hi), wasm_i16x8_extend_high_i8x16(hi)};
    for (int i = 0; i < 4; i++) {
        c->q[2 * i] = wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(h[i]));
        c->q[2 * i + 1] = wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(h[i]));
    }
}

// (v >> shift) & mask in every byte, for masks that drop the bits a 16-bit shift carries over from the next
// byte: wasm has no 8-bit shift on x86 (V8 emulates i8x16.shr in several instructions), 16-bit shifts are one
static inline v128_t bits_at(v128_t v, int shift, int mask) {
    return wasm_v128_and(wasm_u16x8_shr(v, shift), wasm_i8x16_splat(mask));
}

// bit j of the 16 bits (b0 | b1 << 8), as 0x10 or 0 in byte j: the 5th bit of Q5_0 / Q5_1 levels
static inline v128_t fifth_bits(uint8_t b0, uint8_t b1) { return wasm_i64x2_make(FIFTH[b0], FIFTH[b1]); }

static inline void scale_min_k4(const uint8_t *s, int j, int *sc, int *mn) {  // ggml's get_scale_min_k4
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// ---------------------------------------------------------------------------- each type: scales, levels
// scales_T(b, sc): block b's scales; levels_T(b, j, ch): its chunk j's levels (j < elements per block / 32)

static inline void one_scale(float d, float off, scales_t *sc) {  // the 32-element types: one chunk a block
    sc->s[0] = sc->s[1] = d;
    sc->off[0] = off;
}

static inline void scales_q8_0(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), 0.0f, sc); }
static inline void levels_q8_0(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | 32 x i8
    (void)j;
    i8_levels(wasm_v128_load(b + 2), wasm_v128_load(b + 18), ch);
}

static inline void scales_q4_0(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), 0.0f, sc); }
static inline void levels_q4_0(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | 16 B nibbles, q - 8
    (void)j;
    v128_t qs = wasm_v128_load(b + 2), eight = wasm_i8x16_splat(8);
    i8_levels(wasm_i8x16_sub(bits_at(qs, 0, 0xF), eight), wasm_i8x16_sub(bits_at(qs, 4, 0xF), eight), ch);
}

static inline void scales_q4_1(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), -f16_to_f32(b + 2), sc); }
static inline void levels_q4_1(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | f16 m | 16 B nibbles
    (void)j;
    v128_t qs = wasm_v128_load(b + 4);
    u8_levels(bits_at(qs, 0, 0xF), bits_at(qs, 4, 0xF), ch);
}

static inline void scales_q5_0(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), 0.0f, sc); }
static inline void levels_q5_0(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | u32 5th bits | nibbles, q - 16
    (void)j;
    v128_t qs = wasm_v128_load(b + 6), sixteen = wasm_i8x16_splat(16);
    v128_t lo = wasm_v128_or(bits_at(qs, 0, 0xF), fifth_bits(b[2], b[3]));
    v128_t hi = wasm_v128_or(bits_at(qs, 4, 0xF), fifth_bits(b[4], b[5]));
    i8_levels(wasm_i8x16_sub(lo, sixteen), wasm_i8x16_sub(hi, sixteen), ch);
}

static inline void scales_q5_0b(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), 0.0f, sc); }
static inline void levels_q5_0b(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | 32 bytes q, q - 16
    (void)j;
    v128_t sixteen = wasm_i8x16_splat(16);
    i8_levels(wasm_i8x16_sub(wasm_v128_load(b + 2), sixteen), wasm_i8x16_sub(wasm_v128_load(b + 18), sixteen), ch);
}

static inline void scales_q5_1(const uint8_t *b, scales_t *sc) { one_scale(f16_to_f32(b), -f16_to_f32(b + 2), sc); }
static inline void levels_q5_1(const uint8_t *b, int j, chunk_t *ch) {  // f16 d | f16 m | u32 | nibbles
    (void)j;
    v128_t qs = wasm_v128_load(b + 8);
    u8_levels(wasm_v128_or(bits_at(qs, 0, 0xF), fifth_bits(b[4], b[5])),
              wasm_v128_or(bits_at(qs, 4, 0xF), fifth_bits(b[6], b[7])), ch);
}

// Q4_K / Q5_K: f16 d | f16 dmin | 12 B of 6-bit scales and mins | (Q5_K: qh[32]) | qs[128]; sub-block j of a
// block is the low (j even) or high (j odd) nibbles of qs[32 (j / 2) ...], w = (d sc) q - (dmin mn)
static inline void scales_k4(const uint8_t *b, scales_t *out) {
    float d = f16_to_f32(b), dmin = f16_to_f32(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min_k4(b + 4, j, &sc, &mn);
        out->s[2 * j] = out->s[2 * j + 1] = d * (float)sc;
        out->off[j] = dmin * (float)mn;
    }
}

static inline void scales_q4_k(const uint8_t *b, scales_t *sc) { scales_k4(b, sc); }
static inline void levels_q4_k(const uint8_t *b, int j, chunk_t *ch) {
    const uint8_t *qs = b + 16 + 32 * (j >> 1);
    int shift = (j & 1) * 4;
    u8_levels(bits_at(wasm_v128_load(qs), shift, 0xF), bits_at(wasm_v128_load(qs + 16), shift, 0xF), ch);
}

static inline void scales_q5_k(const uint8_t *b, scales_t *sc) { scales_k4(b, sc); }
static inline void levels_q5_k(const uint8_t *b, int j, chunk_t *ch) {
    const uint8_t *qs = b + 48 + 32 * (j >> 1);
    int shift = (j & 1) * 4;
    v128_t h0 = wasm_i16x8_shl(bits_at(wasm_v128_load(b + 16), j, 1), 4);  // (bytes < 2: no 16-bit carry)
    v128_t h1 = wasm_i16x8_shl(bits_at(wasm_v128_load(b + 32), j, 1), 4);
    u8_levels(wasm_v128_or(bits_at(wasm_v128_load(qs), shift, 0xF), h0),
              wasm_v128_or(bits_at(wasm_v128_load(qs + 16), shift, 0xF), h1), ch);
}

// Q6_K: ql[128] | qh[64] | i8 scales[16] | f16 d. Chunk j (of 8) of a block: half h = j / 4, quarter r = j % 4;
// low 4 bits from ql[64 h + 32 (r & 1) ...] (low nibble for r < 2, high for r >= 2), 2 high bits from
// qh[32 h ...] >> 2 r; levels q - 32; one scale per 16: scales[8 h + 2 r] = scales[2 j], scales[2 j + 1]
static inline void scales_q6_k(const uint8_t *b, scales_t *out) {
    float d = f16_to_f32(b + 208);
    for (int i = 0; i < 16; i++)
        out->s[i] = d * (float)((const int8_t *)b)[192 + i];
}

static inline void levels_q6_k(const uint8_t *b, int j, chunk_t *ch) {
    int h = j >> 2, r = j & 3;
    const uint8_t *ql = b + 64 * h + 32 * (r & 1), *qh = b + 128 + 32 * h;
    int shift = (r >> 1) * 4;
    v128_t off = wasm_i8x16_splat(32);  // (the 2 high bits: bytes < 4 before the shift, no 16-bit carry)
    v128_t lo = wasm_v128_or(bits_at(wasm_v128_load(ql), shift, 0xF),
                             wasm_i16x8_shl(bits_at(wasm_v128_load(qh), 2 * r, 3), 4));
    v128_t hi = wasm_v128_or(bits_at(wasm_v128_load(ql + 16), shift, 0xF),
                             wasm_i16x8_shl(bits_at(wasm_v128_load(qh + 16), 2 * r, 3), 4));
    i8_levels(wasm_i8x16_sub(lo, off), wasm_i8x16_sub(hi, off), ch);
}

// ---------------------------------------------------------------------------- the kernels, per type

static inline float hsum(v128_t v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
           (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

// y[i][o] for R (1 or 4, a constant after inlining) rows of x and every output o. A block's scales are decoded
// once (not once per chunk); OFF (a constant) is whether the type has a min, so the others skip its term (it
// would add 0 * xsum: the same sums but for the sign of a zero).
#define DEFINE_ROWS(T, BLOCK, TSIZE, OFF)                                                                      \
    static inline __attribute__((always_inline)) void rows_##T(int R, int n, int k, const uint8_t *w,           \
                                                               const float *x, int ldx, float *y, int ldy,      \
                                                               const float *xsum) {                            \
        int chunks = k / 32, blocks = k / BLOCK;                                                                \
        long rb = (long)blocks * TSIZE;                                                                         \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + o * rb;                                                                     \
            v128_t acc[4] = {wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0)}; \
            float off[4] = {0, 0, 0, 0};                                                                        \
            for (int bi = 0; bi < blocks; bi++) {                                                               \
                const uint8_t *b = wr + (long)bi * TSIZE;                                                       \
                scales_t sc;                                                                                    \
                scales_##T(b, &sc);                                                                             \
                for (int j = 0; j < BLOCK / 32; j++) {                                                          \
                    int c = bi * (BLOCK / 32) + j;                                                              \
                    chunk_t ch;                                                                                 \
                    levels_##T(b, j, &ch);                                                                      \
                    v128_t s0 = wasm_f32x4_splat(sc.s[2 * j]), s1 = wasm_f32x4_splat(sc.s[2 * j + 1]);          \
                    for (int r = 0; r < R; r++) {                                                               \
                        const float *xr = x + (long)r * ldx + 32 * c;                                           \
                        v128_t t0 = wasm_f32x4_mul(ch.q[0], wasm_v128_load(xr));                                \
                        v128_t t1 = wasm_f32x4_mul(ch.q[4], wasm_v128_load(xr + 16));                           \
                        for (int v = 1; v < 4; v++) {                                                           \
                            t0 = wasm_f32x4_add(t0, wasm_f32x4_mul(ch.q[v], wasm_v128_load(xr + 4 * v)));       \
                            t1 = wasm_f32x4_add(t1, wasm_f32x4_mul(ch.q[4 + v], wasm_v128_load(xr + 16 + 4 * v))); \
                        }                                                                                       \
                        acc[r] = wasm_f32x4_add(acc[r], wasm_f32x4_add(wasm_f32x4_mul(s0, t0), wasm_f32x4_mul(s1, t1))); \
                        if (OFF)                                                                                \
                            off[r] += sc.off[j] * xsum[(long)r * chunks + c];                                   \
                    }                                                                                           \
                }                                                                                               \
            }                                                                                                   \
            for (int r = 0; r < R; r++)                                                                         \
                y[(long)r * ldy + o] = hsum(acc[r]) - off[r];                                                   \
        }                                                                                                       \
    }                                                                                                           \
    static void qmatmul_##T(int m, int n, int k, const uint8_t *w, const float *x, int ldx, float *y, int ldy, \
                            const float *xsum) {                                                               \
        int i = 0, chunks = k / 32;                                                                             \
        for (; i + 4 <= m; i += 4)                                                                              \
            rows_##T(4, n, k, w, x + (long)i * ldx, ldx, y + (long)i * ldy, ldy, xsum + (long)i * chunks);      \
        for (; i < m; i++)                                                                                      \
            rows_##T(1, n, k, w, x + (long)i * ldx, ldx, y + (long)i * ldy, ldy, xsum + (long)i * chunks);      \
    }                                                                                                           \
    static void dequant_##T(int rows, int k, const uint8_t *w, float *out) {                                   \
        int blocks = k / BLOCK;                                                                                 \
        for (long bi = 0; bi < (long)rows * blocks; bi++) {                                                     \
            const uint8_t *b = w + bi * TSIZE;                                                                  \
            scales_t sc;                                                                                        \
            scales_##T(b, &sc);                                                                                 \
            for (int j = 0; j < BLOCK / 32; j++) {                                                              \
                chunk_t ch;                                                                                     \
                levels_##T(b, j, &ch);                                                                          \
                float *dst = out + bi * BLOCK + 32 * j;                                                         \
                v128_t off = wasm_f32x4_splat(OFF ? sc.off[j] : 0.0f);                                          \
                for (int v = 0; v < 8; v++) {                                                                   \
                    v128_t s = wasm_f32x4_splat(sc.s[2 * j + (v >= 4)]);                                        \
                    wasm_v128_store(dst + 4 * v, wasm_f32x4_sub(wasm_f32x4_mul(ch.q[v], s), off));              \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

DEFINE_ROWS(q4_0, 32, 18, 0)
DEFINE_ROWS(q4_1, 32, 20, 1)
DEFINE_ROWS(q5_0, 32, 22, 0)
DEFINE_ROWS(q5_0b, 32, 34, 0)
DEFINE_ROWS(q5_1, 32, 24, 1)
DEFINE_ROWS(q8_0, 32, 34, 0)
DEFINE_ROWS(q4_k, 256, 144, 1)
DEFINE_ROWS(q5_k, 256, 176, 1)
DEFINE_ROWS(q6_k, 256, 210, 0)

static int has_offset(int type) { return type == Q4_1 || type == Q5_1 || type == Q4_K || type == Q5_K; }

static int block_of(int type) {  // elements per block, 0 for a type without a kernel here
    switch (type) {
    case Q4_0: case Q4_1: case Q5_0: case Q5_1: case Q8_0: case Q5_0B: return 32;
    case Q4_K: case Q5_K: case Q6_K: return 256;
    default: return 0;
    }
}

__attribute__((export_name("ember_qmatmul_supports")))
int ember_qmatmul_supports(int type) { return block_of(type); }

static long type_size(int type) {  // bytes of one block
    switch (type) {
    case Q4_0: return 18; case Q4_1: return 20; case Q5_0: return 22; case Q5_1: return 24;
    case Q8_0: case Q5_0B: return 34;
    case Q4_K: return 144; case Q5_K: return 176; default: return 210;
    }
}

typedef struct {
    int type, m, k, ldx, ldy;
    long row_bytes;
    const uint8_t *w;
    const float *x, *xsum;
    float *y;
} qjob;

static void qmatmul_rows(const void *p, int r0, int r1, int thread) {  // W's rows [r0, r1) (parallel.h)
    const qjob *j = (const qjob *)p;
    const uint8_t *w = j->w + (long)r0 * j->row_bytes;
    int m = j->m, n = r1 - r0, k = j->k, ldx = j->ldx, ldy = j->ldy;
    float *y = j->y + r0;
    (void)thread;
    switch (j->type) {
    case Q4_0: qmatmul_q4_0(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q4_1: qmatmul_q4_1(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q5_0: qmatmul_q5_0(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q5_0B: qmatmul_q5_0b(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q5_1: qmatmul_q5_1(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q8_0: qmatmul_q8_0(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q4_K: qmatmul_q4_k(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    case Q5_K: qmatmul_q5_k(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    default:   qmatmul_q6_k(m, n, k, w, j->x, ldx, y, ldy, j->xsum); break;
    }
}

static void dequant_rows(const void *p, int r0, int r1, int thread) {  // rows [r0, r1) (parallel.h)
    const qjob *j = (const qjob *)p;
    const uint8_t *w = j->w + (long)r0 * j->row_bytes;
    float *out = j->y + (long)r0 * j->k;
    int rows = r1 - r0, k = j->k;
    (void)thread;
    switch (j->type) {
    case Q4_0: dequant_q4_0(rows, k, w, out); break;
    case Q4_1: dequant_q4_1(rows, k, w, out); break;
    case Q5_0: dequant_q5_0(rows, k, w, out); break;
    case Q5_0B: dequant_q5_0b(rows, k, w, out); break;
    case Q5_1: dequant_q5_1(rows, k, w, out); break;
    case Q8_0: dequant_q8_0(rows, k, w, out); break;
    case Q4_K: dequant_q4_k(rows, k, w, out); break;
    case Q5_K: dequant_q5_k(rows, k, w, out); break;
    default:   dequant_q6_k(rows, k, w, out); break;
    }
}

// y (m rows of stride ldy) = x (m rows of k floats, stride ldx) @ W^T, W: n rows of GGML blocks of `type`, split
// between threads by rows of W (parallel.h). xsum: scratch of m * k / 32 floats (the per-32 sums of x, for the
// types with an offset). Returns 0, -1 for a type without a kernel / k not a whole number of blocks, or
// PARALLEL_LOST.
__attribute__((export_name("ember_qmatmul")))
int ember_qmatmul(int type, int m, int n, int k, const uint8_t *w, const float *x, int ldx, float *y, int ldy,
                  float *xsum) {
    int block = block_of(type);
    if (block == 0 || k % block != 0)
        return -1;
    int chunks = k / 32;
    for (int i = 0; i < m && has_offset(type); i++)
        for (int c = 0; c < chunks; c++) {
            const float *p = x + (long)i * ldx + 32 * c;
            v128_t s = wasm_v128_load(p);
            for (int v = 1; v < 8; v++)
                s = wasm_f32x4_add(s, wasm_v128_load(p + 4 * v));
            xsum[(long)i * chunks + c] = hsum(s);
        }
    qjob j = {type, m, k, ldx, ldy, (long)(k / block) * type_size(type), w, x, xsum, y};
    return ember_parallel(qmatmul_rows, &j, n, ember_chunks(n, (long)m * k));
}

// out (rows x k floats, contiguous) = the dequantized rows; the same values as ember.quant's numpy dequantize
__attribute__((export_name("ember_qdequant")))
int ember_qdequant(int type, int rows, int k, const uint8_t *w, float *out) {
    int block = block_of(type);
    if (block == 0 || k % block != 0)
        return -1;
    qjob j = {type, 0, k, 0, 0, (long)(k / block) * type_size(type), w, 0, 0, out};
    return ember_parallel(dequant_rows, &j, rows, ember_chunks(rows, k));
}

// ---------------------------------------------------------------------------- greedy decoding's tied output
// The exact argmax over rows of  y = W x  for a Q8_0 W (n rows of k), without computing most rows exactly: an
// integer pass bounds every row, then only the rows whose upper bound reaches the best lower bound are computed
// with the same code as ember_qmatmul, so the row chosen (lowest index on ties) is the one np.argmax of
// ember_qmatmul's output gives. Greedy decoding's 262k-row tied output projection is most of a token's time;
// the integer pass reads the same blocks but does a third of the work (no per-element float conversion).
//
// The bound: x quantized with one scale s to integers xq (|xq| <= 127, |x - s xq| <= s / 2), then
//   approx_r = s sum_b d_rb (q_rb . xq_b)                    (integer dots, exact; d_rb the block's scale)
//   |exact_r - approx_r| <= L1_r (s / 2 + 1e-4 max|x|) = e_r,  L1_r = sum_b |d_rb| |q_rb|_1
// where the 1e-4 term covers the f32 rounding of both the exact kernel and this pass (each relative < 1e-5 of
// sum |w| |x| for k <= 8192). L1_r is the per-row table ember_q8_0_l1 writes once per weight (n floats).

// l1 (n floats) = sum_b |d_rb| sum |q_rb| per row of W (Q8_0 rows of k). Returns 0, or -1 when k is not whole blocks.
__attribute__((export_name("ember_q8_0_l1")))
int ember_q8_0_l1(int n, int k, const uint8_t *w, float *l1) {
    if (k % 32 != 0)
        return -1;
    int nb = k / 32;
    for (int r = 0; r < n; r++) {
        float t = 0.0f;
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = w + ((long)r * nb + b) * 34;
            int a = 0;
            for (int i = 0; i < 32; i++) {
                int q = (int8_t)blk[2 + i];
                a += q < 0 ? -q : q;
            }
            float d = f16_to_f32(blk);
            t += (d < 0 ? -d : d) * (float)a;
        }
        l1[r] = t * 1.00001f;  // rounded up past the f32 rounding of this sum
    }
    return 0;
}

static inline v128_t dot32_i16(const uint8_t *q, const int16_t *x) {  // 4 lanes of partial sums of q . x
    v128_t lo = wasm_v128_load(q), hi = wasm_v128_load(q + 16);
    v128_t s = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(lo), wasm_v128_load(x));
    s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(lo), wasm_v128_load(x + 8)));
    s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(hi), wasm_v128_load(x + 16)));
    return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(hi), wasm_v128_load(x + 24)));
}

// The integer pass: lo[r] <= (W x)_r <= hi[r] for every row (W: n rows of k as Q8_0, l1 from ember_q8_0_l1), and
// the largest lo; 0, or -2 when x or a bound is not finite (no bound holds). xq: k int16 of scratch.
static int q8_0_bounds(int n, int k, const uint8_t *w, const float *l1, const float *x, int16_t *xq, float *lo,
                       float *hi, float *best_lo) {
    int nb = k / 32;
    long rb = (long)nb * 34;
    float m = 0.0f;
    for (int i = 0; i < k; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (!(a <= 3.0e38f))
            return -2;  // inf or NaN in x
        m = a > m ? a : m;
    }
    float step = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f, slack = 0.5f * step + 1e-4f * m;
    for (int i = 0; i < k; i++) {
        float v = x[i] * inv;  // |v| <= 127 (plus an ulp, which rounds back to 127)
        xq[i] = (int16_t)(v < 0 ? -(int)(0.5f - v) : (int)(v + 0.5f));
    }
    float top = -3.4e38f;
    for (int r = 0; r < n; r++) {
        const uint8_t *p = w + (long)r * rb;
        v128_t acc = wasm_f32x4_splat(0);
        for (int b = 0; b < nb; b++) {
            v128_t dot = wasm_f32x4_convert_i32x4(dot32_i16(p + 34 * b + 2, xq + 32 * b));
            acc = wasm_f32x4_add(acc, wasm_f32x4_mul(dot, wasm_f32x4_splat(f16_to_f32(p + 34 * b))));
        }
        float approx = hsum(acc) * step, e = l1[r] * slack;
        hi[r] = approx + e;
        if (!(hi[r] <= 3.0e38f))
            return -2;  // a non-finite scale (or bound)
        if (lo != 0)
            lo[r] = approx - e;
        top = approx - e > top ? approx - e : top;
    }
    *best_lo = top;
    return 0;
}

// The index of the largest of W x (W: n rows of k as Q8_0, l1 from ember_q8_0_l1), or -1 for k not whole blocks,
// -2 when x or a bound is not finite (the caller then computes every row). scratch: n + k / 32 floats and k
// int16; *exact_rows gets how many rows were computed exactly.
__attribute__((export_name("ember_q8_0_argmax")))
int ember_q8_0_argmax(int n, int k, const uint8_t *w, const float *l1, const float *x, float *scratch,
                      int *exact_rows) {
    if (k % 32 != 0 || n <= 0)
        return -1;
    long rb = (long)(k / 32) * 34;
    float *hi = scratch, best_lo;  // (then k / 32 floats the exact kernel once took for x sums: Q8_0 has no offset)
    if (q8_0_bounds(n, k, w, l1, x, (int16_t *)(scratch + n + k / 32), 0, hi, &best_lo) != 0)
        return -2;
    int arg = -1, count = 0;
    float best = 0.0f;
    for (int r = 0; r < n; r++) {
        if (hi[r] < best_lo)
            continue;
        float y;
        rows_q8_0(1, 1, k, w + (long)r * rb, x, k, &y, 1, 0);
        count++;
        if (arg < 0 || y > best) {
            arg = r;
            best = y;
        }
    }
    *exact_rows = count;
    return arg;
}

// Sampling's top-k over the same output: every row whose logit can reach the k-th largest, computed exactly.
// The k-th largest lower bound t is a floor under the k-th largest logit (k rows lie at or above their lo), so
// each row with hi < t is below the k-th largest and cannot be kept; the others (ids, ascending, and their
// logits, the values ember_qmatmul gives) go to the caller, which picks the top k among them as it would among
// all rows. threshold: t (one float: a pointer, as ctypes passes no floats untyped), found by the caller from
// lo (a partition); ids and y: room for n. Returns how many rows were computed, -1 for k not whole blocks.
__attribute__((export_name("ember_q8_0_rows_above")))
int ember_q8_0_rows_above(int n, int k, const uint8_t *w, const float *hi, const float *threshold, const float *x,
                          int *ids, float *y) {
    if (k % 32 != 0 || n <= 0)
        return -1;
    long rb = (long)(k / 32) * 34;
    int count = 0;
    for (int r = 0; r < n; r++) {
        if (hi[r] < *threshold)
            continue;
        rows_q8_0(1, 1, k, w + (long)r * rb, x, k, y + count, 1, 0);
        ids[count++] = r;
    }
    return count;
}

// lo, hi (n floats each) = the integer pass's bounds of each row of W x (see q8_0_bounds); scratch: k int16.
// Returns 0, -1 for k not whole blocks, -2 when x or a bound is not finite (the caller computes every row).
__attribute__((export_name("ember_q8_0_bounds")))
int ember_q8_0_bounds(int n, int k, const uint8_t *w, const float *l1, const float *x, int16_t *scratch, float *lo,
                      float *hi) {
    if (k % 32 != 0 || n <= 0)
        return -1;
    float best_lo;
    return q8_0_bounds(n, k, w, l1, x, scratch, lo, hi, &best_lo);
}
