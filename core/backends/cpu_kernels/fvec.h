// Float kernels' vector steps (conv.c, attention.c), on simd.h's f8 (8 float lanes) for every target it builds:
//   f8_madd(c, a, b) = c + a b: one fused multiply-add where the target has one (x86 FMA natively; the page's
//   relaxed-SIMD module, where the engine fuses f32x4.relaxed_madd), else a multiply then an add (SSSE3, plain C,
//   plain SIMD128). A product of float kernels is therefore the same on targets that agree on fusing, and within
//   a rounding per multiply-add of the others; every kernel accumulates each output in one fixed order, so no
//   target's result depends on tiling or on how rows are split between threads.
//   F8_MR x F8_NV: the register tile of the float micro-kernels (rows x 8-lane vectors) that fits the target's
//   vector registers: 8 x 3 with AVX-512's 32 (as 256-bit ones), 4 x 3 with AVX2's 16, 4 x 1 with 128-bit ones
//   (a f8 is two there).
// And scalar float math written with plain IEEE operations (Cephes exp, Abramowitz & Stegun erf), which every
// target computes alike, vectorised or not (-ffp-contract=off everywhere).
#pragma once
#include <stdint.h>

#include "simd.h"

#if defined(EMBER_SIMD_SCALAR)
static inline f8 f8_madd(f8 c, f8 a, f8 b) { for (int i = 0; i < 8; i++) c.f[i] += a.f[i] * b.f[i]; return c; }
static inline f8 f8_bcast(const float *p) { return f8_splat(*p); }
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
#define F8_MR 4
#define F8_NV 1
#elif defined(__AVX2__)
#if defined(__FMA__)
static inline f8 f8_madd(f8 c, f8 a, f8 b) { return _mm256_fmadd_ps(a, b, c); }
#else
static inline f8 f8_madd(f8 c, f8 a, f8 b) { return _mm256_add_ps(c, _mm256_mul_ps(a, b)); }
#endif
static inline f8 f8_bcast(const float *p) { return _mm256_broadcast_ss(p); }
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
#define F8_MR 4
#define F8_NV 1
#endif

#if defined(__wasm__)
#define EMBER_EXPORT(name) __attribute__((export_name(#name)))
#else
#define EMBER_EXPORT(name) __attribute__((visibility("default")))
#endif

// ---------------------------------------------------------------------------------------------- register tiles
// A tile of MRc x NVc f8 accumulators (MRc <= 8, NVc <= 3, both constants where the tile is inlined) in named
// variables, never in an array: GCC keeps arrays of vectors in memory, and every multiply-add then goes through
// the stack. Lanes past `width` are neither read nor written.

static inline f8 f8_load_part(const float *p, int n) {  // p[0:n] (n < 8 read through a copy), zeros after
    if (n >= 8)
        return f8_load(p);
    float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) t[i] = p[i];
    return f8_load(t);
}

static inline void f8_store_part(float *p, f8 v, int n) {
    if (n >= 8) {
        f8_store(p, v);
        return;
    }
    float t[8];
    f8_store(t, v);
    for (int i = 0; i < n; i++) p[i] = t[i];
}

#define TILE_ROW3(M, r) M(r, 0) M(r, 1) M(r, 2)
#define TILE_EACH(M) TILE_ROW3(M, 0) TILE_ROW3(M, 1) TILE_ROW3(M, 2) TILE_ROW3(M, 3) TILE_ROW3(M, 4) TILE_ROW3(M, 5) \
    TILE_ROW3(M, 6) TILE_ROW3(M, 7)
#define TILE_DECL_ONE(r, j) f8 c##r##j = f8_zero();
#define TILE_DECL TILE_EACH(TILE_DECL_ONE) (void)0
// c[r][j] = the tile of y (rows ys apart) times mul[r] (mul 0: as it is)
#define TILE_LOAD_ONE(r, j)                                                          \
    if (r < MRc && j < NVc) {                                                        \
        c##r##j = f8_load_part(TILE_Y + r * TILE_YS + 8 * j, TILE_W - 8 * j);         \
        if (TILE_MUL)                                                                \
            c##r##j = f8_mul(c##r##j, f8_splat(TILE_MUL[r]));                        \
    }
