// The few vector operations the integer dot-product kernels (q8dot.c) need, on 32 signed bytes at a time (one
// chunk of 32 weights or activations), for each target they are compiled for:
//   wasm SIMD128 (the page), x86 AVX2 and SSSE3 (native), and plain C (any other machine, and the
//   reference the tests compare every vector path with: EMBER_SIMD_SCALAR).
// Only integer work goes through here, and integer sums are exact in any order, so every target produces the
// same integers; the float steps are scalar C in q8dot.c, in one order for all targets (bit-identical output).
//
//   v32: 32 int8 lanes (weights' levels).  xact / xv: how the activations are stored and loaded, 32 at a time:
//   int8 (x86's byte multiply-add takes them as they are), int16 in wasm (widened once when quantized, not at each
//   of the n rows they meet; the relaxed-SIMD build keeps bytes in that room instead, ACT_I8_COPY).
//   acc: int32 partial sums of a chunk's products, kept as two halves (elements 0-15 and 16-31) because Q6_K
//   scales each 16 on its own.  f8: 8 float lanes, for 8 blocks' float steps at once (each
//   lane's IEEE operations are the scalar ones, so the lanes' values do not depend on the target).
#pragma once
#include <stdint.h>

#include "half.h"

#if defined(EMBER_SIMD_SCALAR)
#define EMBER_SIMD "scalar"
#elif defined(__wasm_simd128__)
#define EMBER_SIMD "wasm-simd128"
#include <wasm_simd128.h>
#elif defined(__AVX2__) && (defined(__AVXVNNI__) || defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define EMBER_SIMD "avx2-vnni"  // AVX2's paths, the byte dot products in one instruction (the same integers)
#define EMBER_VNNI
#include <immintrin.h>
#elif defined(__AVX2__)
#define EMBER_SIMD "avx2"
#include <immintrin.h>
#elif defined(__SSSE3__)
#define EMBER_SIMD "ssse3"
#include <immintrin.h>
#else
#define EMBER_SIMD "scalar"
#define EMBER_SIMD_SCALAR
#endif

// FIFTH[v]: byte i is 0x10 when bit i of v is set, else 0 (a 2 KiB table built by the preprocessor): the 5th bits
// of Q5_0 / Q5_1 levels, 8 at a time
#define FIFTH_BYTE(v, i) ((((uint64_t)(v) >> (i)) & 1) << (8 * (i) + 4))
#define FIFTH_ONE(v) (FIFTH_BYTE(v, 0) | FIFTH_BYTE(v, 1) | FIFTH_BYTE(v, 2) | FIFTH_BYTE(v, 3) | \
                      FIFTH_BYTE(v, 4) | FIFTH_BYTE(v, 5) | FIFTH_BYTE(v, 6) | FIFTH_BYTE(v, 7))
#define FIFTH_4(v) FIFTH_ONE(v), FIFTH_ONE(v + 1), FIFTH_ONE(v + 2), FIFTH_ONE(v + 3)
#define FIFTH_16(v) FIFTH_4(v), FIFTH_4(v + 4), FIFTH_4(v + 8), FIFTH_4(v + 12)
#define FIFTH_64(v) FIFTH_16(v), FIFTH_16(v + 16), FIFTH_16(v + 32), FIFTH_16(v + 48)
static const uint64_t FIFTH[256] = {FIFTH_64(0), FIFTH_64(64), FIFTH_64(128), FIFTH_64(192)};

// ---------------------------------------------------------------------------------------------- plain C
#if defined(EMBER_SIMD_SCALAR)
typedef struct { int8_t b[32]; } v32;
typedef struct { int32_t h[2]; } acc;
typedef int8_t xact;
typedef v32 xv;

static inline v32 v32_load(const void *p) {
    v32 v;
    for (int i = 0; i < 32; i++) v.b[i] = ((const int8_t *)p)[i];
    return v;
}
static inline v32 v32_load2(const void *lo, const void *hi) {  // 16 bytes from each
    v32 v;
    for (int i = 0; i < 16; i++) v.b[i] = ((const int8_t *)lo)[i], v.b[16 + i] = ((const int8_t *)hi)[i];
    return v;
}
static inline v32 v32_u64x4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {  // little-endian bytes of a, b, c, d
    uint64_t w[4] = {a, b, c, d};
    v32 v;
    for (int i = 0; i < 32; i++) v.b[i] = (int8_t)(w[i / 8] >> (8 * (i % 8)));
    return v;
}
#define V32_MAP(name, expr)                                     \
    static inline v32 name(v32 a, v32 b) {                      \
        v32 v;                                                  \
        for (int i = 0; i < 32; i++) v.b[i] = (int8_t)(expr);   \
        return v;                                               \
    }
