// Elementwise f32 kernels the profiles show (WebAssembly SIMD128): SiLU, 20% of YOLOv8s in Pyodide,
// where numpy's exp is scalar. Freestanding, in place or out of place, any alignment.
#include <wasm_simd128.h>

// exp(x) for f32x4 (Cephes expf): x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial for e^r,
// 2^n built in the exponent bits. ~2 ulp; below -87.3 it returns exp(-87.3), above 88.7 +inf (as expf),
// NaN stays NaN.
static v128_t exp4(v128_t x) {
    v128_t overflow = wasm_f32x4_gt(x, wasm_f32x4_splat(88.7228390f));
    x = wasm_f32x4_min(wasm_f32x4_max(x, wasm_f32x4_splat(-87.3365448f)), wasm_f32x4_splat(88.7228390f));
    v128_t n = wasm_f32x4_floor(wasm_f32x4_add(wasm_f32x4_mul(x, wasm_f32x4_splat(1.44269504088896341f)),
                                               wasm_f32x4_splat(0.5f)));
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(0.693359375f)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(-2.12194440e-4f)));
    v128_t p = wasm_f32x4_splat(1.9875691500e-4f);
    p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(1.3981999507e-3f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(8.3334519073e-3f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(4.1665795894e-2f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(1.6666665459e-1f));
    p = wasm_f32x4_add(wasm_f32x4_mul(p, r), wasm_f32x4_splat(5.0000001201e-1f));
    p = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_mul(p, r), r), r), wasm_f32x4_splat(1.0f));
    v128_t e = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
    return wasm_v128_bitselect(wasm_f32x4_splat(__builtin_inff()), wasm_f32x4_mul(p, e), overflow);
}

static v128_t silu4(v128_t x) {  // x / (1 + exp(-x)): silu(-inf) = -inf / inf = NaN, as torch
    return wasm_f32x4_div(x, wasm_f32x4_add(wasm_f32x4_splat(1.0f), exp4(wasm_f32x4_neg(x))));
}

// y[0:n] = silu(x[0:n]); y may be x
__attribute__((export_name("ember_silu_f32")))
void ember_silu_f32(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, silu4(wasm_v128_load(x + i)));
    if (i < n) {  // the tail through the same vector code, so every element gets the same rounding
        float t[4] = {0, 0, 0, 0};
        for (int j = 0; i + j < n; j++) t[j] = x[i + j];
        wasm_v128_store(t, silu4(wasm_v128_load(t)));
        for (int j = 0; i + j < n; j++) y[i + j] = t[j];
    }
}
