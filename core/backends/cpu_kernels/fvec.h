// Float kernels' vector steps (conv.c, attention.c), on simd.h's f8 (8 float lanes) for every target it builds:
//   f8_madd(c, a, b) = c + a b: one fused multiply-add where the target has one (x86 FMA natively; the page's
//   relaxed-SIMD module, where the engine fuses f32x4.relaxed_madd), else a multiply then an add (SSSE3, plain C,
//   plain SIMD128). A product of float kernels is therefore the same on targets that agree on fusing, and within
//   a rounding per multiply-add of the others; every kernel accumulates each output in one fixed order, so no
//   target's result depends on tiling or on how rows are split between threads.
//   F8_MR x F8_NV: the register tile of f8 micro-kernels (rows x 8-lane vectors) that fits the target's vector
//   registers: 8 x 3 with AVX-512's 32 (conv.c and attention.c tile 16-lane vectors there), 4 x 3 with AVX2's 16,
//   4 x 1 with 128-bit ones
//   (a f8 is two there).
// And scalar float math written with plain IEEE operations (Cephes exp, Abramowitz & Stegun erf), which every
// target computes alike, vectorised or not (-ffp-contract=off everywhere).
#pragma once
#include <stdint.h>

#include "simd.h"

#if defined(EMBER_SIMD_SCALAR)
static inline f8 f8_madd(f8 c, f8 a, f8 b) { for (int i = 0; i < 8; i++) c.f[i] += a.f[i] * b.f[i]; return c; }
static inline f8 f8_bcast(const float *p) { return f8_splat(*p); }
#define F8_LANES(name, expr)                                \
    static inline f8 name(f8 a, f8 b) {                     \
        f8 v;                                               \
        for (int i = 0; i < 8; i++) v.f[i] = (expr);        \
        return v;                                           \
    }
F8_LANES(f8_max, a.f[i] > b.f[i] ? a.f[i] : b.f[i])
F8_LANES(f8_min, a.f[i] < b.f[i] ? a.f[i] : b.f[i])
F8_LANES(f8_div, a.f[i] / b.f[i])
static inline f8 f8_floor(f8 a) {  // |a| < 2^31: truncated, one less where that rounded up
    for (int i = 0; i < 8; i++) {
        float t = (float)(int32_t)a.f[i];
        a.f[i] = t > a.f[i] ? t - 1.0f : t;
    }
    return a;
}
static inline f8 f8_pow2i(f8 m) {  // 2^m for integer-valued m in [-126, 127]
    for (int i = 0; i < 8; i++) {
        union { uint32_t u; float f; } e = {.u = (uint32_t)((int32_t)m.f[i] + 127) << 23};
        m.f[i] = e.f;
    }
    return m;
}
typedef struct { int32_t m[8]; } m8;  // lane masks: all ones or zero
static inline m8 f8_gt(f8 a, f8 b) { m8 v; for (int i = 0; i < 8; i++) v.m[i] = a.f[i] > b.f[i] ? -1 : 0; return v; }
static inline m8 f8_eq(f8 a, f8 b) { m8 v; for (int i = 0; i < 8; i++) v.m[i] = a.f[i] == b.f[i] ? -1 : 0; return v; }
static inline m8 m8_and(m8 a, m8 b) { for (int i = 0; i < 8; i++) a.m[i] &= b.m[i]; return a; }
static inline f8 f8_sel(m8 m, f8 a, f8 b) { for (int i = 0; i < 8; i++) b.f[i] = m.m[i] ? a.f[i] : b.f[i]; return b; }
static inline f8 f8_abs(f8 a) { for (int i = 0; i < 8; i++) a.f[i] = a.f[i] < 0 ? -a.f[i] : a.f[i] == 0 ? 0.0f : a.f[i]; return a; }
#define F8_MR 4
#define F8_NV 1
#elif defined(__wasm_simd128__)
#if defined(__wasm_relaxed_simd__)
#define MADD4(c, a, b) wasm_f32x4_relaxed_madd(a, b, c)
#else
#define MADD4(c, a, b) wasm_f32x4_add(c, wasm_f32x4_mul(a, b))
#endif
static inline f8 f8_madd(f8 c, f8 a, f8 b) { f8 v = {MADD4(c.lo, a.lo, b.lo), MADD4(c.hi, a.hi, b.hi)}; return v; }
static inline f8 f8_bcast(const float *p) { v128_t s = wasm_v128_load32_splat(p); f8 v = {s, s}; return v; }
#define F8_HALVES(name, expr_lo, expr_hi) \
    static inline f8 name(f8 a, f8 b) { f8 v = {expr_lo, expr_hi}; return v; }
