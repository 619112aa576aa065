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
// desktop, and ember.backends.cpu_q8dot's numpy version of these steps, give the same bits.
//   Q8_0 types: p[b % 8] += (dw * dx) * (float)isum                   per block b of 32
//   Q8_1 types: p[b % 8] += (dw * dx) * (float)isum + mw * sx         per block b of 32
//               y = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
//   K types:    y += (dw * dx) * (float)sum_j sc_j isum_j ; y -= (dmin * dx) * (float)sum_j mn_j bsum_j   per 256
//               (Q6_K: no min; its levels' 32 comes off the integer sum)
// Freestanding: no libc; the caller passes every buffer (act: ember_q8_act_bytes). Type ids are GGML's.
#include <stdint.h>

#include "parallel.h"
#include "simd.h"

#if defined(__wasm__)
#define EMBER_EXPORT(name) __attribute__((export_name(#name)))
#else
#define EMBER_EXPORT(name) __attribute__((visibility("default")))
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };
// ember's own layout, not GGML's: Q5_0 with its levels as bytes (f16 d | 32 bytes q, 0..31, standing for q - 16),
// made from Q5_0 blocks by ember_q8_expand where the page's pool holds a model's weights. Its products are Q5_0's,
// the same integers and float steps (the same bits), without the 5th bits' decoding: in V8 a Q5_0 product's
// levels cost more than its multiply-adds (one thread in Chromium: 11 -> 15 GMAC/s with the levels as bytes)
enum { Q5_0B = 256 + Q5_0 };
enum { ACT_Q8_0, ACT_Q8_1, ACT_Q8_K };

static int act_of(int type) {  // the activations' block type for a weight type, -1 for a type without a kernel
    switch (type) {
    case Q4_0: case Q5_0: case Q5_0B: case Q8_0: return ACT_Q8_0;
    case Q4_1: case Q5_1: return ACT_Q8_1;
    case Q4_K: case Q5_K: case Q6_K: return ACT_Q8_K;
    default: return -1;
    }
}

// ---------------------------------------------------------------------------------------------- activations
// act: m rows of  q (k xact: int8, int16 in wasm) | [its int8 copy: ACT_I8_COPY] | d (one float per block) |
// s (Q8_1: a float per 32; Q8_0 with ACT_I8_COPY: negsum) or bsums (Q8_K: an int16 per 16) | xsum (Q8_0 / Q8_1: a
// float per 32), each part a whole number of 16 bytes. With ACT_I8_COPY (relaxed SIMD) q's 2 bytes an element hold,
// per 32 elements, their 32 |x| then 32 signs (0 or -1: simd.h's acc_dot), and x itself is the int8 copy

typedef struct {
    xact *q;
    int8_t *q8;  // the int8 copy of q where the target keeps one (ACT_I8_COPY), else q itself or unused
    float *d, *s;
    int16_t *bsum;  // Q8_K: sums of q per 16 (|sum| <= 2032)
    float *xsum;  // Q8_0 / Q8_1: the sum of q per 32, exact (|sum| <= 32 * 127), for the levels' offset
    float *negsum;  // Q8_0 with ACT_I8_COPY: the sum of |q| over q < 0 per 32, exact, which acc_dot leaves out
} act_t;

#if defined(ACT_I8_COPY)
#define ACT_NEGSUM 1
#else
#define ACT_NEGSUM 0
#endif

static long align16(long n) { return (n + 15) & ~15L; }

static act_t act_at(void *base, int kind, int m, int k) {
    uint8_t *p = (uint8_t *)base;
    act_t a;
    long nd = kind == ACT_Q8_K ? k / 256 : k / 32;
    a.q = (xact *)p;
#if defined(ACT_I8_COPY)
    a.q8 = (int8_t *)(p + align16((long)m * k * (long)sizeof(xact)));
    p += align16((long)m * k);
#else
    a.q8 = (int8_t *)p;
#endif
    a.d = (float *)(p + align16((long)m * k * (long)sizeof(xact)));
    a.s = (float *)((uint8_t *)a.d + align16((long)m * nd * 4));
    a.bsum = (int16_t *)a.s;
    a.xsum = (float *)((uint8_t *)a.s + align16((long)m * (kind == ACT_Q8_K ? k / 16 : k / 32) * 4));
    a.negsum = ACT_NEGSUM && kind == ACT_Q8_0 ? a.s : 0;
    return a;
}

static long act_bytes(int kind, int m, int k) {
    long nd = kind == ACT_Q8_K ? k / 256 : k / 32, ns = kind == ACT_Q8_K ? k / 16 : k / 32;
    long nx = kind == ACT_Q8_K ? 0 : k / 32;
#if defined(ACT_I8_COPY)
    long copy = align16((long)m * k);
#else
    long copy = 0;
#endif
    return align16((long)m * k * (long)sizeof(xact)) + copy + align16((long)m * nd * 4) + align16((long)m * ns * 4) +
           align16((long)m * nx * 4);
}

#if !defined(__wasm_simd128__)  // (the wasm quantizers do its steps 4 lanes at a time)
static inline int nearest_int(float v) {  // ggml's: round half to even through the float adder, |v| <= 2^22
    float t = v + 12582912.0f;
    int32_t i;
    __builtin_memcpy(&i, &t, 4);
    return (i & 0x007FFFFF) - 0x00400000;
}
#endif

// level v of element i (< 32) of the chunk of 32 at q (and at q8: ACT_I8_COPY's int8 copy); -> v < 0 ? -v : 0
static inline int store_level(xact *q, int8_t *q8, int i, int v) {
#if defined(ACT_I8_COPY)
    ((int8_t *)q)[i] = (int8_t)(v < 0 ? -v : v), ((int8_t *)q)[32 + i] = (int8_t)(v < 0 ? -1 : 0);
    q8[i] = (int8_t)v;
#else
    q[i] = (xact)v;
    (void)q8;
#endif
    return v < 0 ? -v : 0;
}

// a block's floats from its scale db, the sum of its levels and of -v over its levels v < 0: d, xsum, and Q8_1's s
// (else 0), ACT_I8_COPY's negsum (else 0)
static inline void block_floats(float *d, float *s, float *xsum, float *negsum, int b, float db, int sum, int neg) {
    d[b] = f16_round(db);
    xsum[b] = (float)sum;
    if (negsum)
        negsum[b] = (float)neg;
    if (s)
        s[b] = f16_round(db * (float)sum);
}

