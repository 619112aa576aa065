// The WebAssembly SIMD128 intrinsics gemm.c and elementwise.c use, for a native build of those same sources
// (cpu_page_kernels.py: EMBER_DETERMINISTIC=1). Each is the lane-wise IEEE operation the WebAssembly spec defines,
// written with GCC/clang vector extensions; with -ffp-contract=off nothing is fused, so every float result has the
// bits the page's wasm module computes (same operations, same order). Not on the wasm build's include path.
#pragma once
#include <stdint.h>

typedef int32_t v128_t __attribute__((vector_size(16), aligned(16)));
typedef float ember_f4 __attribute__((vector_size(16), aligned(16)));
typedef uint32_t ember_u4 __attribute__((vector_size(16), aligned(16)));

#define EMBER_F(v) ((ember_f4)(v))
#define EMBER_V(v) ((v128_t)(v))

static inline v128_t wasm_v128_load(const void *p) { v128_t v; __builtin_memcpy(&v, p, 16); return v; }
static inline void wasm_v128_store(void *p, v128_t v) { __builtin_memcpy(p, &v, 16); }
static inline v128_t wasm_f32x4_splat(float x) { return EMBER_V(((ember_f4){x, x, x, x})); }
static inline v128_t wasm_v128_load32_splat(const void *p) { float x; __builtin_memcpy(&x, p, 4); return wasm_f32x4_splat(x); }
static inline float wasm_f32x4_extract_lane_(v128_t v, int i) { return EMBER_F(v)[i]; }
#define wasm_f32x4_extract_lane(v, i) wasm_f32x4_extract_lane_(v, i)

static inline v128_t wasm_f32x4_add(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) + EMBER_F(b)); }
static inline v128_t wasm_f32x4_sub(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) - EMBER_F(b)); }
static inline v128_t wasm_f32x4_mul(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) * EMBER_F(b)); }
static inline v128_t wasm_f32x4_div(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) / EMBER_F(b)); }
static inline v128_t wasm_f32x4_eq(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) == EMBER_F(b)); }
static inline v128_t wasm_f32x4_gt(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) > EMBER_F(b)); }
static inline v128_t wasm_f32x4_lt(v128_t a, v128_t b) { return EMBER_V(EMBER_F(a) < EMBER_F(b)); }
static inline v128_t wasm_v128_and(v128_t a, v128_t b) { return a & b; }
static inline v128_t wasm_v128_andnot(v128_t a, v128_t b) { return a & ~b; }
static inline v128_t wasm_v128_bitselect(v128_t a, v128_t b, v128_t mask) { return (a & mask) | (b & ~mask); }
static inline v128_t wasm_f32x4_abs(v128_t a) { return EMBER_V((ember_u4)a & 0x7fffffffu); }
static inline v128_t wasm_f32x4_neg(v128_t a) { return EMBER_V((ember_u4)a ^ 0x80000000u); }
static inline v128_t wasm_i32x4_add(v128_t a, v128_t b) { return EMBER_V((ember_u4)a + (ember_u4)b); }
static inline v128_t wasm_i32x4_shl(v128_t a, int n) { return EMBER_V((ember_u4)a << (n & 31)); }
static inline v128_t wasm_i32x4_splat(int32_t x) { return (v128_t){x, x, x, x}; }

// f32x4.min / max: NaN if either lane is NaN; -0 below +0 (equal values: the bits' OR for min, AND for max)
static inline float ember_minf(float a, float b, int max) {
    if (a != a || b != b) return __builtin_nanf("");
    if (a == b) {
        uint32_t x, y;
        __builtin_memcpy(&x, &a, 4);
        __builtin_memcpy(&y, &b, 4);
        x = max ? (x & y) : (x | y);
        __builtin_memcpy(&a, &x, 4);
        return a;
    }
    return (a < b) != max ? a : b;
}
static inline v128_t ember_minmax(v128_t a, v128_t b, int max) {
    ember_f4 x = EMBER_F(a), y = EMBER_F(b), r;
    for (int i = 0; i < 4; i++) r[i] = ember_minf(x[i], y[i], max);
    return EMBER_V(r);
}
static inline v128_t wasm_f32x4_min(v128_t a, v128_t b) { return ember_minmax(a, b, 0); }
static inline v128_t wasm_f32x4_max(v128_t a, v128_t b) { return ember_minmax(a, b, 1); }
// f32x4.pmin / pmax: b < a ? b : a and a < b ? b : a, lane by lane (a NaN a passes, as the comparison is false)
static inline v128_t wasm_f32x4_pmin(v128_t a, v128_t b) {
    ember_f4 x = EMBER_F(a), y = EMBER_F(b);
    for (int i = 0; i < 4; i++) x[i] = y[i] < x[i] ? y[i] : x[i];
    return EMBER_V(x);
}
static inline v128_t wasm_f32x4_pmax(v128_t a, v128_t b) {
    ember_f4 x = EMBER_F(a), y = EMBER_F(b);
    for (int i = 0; i < 4; i++) x[i] = x[i] < y[i] ? y[i] : x[i];
    return EMBER_V(x);
}
static inline v128_t wasm_f32x4_floor(v128_t a) {
    ember_f4 x = EMBER_F(a);
    for (int i = 0; i < 4; i++) x[i] = __builtin_floorf(x[i]);
    return EMBER_V(x);
}