F8_HALVES(f8_max, wasm_f32x4_pmax(b.lo, a.lo), wasm_f32x4_pmax(b.hi, a.hi))  // a > b ? a : b
F8_HALVES(f8_min, wasm_f32x4_pmin(b.lo, a.lo), wasm_f32x4_pmin(b.hi, a.hi))  // a < b ? a : b
F8_HALVES(f8_div, wasm_f32x4_div(a.lo, b.lo), wasm_f32x4_div(a.hi, b.hi))
static inline f8 f8_floor(f8 a) { f8 v = {wasm_f32x4_floor(a.lo), wasm_f32x4_floor(a.hi)}; return v; }
static inline v128_t pow2i4(v128_t m) {
    return wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(m), wasm_i32x4_splat(127)), 23);
}
static inline f8 f8_pow2i(f8 m) { f8 v = {pow2i4(m.lo), pow2i4(m.hi)}; return v; }
typedef f8 m8;
F8_HALVES(f8_gt, wasm_f32x4_gt(a.lo, b.lo), wasm_f32x4_gt(a.hi, b.hi))
F8_HALVES(f8_eq, wasm_f32x4_eq(a.lo, b.lo), wasm_f32x4_eq(a.hi, b.hi))
F8_HALVES(m8_and, wasm_v128_and(a.lo, b.lo), wasm_v128_and(a.hi, b.hi))
static inline f8 f8_sel(m8 m, f8 a, f8 b) {
    f8 v = {wasm_v128_bitselect(a.lo, b.lo, m.lo), wasm_v128_bitselect(a.hi, b.hi, m.hi)};
    return v;
}
static inline f8 f8_abs(f8 a) { f8 v = {wasm_f32x4_abs(a.lo), wasm_f32x4_abs(a.hi)}; return v; }
#define F8_MR 4
#define F8_NV 1
#elif defined(__AVX2__)
#if defined(__FMA__)
static inline f8 f8_madd(f8 c, f8 a, f8 b) { return _mm256_fmadd_ps(a, b, c); }
#else
static inline f8 f8_madd(f8 c, f8 a, f8 b) { return _mm256_add_ps(c, _mm256_mul_ps(a, b)); }
#endif
static inline f8 f8_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline f8 f8_max(f8 a, f8 b) { return _mm256_max_ps(a, b); }  // a > b ? a : b
static inline f8 f8_min(f8 a, f8 b) { return _mm256_min_ps(a, b); }  // a < b ? a : b
static inline f8 f8_div(f8 a, f8 b) { return _mm256_div_ps(a, b); }
static inline f8 f8_floor(f8 a) { return _mm256_floor_ps(a); }
static inline f8 f8_pow2i(f8 m) {
    __m256i i = _mm256_add_epi32(_mm256_cvttps_epi32(m), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(i, 23));
}
typedef __m256 m8;
static inline m8 f8_gt(f8 a, f8 b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline m8 f8_eq(f8 a, f8 b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline m8 m8_and(m8 a, m8 b) { return _mm256_and_ps(a, b); }
static inline f8 f8_sel(m8 m, f8 a, f8 b) { return _mm256_blendv_ps(b, a, m); }
static inline f8 f8_abs(f8 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
#if defined(__AVX512F__) && !defined(EMBER_TILE4)  // 32 vector registers: 8 x 3 accumulators, 3 pixel vectors and a broadcast
#define F8_MR 8
#else
#define F8_MR 4
#endif
#define F8_NV 3
#else  // SSSE3
static inline f8 f8_madd(f8 c, f8 a, f8 b) {
    f8 v = {_mm_add_ps(c.lo, _mm_mul_ps(a.lo, b.lo)), _mm_add_ps(c.hi, _mm_mul_ps(a.hi, b.hi))};
    return v;
}
static inline f8 f8_bcast(const float *p) { __m128 s = _mm_load1_ps(p); f8 v = {s, s}; return v; }
#define F8_HALVES(name, expr_lo, expr_hi) \
    static inline f8 name(f8 a, f8 b) { f8 v = {expr_lo, expr_hi}; return v; }
F8_HALVES(f8_max, _mm_max_ps(a.lo, b.lo), _mm_max_ps(a.hi, b.hi))  // a > b ? a : b
F8_HALVES(f8_min, _mm_min_ps(a.lo, b.lo), _mm_min_ps(a.hi, b.hi))  // a < b ? a : b
F8_HALVES(f8_div, _mm_div_ps(a.lo, b.lo), _mm_div_ps(a.hi, b.hi))
static inline __m128 floor4(__m128 a) {  // no SSE4.1 round: truncated, one less where that rounded up (|a| < 2^31)
    __m128 t = _mm_cvtepi32_ps(_mm_cvttps_epi32(a));
    return _mm_sub_ps(t, _mm_and_ps(_mm_cmpgt_ps(t, a), _mm_set1_ps(1.0f)));
}
static inline f8 f8_floor(f8 a) { f8 v = {floor4(a.lo), floor4(a.hi)}; return v; }
static inline __m128 pow2i4(__m128 m) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(_mm_cvttps_epi32(m), _mm_set1_epi32(127)), 23));
}
static inline f8 f8_pow2i(f8 m) { f8 v = {pow2i4(m.lo), pow2i4(m.hi)}; return v; }
typedef f8 m8;
F8_HALVES(f8_gt, _mm_cmpgt_ps(a.lo, b.lo), _mm_cmpgt_ps(a.hi, b.hi))
F8_HALVES(f8_eq, _mm_cmpeq_ps(a.lo, b.lo), _mm_cmpeq_ps(a.hi, b.hi))
F8_HALVES(m8_and, _mm_and_ps(a.lo, b.lo), _mm_and_ps(a.hi, b.hi))
static inline f8 f8_sel(m8 m, f8 a, f8 b) {
    f8 v = {_mm_or_ps(_mm_and_ps(m.lo, a.lo), _mm_andnot_ps(m.lo, b.lo)),
            _mm_or_ps(_mm_and_ps(m.hi, a.hi), _mm_andnot_ps(m.hi, b.hi))};
    return v;
}
static inline f8 f8_abs(f8 a) {
    __m128 s = _mm_set1_ps(-0.0f);
    f8 v = {_mm_andnot_ps(s, a.lo), _mm_andnot_ps(s, a.hi)};
    return v;
}
#define F8_MR 4
#define F8_NV 1
#endif