#if !defined(__wasm_simd128__)
static void quantize_q8_0(const float *x, int k, xact *q, int8_t *q8, float *d, float *s, float *xsum, float *negsum) {
    for (int b = 0; b < k / 32; b++, x += 32, q += 32, q8 += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            float a = __builtin_fabsf(x[i]);
            amax = a > amax ? a : amax;
        }
        float db = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0, neg = 0;
        for (int i = 0; i < 32; i++) {
            int v = nearest_int(x[i] * id);
            neg += store_level(q, q8, i, v);
            sum += v;
        }
        block_floats(d, s, xsum, negsum, b, db, sum, neg);
    }
}
#else
// nearest_int 4 lanes at a time: the float adder rounds, the mantissa holds it
static inline v128_t nearest_int4(v128_t v) {
    v128_t t = wasm_f32x4_add(v, wasm_f32x4_splat(12582912.0f));
    return wasm_i32x4_sub(wasm_v128_and(t, wasm_i32x4_splat(0x007FFFFF)), wasm_i32x4_splat(0x00400000));
}
// store_level for 16 levels (the int32 lanes of v[0..3], within +-127) from element o of the chunk of 32 at q / q8
static inline void store_levels16(xact *q, int8_t *q8, int o, const v128_t *v) {
    v128_t h0 = wasm_i16x8_narrow_i32x4(v[0], v[1]), h1 = wasm_i16x8_narrow_i32x4(v[2], v[3]);
#if defined(ACT_I8_COPY)
    v128_t l8 = wasm_i8x16_narrow_i16x8(h0, h1);
    wasm_v128_store((int8_t *)q + o, wasm_i8x16_abs(l8));
    wasm_v128_store((int8_t *)q + 32 + o, wasm_i8x16_lt(l8, wasm_i8x16_splat(0)));
    wasm_v128_store(q8 + o, l8);
#else
    (void)q8;
    wasm_v128_store(q + o, h0), wasm_v128_store(q + o + 8, h1);
#endif
}

// quantize_q8_0's steps (above, the other targets') 4 lanes at a time, the same bits (a maximum is exact in any
// order, and pmax skips a NaN as the scalar comparison does; each level rounds as nearest_int): in the page a decode
// step's activations were quantized on the caller while the pool's workers waited (SmolLM2: 120 calls, ~0.4 ms a
// token)
static void quantize_q8_0(const float *x, int k, xact *q, int8_t *q8, float *d, float *s, float *xsum, float *negsum) {
    for (int b = 0; b < k / 32; b++, x += 32, q += 32, q8 += 32) {
        v128_t m = wasm_f32x4_splat(0.0f);
        for (int i = 0; i < 32; i += 4)
            m = wasm_f32x4_pmax(m, wasm_f32x4_abs(wasm_v128_load(x + i)));
        float lanes[4], amax = 0.0f;
        wasm_v128_store(lanes, m);
        for (int l = 0; l < 4; l++)
            amax = lanes[l] > amax ? lanes[l] : amax;
        float db = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        v128_t idv = wasm_f32x4_splat(id), sum4 = wasm_i32x4_splat(0), abs4 = sum4;
        for (int i = 0; i < 32; i += 16) {
            v128_t v[4];
            for (int j = 0; j < 4; j++) {
                v[j] = nearest_int4(wasm_f32x4_mul(wasm_v128_load(x + i + 4 * j), idv));
                sum4 = wasm_i32x4_add(sum4, v[j]);
                abs4 = wasm_i32x4_add(abs4, wasm_i32x4_abs(v[j]));
            }
            store_levels16(q, q8, i, v);
        }
        int32_t t[4], a[4];
        wasm_v128_store(t, sum4), wasm_v128_store(a, abs4);
        int sum = t[0] + t[1] + t[2] + t[3], neg = (a[0] + a[1] + a[2] + a[3] - sum) / 2;  // sum of -v over v < 0
        block_floats(d, s, xsum, negsum, b, db, sum, neg);
    }
}
#endif

#if !defined(__wasm_simd128__)
static void quantize_q8_k(const float *x, int k, xact *q, int8_t *q8, float *d, int16_t *bsum) {
    for (int b = 0; b < k / 256; b++, x += 256, q += 256, q8 += 256, bsum += 16) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 256; i++) {
            float a = __builtin_fabsf(x[i]);
            if (a > amax)
                amax = a, max = x[i];
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            for (int i = 0; i < 256; i++) store_level(q + 32 * (i / 32), q8 + 32 * (i / 32), i % 32, 0);
            for (int j = 0; j < 16; j++) bsum[j] = 0;
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) {
                int v = nearest_int(iscale * x[i]);
                v = v < 127 ? v : 127;
                store_level(q + 32 * (i / 32), q8 + 32 * (i / 32), i % 32, v);
                sum += v;
            }
            bsum[j] = (int16_t)sum;
        }
        d[b] = 1.0f / iscale;
    }
}
#else
// quantize_q8_k's steps (above) 4 lanes at a time, the same bits: the largest |x| by pmax (which skips a NaN as the
// scalar comparison does), then the first x of that magnitude; each level rounds as nearest_int and is clamped at
// 127 (the K types' products in the page had their o / down activations quantized by the scalar loop on the caller
// while the pool's workers waited)
static void quantize_q8_k(const float *x, int k, xact *q, int8_t *q8, float *d, int16_t *bsum) {
    const v128_t top = wasm_i32x4_splat(127);
    for (int b = 0; b < k / 256; b++, x += 256, q += 256, q8 += 256, bsum += 16) {
        v128_t m = wasm_f32x4_splat(0.0f);
        for (int i = 0; i < 256; i += 4)
            m = wasm_f32x4_pmax(m, wasm_f32x4_abs(wasm_v128_load(x + i)));
        float lanes[4], amax = 0.0f, max = 0.0f;
        wasm_v128_store(lanes, m);
        for (int l = 0; l < 4; l++)
            amax = lanes[l] > amax ? lanes[l] : amax;
        if (amax == 0.0f) {
            d[b] = 0.0f;
            for (int i = 0; i < 256; i++) store_level(q + 32 * (i / 32), q8 + 32 * (i / 32), i % 32, 0);
            for (int j = 0; j < 16; j++) bsum[j] = 0;
            continue;
        }
        for (int i = 0; i < 256; i++)  // (the first x of largest |x|: the scalar loop's strict > keeps the first)
            if (__builtin_fabsf(x[i]) == amax) {
                max = x[i];
                break;
            }
        float iscale = -127.0f / max;
        v128_t is = wasm_f32x4_splat(iscale);
        for (int j = 0; j < 16; j++) {  // 16 levels: nearest_int(iscale x), at most 127
            v128_t v[4], sum4 = wasm_i32x4_splat(0);
            for (int l = 0; l < 4; l++) {
                v[l] = wasm_i32x4_min(nearest_int4(wasm_f32x4_mul(is, wasm_v128_load(x + 16 * j + 4 * l))), top);
                sum4 = wasm_i32x4_add(sum4, v[l]);
            }
            store_levels16(q + 32 * (j / 2), q8 + 32 * (j / 2), 16 * (j % 2), v);  // (its chunk of 32, and where)
            int32_t t[4];
            wasm_v128_store(t, sum4);
            bsum[j] = (int16_t)(t[0] + t[1] + t[2] + t[3]);
        }
        d[b] = 1.0f / iscale;
    }
}
#endif

// ---------------------------------------------------------------------------------------------- dot products
// dot_T(R, k, w, a, r0, out): out[r] = (row w of W) . (activation row r0 + r), R (1..4) rows of x per decoded
// weight chunk. The levels of one chunk of 32 (element order) are a v32.

// The 32-element types' levels. All but Q8_0's are unsigned (0..31) as stored, multiplied as they are (x86's
// byte multiply-add takes an unsigned operand, wasm's relaxed dot a 7-bit one); a type whose levels are stored
// with an offset (Q4_0: q - 8, Q5_0: q - 16) subtracts offset * sum(x) from the block's integer sum, exactly.
static inline v32 levels_q4_0(const uint8_t *b) { return v32_nibbles(b + 2); }
static inline v32 levels_q4_1(const uint8_t *b) { return v32_nibbles(b + 4); }
static inline v32 levels_q5_0(const uint8_t *b) { return v32_or(v32_nibbles(b + 6), v32_fifth(b + 2)); }
static inline v32 levels_q5_1(const uint8_t *b) { return v32_or(v32_nibbles(b + 8), v32_fifth(b + 4)); }
static inline v32 levels_q8_0(const uint8_t *b) { return v32_load(b + 2); }  // signed: acc_dot transfers signs
static inline v32 levels_q5_0b(const uint8_t *b) { return v32_load(b + 2); }