V32_MAP(v32_and, a.b[i] & b.b[i])
V32_MAP(v32_or, a.b[i] | b.b[i])
static inline v32 v32_splat8(int c) {
    v32 v;
    for (int i = 0; i < 32; i++) v.b[i] = (int8_t)c;
    return v;
}
// (v >> s) & m in every byte: the vector targets shift 16-bit lanes (bits of the next byte come in at the top),
// so m must drop the top s bits; the same result here byte by byte
static inline v32 v32_bits(v32 a, int s, int m) {
    v32 v;
    for (int i = 0; i < 32; i++) v.b[i] = (int8_t)(((uint8_t)a.b[i] >> s) & m);
    return v;
}
static inline v32 v32_shl(v32 a, int s) {  // a << s in every byte, for bytes with no bit reaching past bit 7
    v32 v;
    for (int i = 0; i < 32; i++) v.b[i] = (int8_t)((uint8_t)a.b[i] << s);
    return v;
}
static inline v32 v32_nibbles(const uint8_t *p) {  // 16 bytes -> their low nibbles, then their high nibbles
    v32 v;
    for (int i = 0; i < 16; i++) v.b[i] = (int8_t)(p[i] & 0xF), v.b[16 + i] = (int8_t)(p[i] >> 4);
    return v;
}
static inline xv xv_load(const xact *p, const int8_t *p8) { (void)p8; return v32_load(p); }
static inline acc acc_zero(void) { acc a = {{0, 0}}; return a; }
static inline acc acc_dot(v32 w, xv x) {  // w: any int8; x: int8 in [-127, 127] (the activations)
    acc a = {{0, 0}};
    for (int i = 0; i < 32; i++) a.h[i / 16] += (int32_t)w.b[i] * x.b[i];
    return a;
}
static inline acc acc_dotu(v32 w, xv x) {  // w: unsigned levels in [0, 127] (x86 multiplies them as they are)
    acc a = {{0, 0}};
    for (int i = 0; i < 32; i++) a.h[i / 16] += (int32_t)(uint8_t)w.b[i] * x.b[i];
    return a;
}
static inline acc acc_dotu_scaled(v32 w, xv x, int s0, int s1) {
    acc a = acc_dotu(w, x);
    a.h[0] *= s0, a.h[1] *= s1;
    return a;
}
static inline acc acc_dot16(const int8_t *s, const int16_t *b) {  // sum of s[g] b[g], g < 16 (Q6_K's scales)
    acc a = {{0, 0}};
    for (int g = 0; g < 16; g++) a.h[0] += (int32_t)s[g] * b[g];
    return a;
}
static inline acc acc_add(acc a, acc b) { a.h[0] += b.h[0], a.h[1] += b.h[1]; return a; }
static inline int32_t acc_sum(acc a) { return a.h[0] + a.h[1]; }
typedef struct { float f[8]; } f8;
static inline f8 acc_sum8(const acc *a) {  // lane i = (float)acc_sum(a[i])
    f8 v;
    for (int i = 0; i < 8; i++) v.f[i] = (float)acc_sum(a[i]);
    return v;
}
static inline f8 f8_load(const float *p) {
    f8 v;
    for (int i = 0; i < 8; i++) v.f[i] = p[i];
    return v;
}
static inline void f8_store(float *p, f8 v) { for (int i = 0; i < 8; i++) p[i] = v.f[i]; }
static inline f8 f8_mul(f8 a, f8 b) { for (int i = 0; i < 8; i++) a.f[i] *= b.f[i]; return a; }
static inline f8 f8_add(f8 a, f8 b) { for (int i = 0; i < 8; i++) a.f[i] += b.f[i]; return a; }
static inline f8 f8_zero(void) { f8 v = {{0}}; return v; }
static inline f8 f8_splat(float c) {
    f8 v;
    for (int i = 0; i < 8; i++) v.f[i] = c;
    return v;
}
static inline f8 f8_sub(f8 a, f8 b) { for (int i = 0; i < 8; i++) a.f[i] -= b.f[i]; return a; }
static inline f8 f8_halves(const uint8_t *p, int stride) {  // the 8 halves at p, p + stride, ... as floats
    f8 v;
    for (int i = 0; i < 8; i++) v.f[i] = f16_to_f32(p + i * stride);
    return v;
}
static inline v32 v32_fifth(const uint8_t *qh) {  // byte i: 0x10 where bit i of the 32 bits at qh is set, else 0
    return v32_u64x4(FIFTH[qh[0]], FIFTH[qh[1]], FIFTH[qh[2]], FIFTH[qh[3]]);
}