#if defined(__wasm__)
#define EMBER_EXPORT(name) __attribute__((export_name(#name)))
#else
#define EMBER_EXPORT(name) __attribute__((visibility("default")))
#endif

// ---------------------------------------------------------------------------------------------- partial vectors
// Lanes past n are neither read nor written (a register tile's last vector: conv.c, attention.c).

static inline f8 f8_load_part(const float *p, int n) {  // p[0:n] (n < 8 read through a copy), zeros after
    if (n >= 8)
        return f8_load(p);
    float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n && i < 8; i++) t[i] = p[i];
    return f8_load(t);
}

static inline void f8_store_part(float *p, f8 v, int n) {
    if (n >= 8) {
        f8_store(p, v);
        return;
    }
    float t[8];
    f8_store(t, v);
    for (int i = 0; i < n && i < 8; i++) p[i] = t[i];
}

// ---------------------------------------------------------------------------------------------- vector math
// exp, SiLU, GELU on 8 lanes with IEEE operations in one order on every target (no fused multiply-add): each
// lane's value is the same whichever target computes it (NaN aside, whose payload may differ).

static inline f8 f8_c(float c) { return f8_splat(c); }

// exp(x), Cephes expf (elementwise.c's, decode.c's): x = m ln2 + r, a degree-7 polynomial for e^r, 2^m in the
// exponent bits. ~2 ulp; below -87.3 exp(-87.3), above 88.7 inf, NaN stays NaN.
static inline f8 f8_exp(f8 x0) {
    f8 x = f8_min(f8_c(88.7228390f), f8_max(f8_c(-87.3365448f), x0));  // (NaN passes both)
    f8 m = f8_floor(f8_add(f8_mul(x, f8_c(1.44269504088896341f)), f8_c(0.5f)));
    f8 r = f8_sub(x, f8_mul(m, f8_c(0.693359375f)));
    r = f8_sub(r, f8_mul(m, f8_c(-2.12194440e-4f)));
    f8 p = f8_c(1.9875691500e-4f);
    p = f8_add(f8_mul(p, r), f8_c(1.3981999507e-3f));
    p = f8_add(f8_mul(p, r), f8_c(8.3334519073e-3f));
    p = f8_add(f8_mul(p, r), f8_c(4.1665795894e-2f));
    p = f8_add(f8_mul(p, r), f8_c(1.6666665459e-1f));
    p = f8_add(f8_mul(p, r), f8_c(5.0000001201e-1f));
    p = f8_add(f8_add(f8_mul(f8_mul(p, r), r), r), f8_c(1.0f));
    f8 y = f8_mul(p, f8_pow2i(f8_sel(f8_eq(m, m), m, f8_zero())));  // (a NaN's m: 2^0, p is NaN)
    return f8_sel(f8_gt(x0, f8_c(88.7228390f)), f8_c(__builtin_inff()), y);
}

static inline f8 f8_silu(f8 x) {  // x / (1 + exp(-x)); silu(-inf) = NaN, as torch
    return f8_div(x, f8_add(f8_c(1.0f), f8_exp(f8_sub(f8_zero(), x))));
}