// eight partial sums (block b into part b % 8), added as ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)): blocks
// go eight at a time, so eight integer sums are reduced together and each float step is one 8-lane operation;
// the last nb % 8 blocks go one at a time into their lanes. A block's integer sum, its levels' dot with x minus
// OFF * sum(x), is below 2^24 in magnitude, so it is exact in the float lanes that subtract the offset.
#define DOT(SIGNED, w, x) ((SIGNED) ? acc_dot(w, x) : acc_dotu(w, x))
#define DEFINE_DOT32(T, TSIZE, MIN, OFF, SIGNED)                                                               \
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
                const xact *xq = a.q + (long)(r0 + r) * k + 32 * b;                                             \
                const int8_t *x8 = a.q8 + (long)(r0 + r) * k + 32 * b;                                          \
                acc t[8];                                                                                       \
                for (int l = 0; l < 8; l++)                                                                     \
                    t[l] = DOT(SIGNED, levels_##T(blk + l * TSIZE), xv_load(xq + 32 * l, x8 + 32 * l));         \
                f8 is = acc_sum8(t);                                                                            \
                if (SIGNED && ACT_NEGSUM)                                                                       \
                    is = f8_add(is, f8_load(a.negsum + i));                                                     \
                if (OFF)                                                                                        \
                    is = f8_sub(is, f8_mul(f8_splat((float)OFF), f8_load(a.xsum + i)));                         \
                f8 p = f8_mul(f8_mul(dw, f8_load(a.d + i)), is);                                                \
                part[r] = f8_add(part[r], MIN ? f8_add(p, f8_mul(mw, f8_load(a.s + i))) : p);                   \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++) {                                                                           \
            float p[8];                                                                                         \
            long row = (long)(r0 + r);                                                                          \
            f8_store(p, part[r]);                                                                               \
            for (int bt = b; bt < nb; bt++) {                                                                   \
                const uint8_t *blk = w + (long)bt * TSIZE;                                                      \
                long i = row * nb + bt;                                                                         \
                float d = f16_to_f32(blk) * a.d[i];                                                             \
                xv x = xv_load(a.q + row * k + 32 * bt, a.q8 + row * k + 32 * bt);                              \
                float is = (float)acc_sum(DOT(SIGNED, levels_##T(blk), x));                                     \
                if (SIGNED && ACT_NEGSUM)                                                                       \
                    is += a.negsum[i];                                                                          \
                if (OFF)                                                                                        \
                    is -= (float)OFF * a.xsum[i];                                                               \
                p[bt & 7] += MIN ? d * is + f16_to_f32(blk + 2) * a.s[i] : d * is;                              \
            }                                                                                                   \
            out[r] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));                        \
        }                                                                                                       \
    }

// the 32-element types: name, block bytes, MIN (a min per block), OFF (the levels' offset), SIGNED
#define EACH_TYPE32(F) F(q4_0, 18, 0, 8, 0) F(q4_1, 20, 1, 0, 0) F(q5_0, 22, 0, 16, 0) F(q5_1, 24, 1, 0, 0) \
                       F(q8_0, 34, 0, 0, 1) F(q5_0b, 34, 0, 16, 0)
EACH_TYPE32(DEFINE_DOT32)