#define TILE_STORE_ONE(r, j) \
    if (r < MRc && j < NVc) f8_store_part(TILE_Y + r * TILE_YS + 8 * j, c##r##j, TILE_W - 8 * j);
// one step: x0..x2 = the vectors at xp; row r's multiplier broadcast from A(r)
#define TILE_ROW(r)                                                       \
    if (r < MRc) {                                                        \
        f8 av = f8_bcast(TILE_A(r));                                      \
        c##r##0 = f8_madd(c##r##0, av, x0);                               \
        if (NVc > 1) c##r##1 = f8_madd(c##r##1, av, x1);                  \
        if (NVc > 2) c##r##2 = f8_madd(c##r##2, av, x2);                  \
    }
#define TILE_STEP(xp)                                                     \
    do {                                                                  \
        const float *xs_ = (xp);                                          \
        f8 x0 = f8_load(xs_);                                             \
        f8 x1 = NVc > 1 ? f8_load(xs_ + 8) : x0;                          \
        f8 x2 = NVc > 2 ? f8_load(xs_ + 16) : x0;                         \
        TILE_ROW(0) TILE_ROW(1) TILE_ROW(2) TILE_ROW(3)                   \
        TILE_ROW(4) TILE_ROW(5) TILE_ROW(6) TILE_ROW(7)                   \
    } while (0)

// ---------------------------------------------------------------------------------------------- scalar math

// exp(x), Cephes expf (elementwise.c's, decode.c's), branch-free so that loops over it vectorise: x = m ln2 + r,
// a degree-7 polynomial for e^r, 2^m in the exponent bits. ~2 ulp; below -87.3 exp(-87.3), above 88.7 inf, NaN
// stays NaN.
static inline float fexp(float x) {
    float big = x > 88.7228390f ? __builtin_inff() : 1.0f;
    x = x < -87.3365448f ? -87.3365448f : x;
    x = x > 88.7228390f ? 88.7228390f : x;
    float m = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - m * 0.693359375f;
    r = r - m * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t mi = (int32_t)m;
    uint32_t bits = (uint32_t)(mi + 127) << 23;
    float e;
    __builtin_memcpy(&e, &bits, 4);
    return p * e * big;
}

static inline float fsilu(float x) { return x / (1.0f + fexp(-x)); }  // silu(-inf) = NaN, as torch

// x Phi(x) = relu(x) - |x| Phi(-|x|) with Phi(-|x|) = t P(t) exp(-x^2 / 2) / 2, t = 1 / (1 + p |x| / sqrt 2)
// (Abramowitz & Stegun 7.1.26, |abs err| < 1.5e-7): the CPU backend's erf GELU (cpu_fused.py), step for step.
// gelu(+inf) = +inf, gelu(-inf) = NaN, as torch.
static inline float fgelu(float x) {
    float ax = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + ax * 0.2316419f);
    float p = 1.061405429f * 0.5f;
    p = (p * t + -1.453152027f * 0.5f) * t;
    p = (p + 1.421413741f * 0.5f) * t;
    p = (p + -0.284496736f * 0.5f) * t;
    p = (p + 0.254829592f * 0.5f) * t;
    float tail = p * fexp(ax * ax * -0.5f) * ax;
    tail = ax == __builtin_inff() ? (x > 0 ? 0.0f : __builtin_nanf("")) : tail;
    return (x > 0 ? x : 0.0f) - tail;
}

// tanh(x), Cephes tanhf (decode.c's): a polynomial near 0, 1 - 2 / (e^2|x| + 1) beyond; ~2 ulp
static inline float ftanh(float x) {
    float a = x < 0 ? -x : x, z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float near = p * z * x + x;
    float far = 1.0f - 2.0f / (fexp(2.0f * a) + 1.0f);
    far = x < 0 ? -far : far;
    return a > 0.625f ? far : near;
}

static inline float fgelu_tanh(float x) {  // ember's tanh GELU: (tanh(sqrt(2/pi) (x + 0.044715 x^3)) + 1) x / 2
    float t = ftanh((x + 0.044715f * x * x * x) * 0.7978845608028654f);
    return (t + 1.0f) * x * 0.5f;
}

// the activations an epilogue applies (conv.c, rows.c): the ids cpu_float_kernels.py passes
enum { ACT_NONE, ACT_RELU, ACT_SILU, ACT_GELU, ACT_GELU_TANH };

// y[0:n] = act(y[0:n] + b) (b: a float added to every element, 0 for none)
static inline void act_row(float *y, int n, float b, int act) {
    switch (act) {
    case ACT_RELU:
        for (int i = 0; i < n; i++) { float v = y[i] + b; y[i] = v > 0 ? v : (v != v ? v : 0.0f); }
        break;
    case ACT_SILU:
        for (int i = 0; i < n; i++) y[i] = fsilu(y[i] + b);
        break;
    case ACT_GELU:
        for (int i = 0; i < n; i++) y[i] = fgelu(y[i] + b);
        break;
    case ACT_GELU_TANH:
        for (int i = 0; i < n; i++) y[i] = fgelu_tanh(y[i] + b);
        break;
    default:
        for (int i = 0; i < n; i++) y[i] += b;
    }
}