// x Phi(x) = relu(x) - |x| Phi(-|x|) with Phi(-|x|) = t P(t) exp(-x^2 / 2) / 2, t = 1 / (1 + p |x| / sqrt 2)
// (Abramowitz & Stegun 7.1.26, |abs err| < 1.5e-7): the CPU backend's erf GELU (cpu_fused.py) step for step.
// gelu(+inf) = +inf, gelu(-inf) = NaN, as torch. The tail is 0 past |x| = 12.6 (below 1.5e-35; torch's 1 + erf
// rounds to 0 from x = -5.9), computed from |x| held at 12.6: no step makes a subnormal (each costs a microcode
// assist, there and in the next product: Whisper's last fc2 was 20x slower, the GELU itself 10x).
static inline f8 f8_gelu(f8 x) {
    f8 ax = f8_abs(x), a = f8_min(f8_c(12.6f), ax);  // (NaN stays)
    f8 t = f8_div(f8_c(1.0f), f8_add(f8_c(1.0f), f8_mul(a, f8_c(0.2316419f))));
    f8 p = f8_c(1.061405429f * 0.5f);
    p = f8_mul(f8_add(f8_mul(p, t), f8_c(-1.453152027f * 0.5f)), t);
    p = f8_mul(f8_add(p, f8_c(1.421413741f * 0.5f)), t);
    p = f8_mul(f8_add(p, f8_c(-0.284496736f * 0.5f)), t);
    p = f8_mul(f8_add(p, f8_c(0.254829592f * 0.5f)), t);
    f8 tail = f8_mul(f8_mul(p, f8_exp(f8_mul(f8_mul(a, a), f8_c(-0.5f)))), a);
    tail = f8_sel(f8_gt(ax, f8_c(12.6f)), f8_zero(), tail);
    m8 inf = f8_eq(ax, f8_c(__builtin_inff()));  // 0 * inf in the tail: 0 at +inf, NaN at -inf
    tail = f8_sel(inf, f8_sel(f8_gt(x, f8_zero()), f8_zero(), f8_c(__builtin_nanf(""))), tail);
    return f8_sub(f8_max(x, f8_zero()), tail);
}

// tanh(x), Cephes tanhf (decode.c's): a polynomial near 0, 1 - 2 / (e^2|x| + 1) beyond; ~2 ulp
static inline f8 f8_tanh(f8 x) {
    f8 a = f8_abs(x), z = f8_mul(x, x);
    f8 p = f8_c(-5.70498872745e-3f);
    p = f8_add(f8_mul(p, z), f8_c(2.06390887954e-2f));
    p = f8_sub(f8_mul(p, z), f8_c(5.37397155531e-2f));
    p = f8_add(f8_mul(p, z), f8_c(1.33314422036e-1f));
    p = f8_sub(f8_mul(p, z), f8_c(3.33332819422e-1f));
    f8 near = f8_add(f8_mul(f8_mul(p, z), x), x);
    f8 far = f8_sub(f8_c(1.0f), f8_div(f8_c(2.0f), f8_add(f8_exp(f8_mul(f8_c(2.0f), a)), f8_c(1.0f))));
    far = f8_sel(f8_gt(f8_zero(), x), f8_sub(f8_zero(), far), far);
    return f8_sel(f8_gt(a, f8_c(0.625f)), far, near);
}

static inline f8 f8_gelu_tanh(f8 x) {  // ember's tanh GELU: (tanh(sqrt(2/pi) (x + 0.044715 x^3)) + 1) x / 2
    f8 u = f8_mul(f8_add(x, f8_mul(f8_mul(f8_mul(f8_c(0.044715f), x), x), x)), f8_c(0.7978845608028654f));
    return f8_mul(f8_mul(f8_add(f8_tanh(u), f8_c(1.0f)), x), f8_c(0.5f));
}

// the activations an epilogue applies (conv.c, rows.c): the ids cpu_float_kernels.py passes
enum { ACT_NONE, ACT_RELU, ACT_SILU, ACT_GELU, ACT_GELU_TANH };

static inline f8 f8_act(f8 v, int act) {
    switch (act) {
    case ACT_RELU: return f8_max(f8_zero(), v);  // (0 > NaN is false: NaN stays, as torch)
    case ACT_SILU: return f8_silu(v);
    case ACT_GELU: return f8_gelu(v);
    case ACT_GELU_TANH: return f8_gelu_tanh(v);
    default: return v;
    }
}

// y[0:n] = act(y[0:n] + b) (b: one float added to every element, 0 for none), 8 at a time; the tail through the
// same vector code, so every element gets the same rounding
static inline void act_row(float *y, int n, float b, int act) {
    f8 bv = f8_splat(b);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        f8_store(y + i, f8_act(f8_add(f8_load(y + i), bv), act));
    if (i < n)
        f8_store_part(y + i, f8_act(f8_add(f8_load_part(y + i, n - i), bv), act), n - i);
}