// ---------------------------------------------------------------------------------------------- wasm SIMD128
#elif defined(__wasm_simd128__)
typedef struct { v128_t lo, hi; } v32;
typedef struct { v128_t lo, hi; } acc;
typedef int16_t xact;
#if defined(__wasm_relaxed_simd__)
// relaxed SIMD's dot of bytes by 7-bit values (16 multiply-adds an instruction, exact on every engine when no 7-bit
// value has its top bit) takes the unsigned levels (<= 63) as they are against x as bytes, and Q8_0's signed
// levels against |x| (acc_dot). So x is stored as bytes (the int8 copy, ACT_I8_COPY) and, in the int16 room, each
// 32's |x| then their signs
#define ACT_I8_COPY 1
typedef struct { v128_t a, b, c, d, lo8, hi8; } xv;  // a, b: |x| (bytes 0-15, 16-31); c, d: x's signs (0 / -1)
#else
typedef struct { v128_t a, b, c, d; } xv;  // 32 int16
#endif

static inline v32 v32_load(const void *p) {
    v32 v = {wasm_v128_load(p), wasm_v128_load((const uint8_t *)p + 16)};
    return v;
}
static inline xv xv_load(const xact *p, const int8_t *p8) {  // (a load the dot does not use is dropped)
#if defined(ACT_I8_COPY)
    xv v = {wasm_v128_load(p), wasm_v128_load(p + 8), wasm_v128_load(p + 16), wasm_v128_load(p + 24),
            wasm_v128_load(p8), wasm_v128_load(p8 + 16)};
#else
    (void)p8;
    xv v = {wasm_v128_load(p), wasm_v128_load(p + 8), wasm_v128_load(p + 16), wasm_v128_load(p + 24)};
#endif
    return v;
}
static inline v32 v32_load2(const void *lo, const void *hi) { v32 v = {wasm_v128_load(lo), wasm_v128_load(hi)}; return v; }
static inline v32 v32_u64x4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    v32 v = {wasm_i64x2_make((int64_t)a, (int64_t)b), wasm_i64x2_make((int64_t)c, (int64_t)d)};
    return v;
}
static inline v32 v32_and(v32 a, v32 b) { v32 v = {wasm_v128_and(a.lo, b.lo), wasm_v128_and(a.hi, b.hi)}; return v; }
static inline v32 v32_or(v32 a, v32 b) { v32 v = {wasm_v128_or(a.lo, b.lo), wasm_v128_or(a.hi, b.hi)}; return v; }
static inline v32 v32_splat8(int c) { v32 v = {wasm_i8x16_splat(c), wasm_i8x16_splat(c)}; return v; }
static inline v32 v32_bits(v32 a, int s, int m) {  // wasm has no 8-bit shift on x86 (V8 emulates it): 16-bit ones
    v128_t mm = wasm_i8x16_splat(m);
    v32 v = {wasm_v128_and(wasm_u16x8_shr(a.lo, s), mm), wasm_v128_and(wasm_u16x8_shr(a.hi, s), mm)};
    return v;
}
static inline v32 v32_shl(v32 a, int s) { v32 v = {wasm_i16x8_shl(a.lo, s), wasm_i16x8_shl(a.hi, s)}; return v; }
static inline v32 v32_nibbles(const uint8_t *p) {
    v128_t q = wasm_v128_load(p), m = wasm_i8x16_splat(0xF);
    v32 v = {wasm_v128_and(q, m), wasm_v128_and(wasm_u16x8_shr(q, 4), m)};
    return v;
}
static inline acc acc_zero(void) { acc a = {wasm_i32x4_splat(0), wasm_i32x4_splat(0)}; return a; }
static inline v128_t dot16(v128_t w, v128_t x0, v128_t x1) {  // 16 products summed into 4 lanes
    return wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(w), x0),
                          wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(w), x1));
}
#if defined(ACT_I8_COPY)
// Q8_0's signed levels against |x| (7 bits), the sign of x moved onto w by complementing: w ^ s is w where x >= 0
// and -w - 1 where x < 0 (never out of range, even for w = -128), so this is sum(w x) - sum(|x| : x < 0), and the
// caller adds that second sum back (the activations' `negsum`)
static inline acc acc_dot(v32 w, xv x) {  // (the byte dot as below: i16x8's, then widened)
    acc a = {wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_xor(w.lo, x.c), x.a)),
             wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_xor(w.hi, x.d), x.b))};
    return a;
}
#else
static inline acc acc_dot(v32 w, xv x) { acc a = {dot16(w.lo, x.a, x.b), dot16(w.hi, x.c, x.d)}; return a; }
#endif
static inline v128_t dot16u(v128_t w, v128_t x0, v128_t x1) {
    return wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(w), x0),
                          wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(w), x1));
}
#if defined(ACT_I8_COPY)
// i16x8.relaxed_dot (one pmaddubsw on x86) widened by extadd_pairwise (one pmaddwd against a constant): V8 lowers
// i32x4.relaxed_dot_i8x16_i7x16_add to five instructions, the ones it multiplies by made afresh each time
static inline acc acc_dotu(v32 w, xv x) {
    acc a = {wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(x.lo8, w.lo)),
             wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(x.hi8, w.hi))};
    return a;
}
#else
static inline acc acc_dotu(v32 w, xv x) { acc a = {dot16u(w.lo, x.a, x.b), dot16u(w.hi, x.c, x.d)}; return a; }
#endif
#if defined(ACT_I8_COPY)
// each 16's byte dot as int16 pair sums (levels <= 63: at most 2 * 63 * 127), widened and scaled in one
// i32x4.dot_i16x8 against the scale (one pmaddwd, where widening then multiplying took V8 seven instructions)
static inline acc acc_dotu_scaled(v32 w, xv x, int s0, int s1) {
    acc c = {wasm_i32x4_dot_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(x.lo8, w.lo), wasm_i16x8_splat((int16_t)s0)),
             wasm_i32x4_dot_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(x.hi8, w.hi), wasm_i16x8_splat((int16_t)s1))};
    return c;
}
#else
static inline acc acc_dotu_scaled(v32 w, xv x, int s0, int s1) {
    acc d = acc_dotu(w, x);
    acc c = {wasm_i32x4_mul(d.lo, wasm_i32x4_splat(s0)), wasm_i32x4_mul(d.hi, wasm_i32x4_splat(s1))};
    return c;
}
#endif
// The same integer sums folded into one vector of 4 partial sums (whose total is the chunk's dot), for q8dot.c's
// one-row kernel (row1_T). With relaxed SIMD the byte dots are i16x8.relaxed_dot (one pmaddubsw on x86) widened by
// extadd_pairwise (one pmaddwd): V8 lowers the i32x4 form to five instructions. Pair sums stay in int16: a
// signed one is at most 2 * 128 * 127, and two unsigned chunks' of levels <= 63 add to at most 4 * 63 * 127.
static inline v128_t dot4(v32 w, xv x) {
#if defined(ACT_I8_COPY)
    return wasm_i32x4_add(wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_xor(w.lo, x.c), x.a)),
                          wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_xor(w.hi, x.d), x.b)));