#if defined(__wasm_simd128__)
// The page's decode products (one activation row, m = 1): a row of W at a time, four blocks a step, the four
// blocks' integer sums in the four lanes of one vector (the lanes dot_T's 8-lane float steps give blocks b % 8 < 4
// and >= 4), so that each step holds a few vectors. V8 kept dot_T's 8 blocks of two-vector sums out of registers
// (spilled to the stack: Q8_0 ran at 9.9 GMAC/s on one thread in Chromium, 12.4 this way; Q5_0 8.0 -> 11.0, the
// weights streamed from memory). The same float operations in the same order as dot_T (a row's last blocks,
// fewer than four, fill the other lanes with zeros, which add nothing: no lane of `part` is ever -0), the same
// bits.
#define DOT4(SIGNED, w, x) ((SIGNED) ? dot4(w, x) : dotu4(w, x))
// the halves at p, p + stride, ... (n of them, then zeros: a row's last blocks) as floats, loaded lane by lane (a
// row of 18 blocks, SmolLM2's 576 inputs, spent a third of its time in scalar conversions of its last two)
static inline v128_t halves4_n(const uint8_t *p, long stride, int n) {
    if (n == 4)
        return halves4(p, p + stride, p + 2 * stride, p + 3 * stride);
    v128_t h = wasm_v128_load16_lane(p, wasm_i32x4_splat(0), 0);
    if (n > 1)
        h = wasm_v128_load16_lane(p + stride, h, 2);
    if (n > 2)
        h = wasm_v128_load16_lane(p + 2 * stride, h, 4);
    return halves_to_f32(h);  // (a zero half is +0)
}
static inline v128_t floats_n(const float *p, int n) {  // p[0..n) (n < 4), then zeros; nothing read past p[n - 1]
    v128_t v = wasm_v128_load32_zero(p);
    if (n > 1)
        v = wasm_v128_load32_lane(p + 1, v, 1);
    if (n > 2)
        v = wasm_v128_load32_lane(p + 2, v, 2);
    return v;
}
// an activation row's floats for 4 blocks from block i (n of them, then zeros): its scales d, and the negsum, xsum and
// s the type reads
typedef struct { v128_t d, neg, xsum, s; } act4;
static inline act4 act4_load(act_t a, long i, int n, int min, int off, int neg) {
    act4 v;
    if (n == 4) {
        v.d = wasm_v128_load(a.d + i);
        v.neg = neg ? wasm_v128_load(a.negsum + i) : v.d;
        v.xsum = off ? wasm_v128_load(a.xsum + i) : v.d;
        v.s = min ? wasm_v128_load(a.s + i) : v.d;
        return v;
    }
    v.d = floats_n(a.d + i, n);
    v.neg = neg ? floats_n(a.negsum + i, n) : v.d;
    v.xsum = off ? floats_n(a.xsum + i, n) : v.d;
    v.s = min ? floats_n(a.s + i, n) : v.d;
    return v;
}
// dot_T's float step for 4 blocks in 4 lanes: part + (dw dx) is, is being the blocks' integer sums (plus x's negsum
// for a signed type, less OFF xsum), plus mw s for a type with mins
static inline v128_t step4(v128_t part, v128_t isum, v128_t dw, v128_t mw, act4 x, int min, int off, int neg) {
    v128_t is = wasm_f32x4_convert_i32x4(isum);
    if (neg)
        is = wasm_f32x4_add(is, x.neg);
    if (off)
        is = wasm_f32x4_sub(is, wasm_f32x4_mul(wasm_f32x4_splat((float)off), x.xsum));
    v128_t p = wasm_f32x4_mul(wasm_f32x4_mul(dw, x.d), is);
    if (min)
        p = wasm_f32x4_add(p, wasm_f32x4_mul(mw, x.s));
    return wasm_f32x4_add(part, p);
}
static inline float sum_parts(v128_t lo, v128_t hi) {  // ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    float q[8];
    wasm_v128_store(q, lo), wasm_v128_store(q + 4, hi);
    return ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
}
#define DEFINE_ROW1_32(T, TSIZE, MIN, OFF, SIGNED)                                                            \
    static void row1_##T(int n, int k, const uint8_t *w, act_t a, float *y) {                                 \
        int nb = k / 32;                                                                                        \
        long rb = (long)nb * TSIZE;                                                                             \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + (long)o * rb;                                                               \
            v128_t part[2] = {wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f)};                                  \
            for (int b = 0; b < nb; b += 4) {                                                                   \
                const uint8_t *blk = wr + (long)b * TSIZE;                                                      \
                const xact *xq = a.q + 32 * b;                                                                  \
                const int8_t *x8 = a.q8 + 32 * b;                                                               \
                int r = nb - b < 4 ? nb - b : 4;                                                                \
                v128_t isum;                                                                                    \
                if (r == 4)                                                                                     \
                    isum = sum4v(DOT4(SIGNED, levels_##T(blk), xv_load(xq, x8)),                                \
                                 DOT4(SIGNED, levels_##T(blk + TSIZE), xv_load(xq + 32, x8 + 32)),              \
                                 DOT4(SIGNED, levels_##T(blk + 2 * TSIZE), xv_load(xq + 64, x8 + 64)),          \
                                 DOT4(SIGNED, levels_##T(blk + 3 * TSIZE), xv_load(xq + 96, x8 + 96)));         \
                else {                                                                                          \
                    v128_t s[4];                                                                                \
                    for (int l = 0; l < 4; l++)                                                                 \
                        s[l] = l < r ? DOT4(SIGNED, levels_##T(blk + l * TSIZE), xv_load(xq + 32 * l, x8 + 32 * l)) \
                                     : wasm_i32x4_splat(0);                                                     \
                    isum = sum4v(s[0], s[1], s[2], s[3]);                                                       \
                }                                                                                               \
                v128_t mw = MIN ? halves4_n(blk + 2, TSIZE, r) : isum;                                          \
                part[(b >> 2) & 1] = step4(part[(b >> 2) & 1], isum, halves4_n(blk, TSIZE, r), mw,             \
                                           act4_load(a, b, r, MIN, OFF, SIGNED && ACT_NEGSUM), MIN, OFF,        \
                                           SIGNED && ACT_NEGSUM);                                               \
            }                                                                                                   \
            y[o] = sum_parts(part[0], part[1]);                                                                 \
        }                                                                                                       \
    }

// Prefill's products (m > 1): the same, for up to 4 activation rows at once, each with its own lanes: a row of W's
// 4 blocks decoded once for them (their levels kept on the stack, where V8 reads them back in one load each), the
// scales converted once. (m = 1 keeps row1_T: this loop's bookkeeping cost it a sixth.) Prefill's Q5_0 products
// in Chromium: 10.8 -> 20.5 GMAC/s a thread, against the 8-block loop (16 rows of x). Both loops spell out a whole
// group's four dots: through an array with a test for each, or a shared function, V8's code was 10-15% slower.
#define DEFINE_ROWS4_32(T, TSIZE, MIN, OFF, SIGNED)                                                           \
    static void rows4_##T(int R, int r0, int n, int k, const uint8_t *w, act_t a, float *y, int ldy) {         \
        int nb = k / 32;                                                                                        \
        long rb = (long)nb * TSIZE;                                                                             \
        v32 lv[4];                                                                                              \
        v128_t part[4][2];                                                                                      \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + (long)o * rb;                                                               \
            for (int r = 0; r < R; r++)                                                                         \
                part[r][0] = part[r][1] = wasm_f32x4_splat(0.0f);                                               \
            for (int b = 0; b < nb; b += 4) {                                                                   \
                const uint8_t *blk = wr + (long)b * TSIZE;                                                      \
                int nl = nb - b < 4 ? nb - b : 4;                                                               \
                for (int l = 0; l < nl; l++)                                                                    \
                    lv[l] = levels_##T(blk + l * TSIZE);                                                        \
                v128_t dw = halves4_n(blk, TSIZE, nl), mw = MIN ? halves4_n(blk + 2, TSIZE, nl) : dw;           \
                for (int r = 0; r < R; r++) {                                                                   \
                    long row = r0 + r;                                                                          \
                    const xact *xq = a.q + row * k + 32 * b;                                                    \
                    const int8_t *x8 = a.q8 + row * k + 32 * b;                                                 \
                    v128_t isum;                                                                                \
                    if (nl == 4)                                                                                \
                        isum = sum4v(DOT4(SIGNED, lv[0], xv_load(xq, x8)), DOT4(SIGNED, lv[1], xv_load(xq + 32, x8 + 32)), \
                                     DOT4(SIGNED, lv[2], xv_load(xq + 64, x8 + 64)),                            \
                                     DOT4(SIGNED, lv[3], xv_load(xq + 96, x8 + 96)));                           \
                    else {                                                                                      \
                        v128_t s[4];                                                                            \
                        for (int l = 0; l < 4; l++)                                                             \
                            s[l] = l < nl ? DOT4(SIGNED, lv[l], xv_load(xq + 32 * l, x8 + 32 * l)) : wasm_i32x4_splat(0); \
                        isum = sum4v(s[0], s[1], s[2], s[3]);                                                   \
                    }                                                                                           \
                    part[r][(b >> 2) & 1] = step4(part[r][(b >> 2) & 1], isum, dw, mw,                         \
                                                  act4_load(a, row * nb + b, nl, MIN, OFF, SIGNED && ACT_NEGSUM), \
                                                  MIN, OFF, SIGNED && ACT_NEGSUM);                              \
                }                                                                                               \
            }                                                                                                   \
            for (int r = 0; r < R; r++)                                                                         \
                y[(r0 + r) * (long)ldy + o] = sum_parts(part[r][0], part[r][1]);                                \
        }                                                                                                       \
    }

EACH_TYPE32(DEFINE_ROW1_32)
EACH_TYPE32(DEFINE_ROWS4_32)
// the page's products for type T: row1_T for one row of x, else rows4_T for up to 4 rows at a time
#define PAGE_ROWS(T)                                                                                           \
    {                                                                                                          \
        if (m == 1)                                                                                            \
            row1_##T(n, k, w, a, y);                                                                           \
        else                                                                                                   \
            for (int r = 0; r < m; r += 4)                                                                     \
                rows4_##T(m - r < 4 ? m - r : 4, r, n, k, w, a, y, ldy);                                       \
        break;                                                                                                 \
    }
#else
#define PAGE_ROWS(T)
#endif

// The K types: 8 chunks of 32 per block of 256, each chunk's levels decoded where they are multiplied (decode has
// one row of x; keeping them would be a store and a load more). Per block:
//   kscales_T(b, sm): Q4_K / Q5_K's 8 6-bit scales and 8 mins, as bytes sm[0..7] and sm[8..15] (llama.cpp's
//   unpacking of the 12 packed bytes in 32-bit words); chunk_T(b, j): chunk j's unsigned levels.
static inline void kscales_k4(const uint8_t *b, uint32_t *sm) {  // f16 d | f16 dmin | scales[12]
    const uint32_t k1 = 0x3F3F3F3F, k2 = 0x0F0F0F0F, k3 = 0x03030303;
    __builtin_memcpy(sm, b + 4, 12);
    sm[3] = ((sm[2] >> 4) & k2) | (((sm[1] >> 6) & k3) << 4);
    uint32_t mins_lo = sm[1] & k1;
    sm[1] = (sm[2] & k2) | (((sm[0] >> 6) & k3) << 4);
    sm[2] = mins_lo;
    sm[0] &= k1;
}
static inline v32 chunk_q4_k(const uint8_t *b, int j) {  // ... | qs[128]: chunk j = nibbles (j & 1) of qs[32 (j / 2)]
    return v32_bits(v32_load(b + 16 + 32 * (j >> 1)), (j & 1) * 4, 0xF);
}
static inline v32 chunk_q5_k(const uint8_t *b, int j) {  // ... | qh[32] | qs[128]: bit j of qh[l] is the 5th
    return v32_or(v32_bits(v32_load(b + 48 + 32 * (j >> 1)), (j & 1) * 4, 0xF), v32_shl(v32_bits(v32_load(b + 16), j, 1), 4));
}
// ql[128] | qh[64] | i8 scales[16] | f16 d. Chunk j: half h = j / 4, quarter r = j % 4: low 4 bits from
// ql[64 h + 32 (r & 1) ...] (low nibbles for r < 2), 2 high bits from qh[32 h ...] >> 2 r; stored levels 0..63
// stand for q - 32
static inline v32 chunk_q6_k(const uint8_t *b, int j) {
    int h = j >> 2, r = j & 3;
    return v32_or(v32_bits(v32_load(b + 64 * h + 32 * (r & 1)), (r >> 1) * 4, 0xF),
                  v32_shl(v32_bits(v32_load(b + 128 + 32 * h), 2 * r, 3), 4));
}

// Q4_K / Q5_K: sum_j sc_j (levels_j . x_j), and sum_j mn_j sum(x_j) for the mins' term, in integers
#define DEFINE_DOTK4(T, TSIZE)                                                                                 \
    static inline __attribute__((always_inline)) void dot_##T(int R, int k, const uint8_t *w, act_t a, int r0, \
                                                              float *out) {                                    \
        int nb = k / 256;                                                                                       \
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                \
        for (int b = 0; b < nb; b++) {                                                                          \
            const uint8_t *blk = w + (long)b * TSIZE;                                                           \
            uint32_t sm[4];                                                                                     \
            kscales_k4(blk, sm);                                                                                \
            const uint8_t *sc = (const uint8_t *)sm, *mn = sc + 8;                                              \
            float d = f16_to_f32(blk), dmin = f16_to_f32(blk + 2);                                              \
            for (int r = 0; r < R; r++) {                                                                       \
                long row = (long)(r0 + r);                                                                      \
                const xact *xq = a.q + row * k + 256 * b;                                                       \
                const int8_t *x8 = a.q8 + row * k + 256 * b;                                                    \
                const int16_t *bs = a.bsum + row * (k / 16) + 16 * b;                                           \
                acc t = acc_zero();                                                                             \
                int32_t im = 0;                                                                                 \
                for (int j = 0; j < 8; j++) {                                                                   \
                    t = acc_add(t, acc_dotu_scaled(chunk_##T(blk, j), xv_load(xq + 32 * j, x8 + 32 * j), sc[j], sc[j]));    \
                    im += mn[j] * (bs[2 * j] + bs[2 * j + 1]);                                                  \
                }                                                                                               \
                float dx = a.d[row * nb + b];                                                                   \
                sum[r] += (d * dx) * (float)acc_sum(t);                                                         \
                sum[r] -= (dmin * dx) * (float)im;                                                              \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < R; r++)                                                                             \
            out[r] = sum[r];                                                                                    \
    }

DEFINE_DOTK4(q4_k, 144)
DEFINE_DOTK4(q5_k, 176)

// Q6_K: sum_g sc_g (levels_g . x_g) per 16 minus 32 sum_g sc_g sum(x_g), its 16 int8 scales against x's sums per
// 16 in one vector step
static inline __attribute__((always_inline)) void dot_q6_k(int R, int k, const uint8_t *w, act_t a, int r0,
                                                           float *out) {
    int nb = k / 256;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = w + (long)b * 210;
        const int8_t *sc = (const int8_t *)blk + 192;
        float d = f16_to_f32(blk + 208);
        for (int r = 0; r < R; r++) {
            long row = (long)(r0 + r);
            const xact *xq = a.q + row * k + 256 * b;
            const int8_t *x8 = a.q8 + row * k + 256 * b;
            const int16_t *bs = a.bsum + row * (k / 16) + 16 * b;
            acc t = acc_zero();
            for (int j = 0; j < 8; j++)
                t = acc_add(t, acc_dotu_scaled(chunk_q6_k(blk, j), xv_load(xq + 32 * j, x8 + 32 * j), sc[2 * j],
                                               sc[2 * j + 1]));
            sum[r] += (d * a.d[row * nb + b]) * (float)(acc_sum(t) - 32 * acc_sum(acc_dot16(sc, bs)));
        }
    }
    for (int r = 0; r < R; r++)
        out[r] = sum[r];
}

#if defined(__wasm_simd128__)
// The page's K-type products: a row of W at a time, four blocks a step (one row of x) or up to four rows of x a
// block (prefill), each block's integer sums left in a vector and folded into lanes at once (sum4v), so the float
// steps are one vector operation for four blocks or rows; the scales and mins widened once a block and broadcast
// to a chunk by a shuffle. dot_T called per row spent more on its scalar bookkeeping (each scale and min a byte
// loaded and splat, two horizontal sums a block, the halves converted one by one) than on its multiply-adds:
// Q6_K ran at 7.2 GMAC/s on one thread in Chromium, Gemma 3's ffn_down a third of its layers' time. The same
// integers, and the float steps in dot_T's order (y += (d dx) isum, y -= (dmin dx) imin, block by block): the
// same bits.
#define BCAST16(v, j) wasm_i16x8_shuffle(v, v, j, j, j, j, j, j, j, j)
#if defined(ACT_I8_COPY)
// a chunk's 32 levels w (<= 63) against x's 32 bytes at x: each 16's byte dot as int16 pair sums (relaxed SIMD),
// times its scale (int16 lanes s0, s1) and widened in one i32x4.dot
typedef int8_t kx;
#define K_X(a) (a).q8
#define PAIRS_LO(x, w) wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load(x), (w).lo)
#define PAIRS_HI(x, w) wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load((x) + 16), (w).hi)
#define K_CHUNK1(x, w, s) wasm_i32x4_dot_i16x8(wasm_i16x8_add(PAIRS_LO(x, w), PAIRS_HI(x, w)), s)  /* levels <= 15 */
#define K_CHUNK2(x, w, s0, s1) \
    wasm_i32x4_add(wasm_i32x4_dot_i16x8(PAIRS_LO(x, w), s0), wasm_i32x4_dot_i16x8(PAIRS_HI(x, w), s1))
#else
// plain SIMD128: x is int16; the levels widened and multiplied by their scale in int16 (at most 63 * 128), then
// dotted with x (i32x4.dot)
typedef int16_t kx;
#define K_X(a) (a).q
#define K_DOT8(w16, s, x) wasm_i32x4_dot_i16x8(wasm_i16x8_mul(w16, s), wasm_v128_load(x))
#define K_CHUNK2(x, w, s0, s1)                                                                                    \
    wasm_i32x4_add(wasm_i32x4_add(K_DOT8(wasm_u16x8_extend_low_u8x16((w).lo), s0, x),                             \
                                  K_DOT8(wasm_u16x8_extend_high_u8x16((w).lo), s0, (x) + 8)),                     \
                   wasm_i32x4_add(K_DOT8(wasm_u16x8_extend_low_u8x16((w).hi), s1, (x) + 16),                      \
                                  K_DOT8(wasm_u16x8_extend_high_u8x16((w).hi), s1, (x) + 24)))
#define K_CHUNK1(x, w, s) K_CHUNK2(x, w, s, s)
#endif

// Q4_K (FIVE 0) / Q5_K (FIVE 1): block blk's sum_j sc_j (levels_j . x_j) and sum_j mn_j sum(x_j) for R rows of x
// (x8 + r xs, bs + r bss), each as 4 int32 lanes to be added up; the block's scales and levels decoded once for them
static inline __attribute__((always_inline)) void kmin_block(const uint8_t *blk, int FIVE, int R, const kx *x8,
                                                             long xs, const int16_t *bs, long bss, v128_t *isum,
                                                             v128_t *imin) {
    uint32_t sm[4];
    kscales_k4(blk, sm);
    v128_t s8 = wasm_v128_load(sm);  // sc[0..7] | mn[0..7]
    v128_t sc = wasm_u16x8_extend_low_u8x16(s8), mn = wasm_u16x8_extend_high_u8x16(s8);
    v128_t mlo = wasm_i16x8_shuffle(mn, mn, 0, 0, 1, 1, 2, 2, 3, 3);  // (each min against its two 16s' sums)
    v128_t mhi = wasm_i16x8_shuffle(mn, mn, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int r = 0; r < R; r++) {
        imin[r] = wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_v128_load(bs + r * bss), mlo),
                                 wasm_i32x4_dot_i16x8(wasm_v128_load(bs + r * bss + 8), mhi));
        isum[r] = wasm_i32x4_splat(0);
    }
    const v128_t m4 = wasm_i8x16_splat(0xF), m10 = wasm_i8x16_splat(0x10);
    const uint8_t *qs = blk + (FIVE ? 48 : 16);  // Q5_K: ... | qh[32] | qs[128]
    v32 qh = FIVE ? v32_load(blk + 16) : v32_splat8(0);
    // Q5_K's 5th bit of chunk j, bit j of qh's byte, moved to bit 4 in one 16-bit shift (what comes in from the
    // next byte is masked off)
#define K5_BIT(v, j) wasm_v128_and((j) <= 4 ? wasm_i16x8_shl(v, 4 - (j)) : wasm_u16x8_shr(v, (j) - 4), m10)
#define KMIN_CHUNK(j, w)                                                                                       \
    {                                                                                                          \
        v32 l = w;                                                                                             \
        if (FIVE)                                                                                              \
            l.lo = wasm_v128_or(l.lo, K5_BIT(qh.lo, j)), l.hi = wasm_v128_or(l.hi, K5_BIT(qh.hi, j));          \
        v128_t s = BCAST16(sc, j);                                                                             \
        for (int r = 0; r < R; r++)                                                                            \
            isum[r] = wasm_i32x4_add(isum[r], K_CHUNK1(x8 + r * xs + 32 * (j), l, s));                         \
    }
#define KMIN_PAIR(i)                                                                                           \
    {                                                                                                          \
        v32 q = v32_load(qs + 32 * (i));                                                                       \
        v32 lo = {wasm_v128_and(q.lo, m4), wasm_v128_and(q.hi, m4)};                                           \
        v32 hi = {wasm_v128_and(wasm_u16x8_shr(q.lo, 4), m4), wasm_v128_and(wasm_u16x8_shr(q.hi, 4), m4)};     \
        KMIN_CHUNK(2 * (i), lo)                                                                                \
        KMIN_CHUNK(2 * (i) + 1, hi)                                                                            \
    }
    KMIN_PAIR(0) KMIN_PAIR(1) KMIN_PAIR(2) KMIN_PAIR(3)
#undef KMIN_PAIR
#undef KMIN_CHUNK
#undef K5_BIT
}
static inline __attribute__((always_inline)) void k4_block(const uint8_t *blk, int R, const kx *x8, long xs,
                                                           const int16_t *bs, long bss, v128_t *isum, v128_t *imin) {
    kmin_block(blk, 0, R, x8, xs, bs, bss, isum, imin);
}
static inline __attribute__((always_inline)) void k5_block(const uint8_t *blk, int R, const kx *x8, long xs,
                                                           const int16_t *bs, long bss, v128_t *isum, v128_t *imin) {
    kmin_block(blk, 1, R, x8, xs, bs, bss, isum, imin);  // (levels <= 31: K_CHUNK1's int16 pair sums still fit)
}

// Q6_K: block blk's sum_g sc_g (levels_g . x_g) - 32 sum_g sc_g sum(x_g) for R rows of x, as 4 int32 lanes each
static inline __attribute__((always_inline)) void k6_block(const uint8_t *blk, int R, const kx *x8, long xs,
                                                           const int16_t *bs, long bss, v128_t *isum, v128_t *imin) {
    (void)imin;
    v128_t s8 = wasm_v128_load(blk + 192);
    v128_t sl = wasm_i16x8_extend_low_i8x16(s8), sh = wasm_i16x8_extend_high_i8x16(s8);
    for (int r = 0; r < R; r++) {  // starting from -32 sum_g sc_g sum(x_g), the levels' offset
        v128_t isc = wasm_i32x4_add(wasm_i32x4_dot_i16x8(sl, wasm_v128_load(bs + r * bss)),
                                    wasm_i32x4_dot_i16x8(sh, wasm_v128_load(bs + r * bss + 8)));
        isum[r] = wasm_i32x4_sub(wasm_i32x4_splat(0), wasm_i32x4_shl(isc, 5));
    }
    const v128_t m4 = wasm_i8x16_splat(0xF), m30 = wasm_i8x16_splat(0x30);
    // chunk j's 16s are groups 2j and 2j + 1 (scales lanes of sl for j < 4, of sh after)
#define K6_CHUNK(j, w, s, g)                                                                                   \
    {                                                                                                          \
        v128_t s0 = BCAST16(s, g), s1 = BCAST16(s, g + 1);                                                     \
        for (int r = 0; r < R; r++)                                                                            \
            isum[r] = wasm_i32x4_add(isum[r], K_CHUNK2(x8 + r * xs + 32 * (j), w, s0, s1));                    \
    }
    // half h: chunk 4h + r's low 4 bits from ql[64 h + 32 (r & 1)] (high nibbles for r >= 2), its 2 high bits
    // (qh >> 2r) & 3 moved to bits 4-5 in one shift (16-bit lanes: what comes in from the next byte is masked off)
#define K6_HALF(h, s)                                                                                          \
    {                                                                                                          \
        v32 l0 = v32_load(blk + 64 * (h)), l1 = v32_load(blk + 64 * (h) + 32), qh = v32_load(blk + 128 + 32 * (h)); \
        v32 w0 = {wasm_v128_or(wasm_v128_and(l0.lo, m4), wasm_v128_and(wasm_i16x8_shl(qh.lo, 4), m30)),        \
                  wasm_v128_or(wasm_v128_and(l0.hi, m4), wasm_v128_and(wasm_i16x8_shl(qh.hi, 4), m30))};       \
        K6_CHUNK(4 * (h), w0, s, 0)                                                                            \
        v32 w1 = {wasm_v128_or(wasm_v128_and(l1.lo, m4), wasm_v128_and(wasm_i16x8_shl(qh.lo, 2), m30)),        \
                  wasm_v128_or(wasm_v128_and(l1.hi, m4), wasm_v128_and(wasm_i16x8_shl(qh.hi, 2), m30))};       \
        K6_CHUNK(4 * (h) + 1, w1, s, 2)                                                                        \
        v32 w2 = {wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(l0.lo, 4), m4), wasm_v128_and(qh.lo, m30)),        \
                  wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(l0.hi, 4), m4), wasm_v128_and(qh.hi, m30))};       \
        K6_CHUNK(4 * (h) + 2, w2, s, 4)                                                                        \
        v32 w3 = {wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(l1.lo, 4), m4),                                   \
                               wasm_v128_and(wasm_u16x8_shr(qh.lo, 2), m30)),                                  \
                  wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(l1.hi, 4), m4),                                   \
                               wasm_v128_and(wasm_u16x8_shr(qh.hi, 2), m30))};                                 \
        K6_CHUNK(4 * (h) + 3, w3, s, 6)                                                                        \
    }
    K6_HALF(0, sl) K6_HALF(1, sh)
