// The registry's nbits_matmul on the CPU (core/backends/cpu_nbits.py) for a few rows of x: y = x @ W^T with W in
// onnxruntime's MatMulNBits layout (ember.ggml.nbits): per row n of W, blocks of `block` levels of `bits` bits
// packed little-endian into bytes (the first level in the low bits), a float scale and zero point per block:
//     W[n, k] = (level[n, k] - zero[n, k / block]) * scale[n, k / block]
// Each block's bytes are read once and their levels turned into floats in registers, against x split by phase (a
// 4-bit byte meets x's even and odd elements side by side):  y[m, n] = sum_b scale_b (sum_j x[m, j] level_j) -
// sum_b scale_b zero_b (sum_j x[m, j]), the block sums taken once per call. The float sums run in 16 fixed lanes
// combined in one order, with no fused multiply-add (-ffp-contract=off); the AVX-512, AVX2 and wasm SIMD paths of
// the 4-bit kernel do each lane's IEEE operations in the plain C path's order, so every build gives the same bits.
// W's rows are split between threads in units of four (parallel.h): any thread count gives the same bits too.
#include <stdint.h>

#include "parallel.h"
#include "simd.h"  // the target: EMBER_SIMD_SCALAR, __AVX2__ or __wasm_simd128__

#if defined(__wasm__)
#define EMBER_EXPORT(name) __attribute__((export_name(#name)))
#else
#define EMBER_EXPORT(name) __attribute__((visibility("default")))
#endif

#define NBITS_MAX_ROWS 8
// bytes ahead in each of the four rows read at once that are fetched meanwhile: a decode step reads every weight
// once from memory, in four short interleaved runs the hardware prefetcher follows late (GPT-2-small's 37 4-bit
// products of a token: 14.8 -> 13.9 ms on one thread, 9.4 -> 8.5 on two)
#define NBITS_PREFETCH 512
#define LANES 16

// The rows of x split by phase: a byte of 4-bit levels holds values 2j (low bits) and 2j + 1 (high bits), so with
// x's even and odd elements apart both meet contiguous data; 2 bits: four phases; 8 bits: one.
// xs: per = 8 / bits arrays of k / per floats each, for every row.
static void split(const float *x, int k, int per, float *xs) {
    const int len = k / per;
    for (int p = 0; p < per; p++)
        for (int j = 0; j < len; j++) xs[p * len + j] = x[j * per + p];
}