#else
    return wasm_i32x4_add(dot16(w.lo, x.a, x.b), dot16(w.hi, x.c, x.d));
#endif
}
static inline v128_t dotu4(v32 w, xv x) {  // w: levels <= 63
#if defined(ACT_I8_COPY)
    return wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(x.lo8, w.lo),
                                                           wasm_i16x8_relaxed_dot_i8x16_i7x16(x.hi8, w.hi)));
#else
    return wasm_i32x4_add(dot16u(w.lo, x.a, x.b), dot16u(w.hi, x.c, x.d));
#endif
}
// lane r = the total of a[r] (4 partial sums each)
static inline v128_t sum4v(v128_t a, v128_t b, v128_t c, v128_t d) {
    v128_t ab = wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), wasm_i32x4_shuffle(a, b, 2, 6, 3, 7));
    v128_t cd = wasm_i32x4_add(wasm_i32x4_shuffle(c, d, 0, 4, 1, 5), wasm_i32x4_shuffle(c, d, 2, 6, 3, 7));
    return wasm_i32x4_add(wasm_i32x4_shuffle(ab, cd, 0, 1, 4, 5), wasm_i32x4_shuffle(ab, cd, 2, 3, 6, 7));
}
static inline acc acc_dot16(const int8_t *s, const int16_t *b) {
    v128_t v = wasm_v128_load(s);
    acc a = {wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(v), wasm_v128_load(b)),
             wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(v), wasm_v128_load(b + 8))};
    return a;
}
static inline acc acc_add(acc a, acc b) { acc c = {wasm_i32x4_add(a.lo, b.lo), wasm_i32x4_add(a.hi, b.hi)}; return c; }
static inline int32_t acc_sum(acc a) {
    v128_t s = wasm_i32x4_add(a.lo, a.hi);
    return wasm_i32x4_extract_lane(s, 0) + wasm_i32x4_extract_lane(s, 1) + wasm_i32x4_extract_lane(s, 2) +
           wasm_i32x4_extract_lane(s, 3);
}
static inline v128_t sum4(const acc *a) {  // the sums of a[0..3] in 4 lanes: a 4 x 4 transpose, then adds
    return sum4v(wasm_i32x4_add(a[0].lo, a[0].hi), wasm_i32x4_add(a[1].lo, a[1].hi),
                 wasm_i32x4_add(a[2].lo, a[2].hi), wasm_i32x4_add(a[3].lo, a[3].hi));
}
typedef struct { v128_t lo, hi; } f8;
static inline f8 acc_sum8(const acc *a) { f8 v = {wasm_f32x4_convert_i32x4(sum4(a)), wasm_f32x4_convert_i32x4(sum4(a + 4))}; return v; }
static inline f8 f8_load(const float *p) { f8 v = {wasm_v128_load(p), wasm_v128_load(p + 4)}; return v; }
static inline void f8_store(float *p, f8 v) { wasm_v128_store(p, v.lo), wasm_v128_store(p + 4, v.hi); }
static inline f8 f8_mul(f8 a, f8 b) { f8 v = {wasm_f32x4_mul(a.lo, b.lo), wasm_f32x4_mul(a.hi, b.hi)}; return v; }
static inline f8 f8_add(f8 a, f8 b) { f8 v = {wasm_f32x4_add(a.lo, b.lo), wasm_f32x4_add(a.hi, b.hi)}; return v; }
static inline f8 f8_zero(void) { f8 v = {wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f)}; return v; }
static inline f8 f8_splat(float c) { f8 v = {wasm_f32x4_splat(c), wasm_f32x4_splat(c)}; return v; }
static inline f8 f8_sub(f8 a, f8 b) { f8 v = {wasm_f32x4_sub(a.lo, b.lo), wasm_f32x4_sub(a.hi, b.hi)}; return v; }
// u32 lanes holding halves -> f32: half.h's f16_to_f32, 4 at a time, its masks made by shifts (V8 builds each
// 128-bit constant anew where it is used: three instructions): the magnitude (h << 17) >> 4, the sign (h >> 15) << 31
static inline v128_t halves_to_f32(v128_t h) {
    v128_t mag = wasm_u32x4_shr(wasm_i32x4_shl(h, 17), 4);
    v128_t f = wasm_f32x4_mul(mag, wasm_f32x4_splat(0x1p112f));
    v128_t special = wasm_u32x4_ge(mag, wasm_i32x4_splat(0x7C00 << 13));  // exponent 31: inf or NaN
    f = wasm_v128_or(f, wasm_v128_and(special, wasm_i32x4_splat(0x7F800000)));
    return wasm_v128_or(f, wasm_i32x4_shl(wasm_u32x4_shr(h, 15), 31));
}
static inline f8 f8_halves(const uint8_t *p, int stride) {  // (scalar conversions would cost ~15 ops a block)
    v128_t h = wasm_i16x8_splat(0);
    h = wasm_v128_load16_lane(p, h, 0), h = wasm_v128_load16_lane(p + stride, h, 1);
    h = wasm_v128_load16_lane(p + 2 * stride, h, 2), h = wasm_v128_load16_lane(p + 3 * stride, h, 3);
    h = wasm_v128_load16_lane(p + 4 * stride, h, 4), h = wasm_v128_load16_lane(p + 5 * stride, h, 5);
    h = wasm_v128_load16_lane(p + 6 * stride, h, 6), h = wasm_v128_load16_lane(p + 7 * stride, h, 7);
    f8 v = {halves_to_f32(wasm_u32x4_extend_low_u16x8(h)), halves_to_f32(wasm_u32x4_extend_high_u16x8(h))};
    return v;
}
static inline v128_t halves4(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2, const uint8_t *p3) {  // as f32
    v128_t h = wasm_i32x4_splat(0);
    h = wasm_v128_load16_lane(p0, h, 0), h = wasm_v128_load16_lane(p1, h, 2);
    h = wasm_v128_load16_lane(p2, h, 4), h = wasm_v128_load16_lane(p3, h, 6);
    return halves_to_f32(h);
}
static inline v32 v32_fifth(const uint8_t *qh) {
    return v32_u64x4(FIFTH[qh[0]], FIFTH[qh[1]], FIFTH[qh[2]], FIFTH[qh[3]]);
}