#undef K6_HALF
#undef K6_CHUNK
}

// y[o] for W's n rows and one row of x: four blocks' integer sums at a time, then their float steps in block order
#define DEFINE_ROW1_K(T, TSIZE, DAT, MIN, BLOCK)                                                              \
    static void row1_##T(int n, int k, const uint8_t *w, act_t a, float *y) {                                 \
        int nb = k / 256;                                                                                       \
        long rb = (long)nb * TSIZE;                                                                             \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + (long)o * rb;                                                               \
            float sum = 0.0f;                                                                                   \
            for (int b = 0; b < nb; b += 4) {                                                                   \
                int r = nb - b < 4 ? nb - b : 4;                                                                \
                v128_t is[4], im[4];                                                                            \
                for (int l = 0; l < 4; l++) {                                                                   \
                    is[l] = im[l] = wasm_i32x4_splat(0);                                                        \
                    if (l < r)                                                                                  \
                        BLOCK(wr + (long)(b + l) * TSIZE, 1, K_X(a) + 256 * (b + l), 0, a.bsum + 16 * (b + l), 0, \
                              &is[l], &im[l]);                                                                  \
                }                                                                                               \
                const uint8_t *blk = wr + (long)b * TSIZE;                                                      \
                v128_t dx = r == 4 ? wasm_v128_load(a.d + b) : floats_n(a.d + b, r);                            \
                float p[4], q[4];                                                                               \
                wasm_v128_store(p, wasm_f32x4_mul(wasm_f32x4_mul(halves4_n(blk + DAT, TSIZE, r), dx),           \
                                                  wasm_f32x4_convert_i32x4(sum4v(is[0], is[1], is[2], is[3])))); \
                if (MIN)                                                                                        \
                    wasm_v128_store(q, wasm_f32x4_mul(wasm_f32x4_mul(halves4_n(blk + 2, TSIZE, r), dx),         \
                                                      wasm_f32x4_convert_i32x4(sum4v(im[0], im[1], im[2], im[3])))); \
                for (int l = 0; l < r; l++) {                                                                   \
                    sum += p[l];                                                                                \
                    if (MIN)                                                                                    \
                        sum -= q[l];                                                                            \
                }                                                                                               \
            }                                                                                                   \
            y[o] = sum;                                                                                         \
        }                                                                                                       \
    }