static float lanes_sum(const float *a) {
    float s[8];
    for (int l = 0; l < 8; l++) s[l] = a[l] + a[l + 8];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// sum over one block's bytes of x . levels, as LANES partial sums added into acc scaled by `scale`
static void block_dot(const uint8_t *p, int bytes, int bits, const float *xs, int len, float scale, float *acc) {
    float a[LANES];
    for (int l = 0; l < LANES; l++) a[l] = 0.0f;
    if (bits == 4) {
        const float *x0 = xs, *x1 = xs + len;
        for (int j = 0; j < bytes; j += LANES)
            for (int l = 0; l < LANES; l++) {
                const uint8_t v = p[j + l];
                a[l] += x0[j + l] * (float)(v & 15) + x1[j + l] * (float)(v >> 4);
            }
    } else if (bits == 8) {
        for (int j = 0; j < bytes; j += LANES)
            for (int l = 0; l < LANES; l++) a[l] += xs[j + l] * (float)p[j + l];
    } else {  // 2 bits
        const float *x0 = xs, *x1 = xs + len, *x2 = xs + 2 * len, *x3 = xs + 3 * len;
        for (int j = 0; j < bytes; j += LANES)
            for (int l = 0; l < LANES; l++) {
                const uint8_t v = p[j + l];
                a[l] += (x0[j + l] * (float)(v & 3) + x1[j + l] * (float)((v >> 2) & 3)) +
                        (x2[j + l] * (float)((v >> 4) & 3) + x3[j + l] * (float)(v >> 6));
            }
    }
    for (int l = 0; l < LANES; l++) acc[l] += scale * a[l];
}

// Four rows of W at once for 4-bit levels (every x value loaded once for the four): block_dot's sums for each,
// lane by lane the same IEEE operations in the same order on every target (16 lanes: 2 AVX2 or 4 wasm vectors).
#if defined(__AVX512F__) && !defined(EMBER_SIMD_SCALAR)
static inline __m512 u8x16_to_f32(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }

static void block_dot4(const uint8_t *p, long row_bytes, int bytes, const float *xs, int len, const float *scale,
                       float acc[4][LANES]) {  // (the 16 lanes in one vector)
    const __m128i mask = _mm_set1_epi8(15);
    const float *x0 = xs, *x1 = xs + len;
    for (int q = 0; q < 4; q++) {
        __m512 a = _mm512_setzero_ps();
        const uint8_t *pq = p + q * row_bytes;
        for (int j = 0; j < bytes; j += LANES) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(pq + j));
            const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
            a = _mm512_add_ps(a, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(x0 + j), u8x16_to_f32(lo)),
                                               _mm512_mul_ps(_mm512_loadu_ps(x1 + j), u8x16_to_f32(hi))));
        }
        _mm512_storeu_ps(acc[q], _mm512_add_ps(_mm512_loadu_ps(acc[q]), _mm512_mul_ps(_mm512_set1_ps(scale[q]), a)));
    }
}
#elif defined(__AVX2__) && !defined(EMBER_SIMD_SCALAR)
static inline __m256 u8_to_f32(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

static void block_dot4(const uint8_t *p, long row_bytes, int bytes, const float *xs, int len, const float *scale,
                       float acc[4][LANES]) {
    const __m128i mask = _mm_set1_epi8(15);
    const float *x0 = xs, *x1 = xs + len;
    for (int q = 0; q < 4; q++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        const uint8_t *pq = p + q * row_bytes;
        for (int j = 0; j < bytes; j += LANES) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(pq + j));
            const __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
            const __m256 t0 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x0 + j), u8_to_f32(lo)),
                                            _mm256_mul_ps(_mm256_loadu_ps(x1 + j), u8_to_f32(hi)));
            const __m256 t1 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x0 + j + 8), u8_to_f32(_mm_srli_si128(lo, 8))),
                                            _mm256_mul_ps(_mm256_loadu_ps(x1 + j + 8), u8_to_f32(_mm_srli_si128(hi, 8))));
            a0 = _mm256_add_ps(a0, t0);
            a1 = _mm256_add_ps(a1, t1);
        }
        const __m256 s = _mm256_set1_ps(scale[q]);
        _mm256_storeu_ps(acc[q], _mm256_add_ps(_mm256_loadu_ps(acc[q]), _mm256_mul_ps(s, a0)));
        _mm256_storeu_ps(acc[q] + 8, _mm256_add_ps(_mm256_loadu_ps(acc[q] + 8), _mm256_mul_ps(s, a1)));
    }
}
#elif defined(__wasm_simd128__) && !defined(EMBER_SIMD_SCALAR)
static void block_dot4(const uint8_t *p, long row_bytes, int bytes, const float *xs, int len, const float *scale,
                       float acc[4][LANES]) {
    const v128_t mask = wasm_i8x16_splat(15);
    const float *x0 = xs, *x1 = xs + len;
    for (int q = 0; q < 4; q++) {
        v128_t a[4] = {wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0)};
        const uint8_t *pq = p + q * row_bytes;
        for (int j = 0; j < bytes; j += LANES) {
            const v128_t v = wasm_v128_load(pq + j);
            const v128_t lo = wasm_v128_and(v, mask), hi = wasm_v128_and(wasm_u16x8_shr(v, 4), mask);
            const v128_t lo16[2] = {wasm_u16x8_extend_low_u8x16(lo), wasm_u16x8_extend_high_u8x16(lo)};
            const v128_t hi16[2] = {wasm_u16x8_extend_low_u8x16(hi), wasm_u16x8_extend_high_u8x16(hi)};
            for (int g = 0; g < 4; g++) {
                const v128_t l32 = g & 1 ? wasm_u32x4_extend_high_u16x8(lo16[g >> 1]) : wasm_u32x4_extend_low_u16x8(lo16[g >> 1]);
                const v128_t h32 = g & 1 ? wasm_u32x4_extend_high_u16x8(hi16[g >> 1]) : wasm_u32x4_extend_low_u16x8(hi16[g >> 1]);
                const v128_t t = wasm_f32x4_add(wasm_f32x4_mul(wasm_v128_load(x0 + j + 4 * g), wasm_f32x4_convert_u32x4(l32)),
                                                wasm_f32x4_mul(wasm_v128_load(x1 + j + 4 * g), wasm_f32x4_convert_u32x4(h32)));
                a[g] = wasm_f32x4_add(a[g], t);
            }
        }
        const v128_t s = wasm_f32x4_splat(scale[q]);
        for (int g = 0; g < 4; g++)
            wasm_v128_store(acc[q] + 4 * g, wasm_f32x4_add(wasm_v128_load(acc[q] + 4 * g), wasm_f32x4_mul(s, a[g])));
    }
}
#else
static void block_dot4(const uint8_t *p, long row_bytes, int bytes, const float *xs, int len, const float *scale,
                       float acc[4][LANES]) {
    for (int q = 0; q < 4; q++) block_dot(p + q * row_bytes, bytes, 4, xs, len, scale[q], acc[q]);
}
#endif