// ---------------------------------------------------------------------------------------------- x86 AVX2
#elif defined(__AVX2__)
typedef __m256i v32;
typedef __m256i acc;  // lanes 0-3: elements 0-15, lanes 4-7: elements 16-31
typedef int8_t xact;
typedef __m256i xv;

static inline v32 v32_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline v32 v32_load2(const void *lo, const void *hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)lo)),
                                   _mm_loadu_si128((const __m128i *)hi), 1);
}
static inline v32 v32_u64x4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return _mm256_setr_epi64x((long long)a, (long long)b, (long long)c, (long long)d);
}
static inline v32 v32_and(v32 a, v32 b) { return _mm256_and_si256(a, b); }
static inline v32 v32_or(v32 a, v32 b) { return _mm256_or_si256(a, b); }
static inline v32 v32_splat8(int c) { return _mm256_set1_epi8((char)c); }
static inline v32 v32_bits(v32 a, int s, int m) {
    return _mm256_and_si256(_mm256_srli_epi16(a, s), _mm256_set1_epi8((char)m));
}
static inline v32 v32_shl(v32 a, int s) { return _mm256_slli_epi16(a, s); }
static inline v32 v32_nibbles(const uint8_t *p) {
    __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_blend_epi32(q, _mm256_srli_epi16(q, 4), 0xF0), _mm256_set1_epi8(0xF));
}
static inline xv xv_load(const xact *p, const int8_t *p8) { (void)p8; return v32_load(p); }
static inline acc acc_zero(void) { return _mm256_setzero_si256(); }
// |w| (unsigned, 128 for -128) times x with w's sign, pairs summed in 16 bits (<= 2 * 128 * 127, no saturation
// for x in [-127, 127]), then pairs of those in 32 bits
// With VNNI, one dpbusd: the four products of a 32-bit lane summed into it at once, never through 16 bits (where the
// pairs above never saturate either), so the same integer in every lane
#if defined(EMBER_VNNI) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define DPBUSD(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#elif defined(EMBER_VNNI)
#define DPBUSD(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#endif
static inline acc acc_dot(v32 w, xv x) {
#if defined(DPBUSD)
    return DPBUSD(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
#else
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}
// unsigned levels (<= 127) multiply x as they are, no sign transfer; scales enter the pairs' 32-bit sums
// (|s| <= 128: at most 2 * 16129 * 128 a lane), one madd for both steps
static inline acc acc_dotu(v32 w, xv x) {
#if defined(DPBUSD)
    return DPBUSD(w, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}
static inline acc acc_dotu_scaled(v32 w, xv x, int s0, int s1) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x),
                             _mm256_setr_epi16(s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1));
}
static inline acc acc_dot16(const int8_t *s, const int16_t *b) {
    return _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)s)),
                             _mm256_loadu_si256((const __m256i *)b));
}
static inline acc acc_add(acc a, acc b) { return _mm256_add_epi32(a, b); }
static inline int32_t acc_sum(acc a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
typedef __m256 f8;
static inline f8 acc_sum8(const acc *a) {  // hadd within 128-bit halves, then the halves
    __m256i abcd = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    __m256i efgh = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
    __m256i lo = _mm256_permute2x128_si256(abcd, efgh, 0x20), hi = _mm256_permute2x128_si256(abcd, efgh, 0x31);
    return _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi));
}
static inline f8 f8_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void f8_store(float *p, f8 v) { _mm256_storeu_ps(p, v); }
static inline f8 f8_mul(f8 a, f8 b) { return _mm256_mul_ps(a, b); }
static inline f8 f8_add(f8 a, f8 b) { return _mm256_add_ps(a, b); }
static inline f8 f8_zero(void) { return _mm256_setzero_ps(); }
static inline f8 f8_splat(float c) { return _mm256_set1_ps(c); }
static inline f8 f8_sub(f8 a, f8 b) { return _mm256_sub_ps(a, b); }
static inline short half_at(const uint8_t *p) { return (short)(p[0] | (p[1] << 8)); }
static inline f8 f8_halves(const uint8_t *p, int stride) {  // in registers (8 scalar stores then a vector load
    // would stall on store forwarding)
#if defined(__F16C__)
    return _mm256_cvtph_ps(_mm_setr_epi16(half_at(p), half_at(p + stride), half_at(p + 2 * stride), half_at(p + 3 * stride),
                                          half_at(p + 4 * stride), half_at(p + 5 * stride), half_at(p + 6 * stride),
                                          half_at(p + 7 * stride)));
#else
    return _mm256_setr_ps(f16_to_f32(p), f16_to_f32(p + stride), f16_to_f32(p + 2 * stride), f16_to_f32(p + 3 * stride),
                          f16_to_f32(p + 4 * stride), f16_to_f32(p + 5 * stride), f16_to_f32(p + 6 * stride),
                          f16_to_f32(p + 7 * stride));
#endif
}
static inline v32 v32_fifth(const uint8_t *qh) {  // ggml's bytes_from_bits_32: byte i looks at bit i of its byte
    uint32_t bits;
    __builtin_memcpy(&bits, qh, 4);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7FBFDFEFF7FBFDFE));
    return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