// Prefill's products (m > 1): R (<= 4) rows of x per decoded block, each row's sums in its own lane once the
// block is done (sum4v), so each row's float steps, block by block as dot_T's, are one vector operation for R rows
#define DEFINE_ROWS4_K(T, TSIZE, DAT, MIN, BLOCK)                                                             \
    static void rows4_##T(int R, int r0, int n, int k, const uint8_t *w, act_t a, float *y, int ldy) {        \
        int nb = k / 256;                                                                                       \
        long rb = (long)nb * TSIZE;                                                                             \
        const kx *x8 = K_X(a) + (long)r0 * k;                                                                   \
        const int16_t *bs = a.bsum + (long)r0 * (k / 16);                                                       \
        for (int o = 0; o < n; o++) {                                                                           \
            const uint8_t *wr = w + (long)o * rb;                                                               \
            v128_t sum = wasm_f32x4_splat(0.0f);                                                                \
            for (int b = 0; b < nb; b++) {                                                                      \
                const uint8_t *blk = wr + (long)b * TSIZE;                                                      \
                v128_t is[4], im[4];                                                                            \
                for (int r = 0; r < 4; r++)                                                                     \
                    is[r] = im[r] = wasm_i32x4_splat(0);                                                        \
                BLOCK(blk, R, x8 + 256 * b, k, bs + 16 * b, k / 16, is, im);                                    \
                float dxs[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                        \
                for (int r = 0; r < R; r++)                                                                     \
                    dxs[r] = a.d[(long)(r0 + r) * nb + b];                                                      \
                v128_t dx = wasm_v128_load(dxs);                                                                \
                v128_t d = wasm_f32x4_splat(f16_to_f32(blk + DAT));                                             \
                v128_t fs = wasm_f32x4_convert_i32x4(sum4v(is[0], is[1], is[2], is[3]));                        \
                sum = wasm_f32x4_add(sum, wasm_f32x4_mul(wasm_f32x4_mul(d, dx), fs));                           \
                if (MIN) {                                                                                      \
                    v128_t dmin = wasm_f32x4_splat(f16_to_f32(blk + 2));                                        \
                    v128_t fm = wasm_f32x4_convert_i32x4(sum4v(im[0], im[1], im[2], im[3]));                    \
                    sum = wasm_f32x4_sub(sum, wasm_f32x4_mul(wasm_f32x4_mul(dmin, dx), fm));                    \
                }                                                                                               \
            }                                                                                                   \
            float out[4];                                                                                       \
            wasm_v128_store(out, sum);                                                                          \
            for (int r = 0; r < R; r++)                                                                         \
                y[(long)(r0 + r) * ldy + o] = out[r];                                                           \
        }                                                                                                       \
    }