typedef struct {
    int bits, block, m, n0, blocks, k, len, bpb;
    const uint8_t *packed;
    long row_bytes;
    const float *scales, *zeros, *xs, *xsum;
    float *y;
    int ldy, n1;
    const uint8_t *units;  // or W as units of four rows (ember_nbits_units_bytes): n1 a multiple of 4, y's rows < n
    int n;
} nbits_job;

// bytes of one block of a unit of four rows: the four rows' bytes of the block, their scales, scale * zero
#define UNIT_BLOCK(bpb) (4L * (bpb) + 8 * 4)

// rows [n0 + 4 u0, n0 + 4 u1) of y (parallel.h), the last unit up to n1
static void nbits_rows(const void *arg, int u0, int u1, int thread) {
    const nbits_job *j = (const nbits_job *)arg;
    (void)thread;
    const int m = j->m, blocks = j->blocks, k = j->k, len = j->len, bpb = j->bpb, bits = j->bits;
    const long row_bytes = j->row_bytes;
    const float *scales = j->scales, *zeros = j->zeros, *xs = j->xs, *xsum = j->xsum;
    float *y = j->y;
    int n = j->n0 + 4 * u0, n1 = j->n0 + 4 * u1 < j->n1 ? j->n0 + 4 * u1 : j->n1;
    const int ldy = j->ldy;
    const uint8_t *packed = j->packed;
    if (bits == 4 && j->units)  // one stream a unit: the same operations on the same values as below
        for (; n + 4 <= n1; n += 4) {
            const uint8_t *unit = j->units + (long)(n / 4) * blocks * UNIT_BLOCK(bpb);
            for (int r = 0; r < m; r++) {
                float acc[4][LANES], zterm[4] = {0, 0, 0, 0};
                for (int q = 0; q < 4; q++)
                    for (int l = 0; l < LANES; l++) acc[q][l] = 0.0f;
                const float *xr = xs + (long)r * k;
                for (int b = 0; b < blocks; b++) {
                    const uint8_t *p = unit + b * UNIT_BLOCK(bpb);
                    const float *sc = (const float *)(p + 4 * bpb), *sz = sc + 4;
                    for (int q = 0; q < 4; q++) zterm[q] += sz[q] * xsum[r * blocks + b];
                    block_dot4(p, bpb, bpb, xr + (long)b * bpb, len, sc, acc);
                }
                for (int q = 0; q < 4 && n + q < j->n; q++) y[(long)r * ldy + n + q] = lanes_sum(acc[q]) - zterm[q];
            }
        }
    if (bits == 4)  // four rows of W at a time (the block_dot4 sums are block_dot's, lane by lane)
        for (; n + 4 <= n1; n += 4) {
            const uint8_t *row = packed + (long)n * row_bytes;
            for (int r = 0; r < m; r++) {
                float acc[4][LANES], zterm[4] = {0, 0, 0, 0}, sc4[4];
                for (int q = 0; q < 4; q++)
                    for (int l = 0; l < LANES; l++) acc[q][l] = 0.0f;
                const float *xr = xs + (long)r * k;
                for (int b = 0; b < blocks; b++) {
                    for (int q = 0; q < 4; q++) {
                        if (r == 0 && (b * bpb) % 64 == 0)
                            __builtin_prefetch(row + q * row_bytes + (long)b * bpb + NBITS_PREFETCH);
                        sc4[q] = scales[(long)(n + q) * blocks + b];
                        zterm[q] += (sc4[q] * zeros[(long)(n + q) * blocks + b]) * xsum[r * blocks + b];
                    }
                    block_dot4(row + (long)b * bpb, row_bytes, bpb, xr + (long)b * bpb, len, sc4, acc);
                }
                for (int q = 0; q < 4; q++) y[(long)r * ldy + n + q] = lanes_sum(acc[q]) - zterm[q];
            }
        }
    for (; n < n1; n++) {
        const uint8_t *row = packed + (long)n * row_bytes;
        const float *sc = scales + (long)n * blocks, *ze = zeros + (long)n * blocks;
        for (int r = 0; r < m; r++) {
            float acc[LANES], zterm = 0.0f;
            for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
            const float *xr = xs + (long)r * k;
            for (int b = 0; b < blocks; b++) {
                block_dot(row + (long)b * bpb, bpb, bits, xr + (long)b * bpb, len, sc[b], acc);
                zterm += (sc[b] * ze[b]) * xsum[r * blocks + b];
            }
            y[(long)r * ldy + n] = lanes_sum(acc) - zterm;
        }
    }
}