// ---------------------------------------------------------------------------------------------- x86 SSSE3
#else
typedef struct { __m128i lo, hi; } v32;
typedef struct { __m128i lo, hi; } acc;
typedef int8_t xact;
typedef v32 xv;

static inline v32 v32_load(const void *p) {
    v32 v = {_mm_loadu_si128((const __m128i *)p), _mm_loadu_si128((const __m128i *)p + 1)};
    return v;
}
static inline v32 v32_load2(const void *lo, const void *hi) {
    v32 v = {_mm_loadu_si128((const __m128i *)lo), _mm_loadu_si128((const __m128i *)hi)};
    return v;
}
static inline v32 v32_u64x4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    v32 v = {_mm_set_epi64x((long long)b, (long long)a), _mm_set_epi64x((long long)d, (long long)c)};
    return v;
}
static inline v32 v32_and(v32 a, v32 b) { v32 v = {_mm_and_si128(a.lo, b.lo), _mm_and_si128(a.hi, b.hi)}; return v; }
static inline v32 v32_or(v32 a, v32 b) { v32 v = {_mm_or_si128(a.lo, b.lo), _mm_or_si128(a.hi, b.hi)}; return v; }
static inline v32 v32_splat8(int c) { v32 v = {_mm_set1_epi8((char)c), _mm_set1_epi8((char)c)}; return v; }
static inline v32 v32_bits(v32 a, int s, int m) {
    __m128i mm = _mm_set1_epi8((char)m);
    v32 v = {_mm_and_si128(_mm_srli_epi16(a.lo, s), mm), _mm_and_si128(_mm_srli_epi16(a.hi, s), mm)};
    return v;
}
static inline v32 v32_shl(v32 a, int s) { v32 v = {_mm_slli_epi16(a.lo, s), _mm_slli_epi16(a.hi, s)}; return v; }
static inline v32 v32_nibbles(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0xF);
    v32 v = {_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m)};
    return v;
}
static inline xv xv_load(const xact *p, const int8_t *p8) { (void)p8; return v32_load(p); }
static inline acc acc_zero(void) { acc a = {_mm_setzero_si128(), _mm_setzero_si128()}; return a; }
static inline __m128i dot16(__m128i w, __m128i x) {  // as the AVX2 acc_dot, 16 bytes
    return _mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(w, w), _mm_sign_epi8(x, w)), _mm_set1_epi16(1));
}
static inline acc acc_dot(v32 w, xv x) { acc a = {dot16(w.lo, x.lo), dot16(w.hi, x.hi)}; return a; }
static inline __m128i dot16u(__m128i w, __m128i x, int s) {
    return _mm_madd_epi16(_mm_maddubs_epi16(w, x), _mm_set1_epi16((short)s));
}
static inline acc acc_dotu(v32 w, xv x) { acc a = {dot16u(w.lo, x.lo, 1), dot16u(w.hi, x.hi, 1)}; return a; }
static inline acc acc_dotu_scaled(v32 w, xv x, int s0, int s1) { acc a = {dot16u(w.lo, x.lo, s0), dot16u(w.hi, x.hi, s1)}; return a; }
static inline acc acc_dot16(const int8_t *s, const int16_t *b) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);  // bytes to 16 bits with their signs, in SSE2
    __m128i lo = _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8), hi = _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8);
    acc a = {_mm_madd_epi16(lo, _mm_loadu_si128((const __m128i *)b)),
             _mm_madd_epi16(hi, _mm_loadu_si128((const __m128i *)b + 1))};
    return a;
}
static inline acc acc_add(acc a, acc b) { acc c = {_mm_add_epi32(a.lo, b.lo), _mm_add_epi32(a.hi, b.hi)}; return c; }
static inline int32_t acc_sum(acc a) {
    __m128i s = _mm_add_epi32(a.lo, a.hi);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
static inline __m128i sum4(const acc *a) {
    __m128i ab = _mm_hadd_epi32(_mm_add_epi32(a[0].lo, a[0].hi), _mm_add_epi32(a[1].lo, a[1].hi));
    __m128i cd = _mm_hadd_epi32(_mm_add_epi32(a[2].lo, a[2].hi), _mm_add_epi32(a[3].lo, a[3].hi));
    return _mm_hadd_epi32(ab, cd);
}
typedef struct { __m128 lo, hi; } f8;
static inline f8 acc_sum8(const acc *a) { f8 v = {_mm_cvtepi32_ps(sum4(a)), _mm_cvtepi32_ps(sum4(a + 4))}; return v; }
static inline f8 f8_load(const float *p) { f8 v = {_mm_loadu_ps(p), _mm_loadu_ps(p + 4)}; return v; }
static inline void f8_store(float *p, f8 v) { _mm_storeu_ps(p, v.lo), _mm_storeu_ps(p + 4, v.hi); }
static inline f8 f8_mul(f8 a, f8 b) { f8 v = {_mm_mul_ps(a.lo, b.lo), _mm_mul_ps(a.hi, b.hi)}; return v; }
static inline f8 f8_add(f8 a, f8 b) { f8 v = {_mm_add_ps(a.lo, b.lo), _mm_add_ps(a.hi, b.hi)}; return v; }
static inline f8 f8_zero(void) { f8 v = {_mm_setzero_ps(), _mm_setzero_ps()}; return v; }
static inline f8 f8_splat(float c) { f8 v = {_mm_set1_ps(c), _mm_set1_ps(c)}; return v; }
static inline f8 f8_sub(f8 a, f8 b) { f8 v = {_mm_sub_ps(a.lo, b.lo), _mm_sub_ps(a.hi, b.hi)}; return v; }
static inline f8 f8_halves(const uint8_t *p, int stride) {
    f8 v = {_mm_setr_ps(f16_to_f32(p), f16_to_f32(p + stride), f16_to_f32(p + 2 * stride), f16_to_f32(p + 3 * stride)),
            _mm_setr_ps(f16_to_f32(p + 4 * stride), f16_to_f32(p + 5 * stride), f16_to_f32(p + 6 * stride),
                        f16_to_f32(p + 7 * stride))};
    return v;
}
static inline v32 v32_fifth(const uint8_t *qh) {
    return v32_u64x4(FIFTH[qh[0]], FIFTH[qh[1]], FIFTH[qh[2]], FIFTH[qh[3]]);
}
#endif