DEFINE_ROW1_K(q4_k, 144, 0, 1, k4_block)
DEFINE_ROW1_K(q5_k, 176, 0, 1, k5_block)
DEFINE_ROW1_K(q6_k, 210, 208, 0, k6_block)
DEFINE_ROWS4_K(q4_k, 144, 0, 1, k4_block)
DEFINE_ROWS4_K(q5_k, 176, 0, 1, k5_block)
DEFINE_ROWS4_K(q6_k, 210, 208, 0, k6_block)
#endif

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
DEFINE_ROWS(q5_0b, 34, 32)
DEFINE_ROWS(q4_k, 144, 256)
DEFINE_ROWS(q5_k, 176, 256)
DEFINE_ROWS(q6_k, 210, 256)

// ---------------------------------------------------------------------------------------------- exports

static int block_of(int type) { return act_of(type) == ACT_Q8_K ? 256 : 32; }

// the activation block type W of `type` quantizes x to (0: Q8_0, 1: Q8_1, 2: Q8_K), -1 for a type without a kernel
EMBER_EXPORT(ember_q8_act_kind)
int ember_q8_act_kind(int type) { return act_of(type); }

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
            quantize_q8_k(xr, k, a.q + (long)r * k, a.q8 + (long)r * k, a.d + (long)r * (k / 256),
                          a.bsum + (long)r * (k / 16));
        else
            quantize_q8_0(xr, k, a.q + (long)r * k, a.q8 + (long)r * k, a.d + (long)r * (k / 32),
                          kind == ACT_Q8_1 ? a.s + (long)r * (k / 32) : 0, a.xsum + (long)r * (k / 32),
                          a.negsum ? a.negsum + (long)r * (k / 32) : 0);
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
    case Q4_0: PAGE_ROWS(q4_0) rows_q4_0(m, n, k, w, a, y, ldy); break;
    case Q4_1: PAGE_ROWS(q4_1) rows_q4_1(m, n, k, w, a, y, ldy); break;
    case Q5_0: PAGE_ROWS(q5_0) rows_q5_0(m, n, k, w, a, y, ldy); break;
    case Q5_1: PAGE_ROWS(q5_1) rows_q5_1(m, n, k, w, a, y, ldy); break;
    case Q8_0: PAGE_ROWS(q8_0) rows_q8_0(m, n, k, w, a, y, ldy); break;
    case Q5_0B: PAGE_ROWS(q5_0b) rows_q5_0b(m, n, k, w, a, y, ldy); break;
    case Q4_K: PAGE_ROWS(q4_k) rows_q4_k(m, n, k, w, a, y, ldy); break;
    case Q5_K: PAGE_ROWS(q5_k) rows_q5_k(m, n, k, w, a, y, ldy); break;
    default:   PAGE_ROWS(q6_k) rows_q6_k(m, n, k, w, a, y, ldy); break;
    }
    return 0;
}