// Which (bits, block) this kernel takes: bits 2, 4 or 8, a block's bytes a multiple of the 16 lanes.
EMBER_EXPORT(ember_nbits_supports)
int ember_nbits_supports(int bits, int block) {
    return (bits == 2 || bits == 4 || bits == 8) && block >= 16 && (block * bits / 8) % LANES == 0;
}

// Floats of scratch ember_nbits_matmul needs for m rows of x over `blocks` blocks of `block`.
EMBER_EXPORT(ember_nbits_scratch_floats)
long ember_nbits_scratch_floats(int m, int blocks, int block) { return (long)m * blocks * (block + 1); }

// x (m, blocks * block) float32 rows (zero past K), packed (n, row_bytes), scales and zeros (n, blocks); rows
// [n0, n1) of y (m, ldy). scratch: ember_nbits_scratch_floats(m, blocks, block) floats. Returns 0, or -1 for what
// it does not take.
static int nbits_matmul(int bits, int block, int m, int n0, int n1, int blocks, const uint8_t *packed, long row_bytes,
                        const float *scales, const float *zeros, const uint8_t *units, const float *x, float *scratch,
                        float *y, int ldy) {
    if (!ember_nbits_supports(bits, block) || m < 0 || m > NBITS_MAX_ROWS || (units && (bits != 4 || n0 % 4)))
        return -1;
    const int k = blocks * block, per = 8 / bits, len = k / per, bpb = block * bits / 8;
    float *xs = scratch, *xsum = scratch + (long)m * k;  // split rows, then per-block sums of x
    for (int r = 0; r < m; r++) {
        split(x + (long)r * k, k, per, xs + (long)r * k);
        for (int b = 0; b < blocks; b++) {
            float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const float *xb = x + (long)r * k + (long)b * block;
            for (int j = 0; j < block; j += 8)
                for (int l = 0; l < 8; l++) a[l] += xb[j + l];
            xsum[r * blocks + b] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        }
    }
    nbits_job j = {bits, block, m, n0, blocks, k, len, bpb, packed, row_bytes, scales, zeros, xs, xsum, y, ldy, n1,
                   units, n1};
    if (units)  // (whole units: the rows past n1 are zeros, never stored)
        j.n1 = n0 + (n1 - n0 + 3) / 4 * 4;
    // units of four rows of W (bits 4: block_dot4's), the last unit the rows left; each row computed alike
    // whichever thread takes it: the same bits on any thread count
    int rows = n1 - n0, fours = (rows + 3) / 4;
    if (fours <= 0)
        return 0;
    return ember_parallel(nbits_rows, &j, fours, ember_chunks(fours, 4L * m * k));
}

EMBER_EXPORT(ember_nbits_matmul)
int ember_nbits_matmul(int bits, int block, int m, int n0, int n1, int blocks, const uint8_t *packed, long row_bytes,
                       const float *scales, const float *zeros, const float *x, float *scratch, float *y, int ldy) {
    return nbits_matmul(bits, block, m, n0, n1, blocks, packed, row_bytes, scales, zeros, 0, x, scratch, y, ldy);
}

// Bytes of a 4-bit weight of n rows (padded to whole units of four) as units: for units of rows 4u .. 4u + 3, for
// each block, the four rows' bytes of it, their four scales, then their four scale * zero products (float32, as
// the product here rounds), 64-byte aligned where the array is. A decode step reads each weight once from memory:
// one stream a unit where the MatMulNBits layout is twelve (four rows' bytes, scales and zeros: the prefetcher
// lost them; GPT-2-small's 768 x 3072 product 2x, its 2304 x 768 1.2x faster from memory).
EMBER_EXPORT(ember_nbits_units_bytes)
long ember_nbits_units_bytes(int n, int blocks, int block) {
    return (long)(n + 3) / 4 * blocks * UNIT_BLOCK(block / 2);
}

// ember_nbits_matmul's y (the same bits) for 4-bit W as units (ember_nbits_units_bytes) of n rows.
EMBER_EXPORT(ember_nbits_matmul_units)
int ember_nbits_matmul_units(int block, int m, int n, int blocks, const uint8_t *units, const float *x, float *scratch,
                             float *y, int ldy) {
    return nbits_matmul(4, block, m, 0, n, blocks, 0, 0, 0, 0, units, x, scratch, y, ldy);
}