static long row_bytes(int type, int k) {  // bytes of one row of W's blocks
    static const short size[] = {[Q4_0] = 18, [Q4_1] = 20, [Q5_0] = 22, [Q5_1] = 24, [Q8_0] = 34,
                                 [Q4_K] = 144, [Q5_K] = 176, [Q6_K] = 210, [Q5_0B] = 34};
    return (long)(k / block_of(type)) * size[type];
}

typedef struct {
    int type, m, k, ldy;
    long row_bytes;
    const uint8_t *w;
    const void *act;
    float *y;
} dot_job;

static void dot_rows(const void *p, int r0, int r1, int thread) {  // rows [r0, r1) of W (parallel.h)
    const dot_job *j = (const dot_job *)p;
    (void)thread;
    ember_q8_dot(j->type, j->m, r1 - r0, j->k, j->w + (long)r0 * j->row_bytes, j->act, j->y + r0, j->ldy);
}

// ember_q8_dot with W's n rows split between threads (parallel.h): 0, -1 (no kernel), PARALLEL_LOST.
EMBER_EXPORT(ember_q8_dot_rows)
int ember_q8_dot_rows(int type, int m, int n, int k, const uint8_t *w, const void *act, float *y, int ldy) {
    if (ember_q8_act_bytes(type, m, k) < 0)
        return -1;
    dot_job j = {type, m, k, ldy, row_bytes(type, k), w, act, y};
    return ember_parallel(dot_rows, &j, n, ember_chunks(n, (long)m * k));
}

// quantize then dot in one call (a call costs ~10 us under Pyodide's ctypes), W's rows split between threads
EMBER_EXPORT(ember_q8_matmul)
int ember_q8_matmul(int type, int m, int n, int k, const uint8_t *w, const float *x, int ldx, float *y, int ldy,
                    void *act) {
    if (ember_q8_quantize(type, m, k, x, ldx, act) != 0)
        return -1;
    return ember_q8_dot_rows(type, m, n, k, w, act, y, ldy);
}

// Q5_0 blocks (src) as Q5_0B blocks (dst): n blocks, from the last one back, so dst may be src itself in a buffer
// of 34 n bytes (block i's 34 bytes end at or past where src's block i does: no block is written before it is
// read). 0, or -1 for a type without a bytes layout.
EMBER_EXPORT(ember_q8_expand)
int ember_q8_expand(int type, long n, const uint8_t *src, uint8_t *dst) {
    if (type != Q5_0 || n < 0)
        return -1;
    for (long i = n - 1; i >= 0; i--) {
        const uint8_t *b = src + 22 * i;
        uint8_t d0 = b[0], d1 = b[1], q[32];
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        for (int j = 0; j < 16; j++) {
            q[j] = (uint8_t)((b[6 + j] & 0xF) | ((qh >> j) & 1) << 4);
            q[j + 16] = (uint8_t)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        uint8_t *o = dst + 34 * i;
        o[0] = d0, o[1] = d1;
        __builtin_memcpy(o + 2, q, 32);
    }
    return 0;
}

// The index numpy's argmax gives for y (n floats): the first of the largest values, or the first NaN where there
// is one (-0 and +0 are equal); -1 for n < 1. A greedy decode's pick from an LM head's logits where they lie (the
// page's pool: Gemma 3's 262k, read back and scanned by numpy, were ~0.2 ms of a token). Two passes: the largest
// value (vector maxima propagate a NaN), then the first element equal to it, or the first NaN.
EMBER_EXPORT(ember_argmax_f32)
int ember_argmax_f32(const float *y, int n) {
    if (n < 1)
        return -1;
    int i = 0, nan = 0;
    float top = -__builtin_inff();
#if defined(__wasm_simd128__)
    if (n >= 16) {
        v128_t m0 = wasm_v128_load(y), m1 = wasm_v128_load(y + 4);
        v128_t m2 = wasm_v128_load(y + 8), m3 = wasm_v128_load(y + 12);
        for (i = 16; i + 16 <= n; i += 16) {
            m0 = wasm_f32x4_max(m0, wasm_v128_load(y + i)), m1 = wasm_f32x4_max(m1, wasm_v128_load(y + i + 4));
            m2 = wasm_f32x4_max(m2, wasm_v128_load(y + i + 8)), m3 = wasm_f32x4_max(m3, wasm_v128_load(y + i + 12));
        }
        v128_t m = wasm_f32x4_max(wasm_f32x4_max(m0, m1), wasm_f32x4_max(m2, m3));
        m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
        m = wasm_f32x4_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
        top = wasm_f32x4_extract_lane(m, 0);
        nan = top != top;
    }
#endif
    for (; i < n; i++) {
        nan |= y[i] != y[i];
        top = y[i] > top ? y[i] : top;
    }
    i = 0;
    if (nan) {
        while (y[i] == y[i])
            i++;
        return i;
    }
#if defined(__wasm_simd128__)
    v128_t t = wasm_f32x4_splat(top);
    for (; i + 16 <= n; i += 16) {
        v128_t e0 = wasm_f32x4_eq(wasm_v128_load(y + i), t), e1 = wasm_f32x4_eq(wasm_v128_load(y + i + 4), t);
        v128_t e2 = wasm_f32x4_eq(wasm_v128_load(y + i + 8), t), e3 = wasm_f32x4_eq(wasm_v128_load(y + i + 12), t);
        v128_t e = wasm_v128_or(wasm_v128_or(e0, e1), wasm_v128_or(e2, e3));
        if (wasm_v128_any_true(e))
            break;
    }
#endif
    while (y[i] != top)
        i++;
    return i;
}
