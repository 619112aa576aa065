// Elementwise and row f32 kernels the profiles show (WebAssembly SIMD128), where numpy's exp is scalar
// in Pyodide: SiLU (20% of YOLOv8s), GELU and attention's exponentials (7% and 12% of Whisper tiny).
// Freestanding, in place or out of place, any alignment.
#include <wasm_simd128.h>

#include "parallel.h"

// exp(x) for f32x4 (Cephes expf): x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial for e^r,
// 2^n built in the exponent bits. ~2 ulp; below -87.3 it returns exp(-87.3), above 88.7 +inf (as expf),
// NaN stays NaN.
static v128_t exp4(v128_t x) {
    v128_t overflow = wasm_f32x4_gt(x, wasm_f32x4_splat(88.7228390f));
    // (pmax(a, b) = a < b ? b : a: NaN passes both, as min and max let it, which V8 makes ~6 instructions each)
    x = wasm_f32x4_pmin(wasm_f32x4_pmax(x, wasm_f32x4_splat(-87.3365448f)), wasm_f32x4_splat(88.7228390f));
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
    // 2^n from n + 1.5 2^23, exact, whose low bits are n's two's complement (fvec.h's pow2i4)
    v128_t e = wasm_i32x4_shl(wasm_i32x4_add(wasm_f32x4_add(n, wasm_f32x4_splat(12582912.0f)), wasm_i32x4_splat(127)), 23);
    return wasm_v128_bitselect(wasm_f32x4_splat(__builtin_inff()), wasm_f32x4_mul(p, e), overflow);
}

static v128_t silu4(v128_t x) {  // x / (1 + exp(-x)): silu(-inf) = -inf / inf = NaN, as torch
    return wasm_f32x4_div(x, wasm_f32x4_add(wasm_f32x4_splat(1.0f), exp4(wasm_f32x4_neg(x))));
}

// GELU (erf form) as the CPU backend's numpy path: x Phi(x) = relu(x) - |x| Phi(-|x|), no cancellation
// in the negative tail; Phi(-|x|) = t P(t) exp(-x^2 / 2) / 2 with t = 1 / (1 + p |x| / sqrt 2)
// (Abramowitz & Stegun 7.1.26, |abs err| < 1.5e-7). gelu(+inf) = +inf, gelu(-inf) = NaN, as torch. The tail is
// 0 past |x| = 12.6, computed from |x| held there: no subnormals (fvec_math.h's gelu, the same steps).
static v128_t gelu4(v128_t x) {
    v128_t ax = wasm_f32x4_abs(x), a = wasm_f32x4_pmin(ax, wasm_f32x4_splat(12.6f));  // (NaN stays)
    v128_t t = wasm_f32x4_div(wasm_f32x4_splat(1.0f),
                              wasm_f32x4_add(wasm_f32x4_splat(1.0f), wasm_f32x4_mul(a, wasm_f32x4_splat(0.2316419f))));
    v128_t p = wasm_f32x4_splat(1.061405429f * 0.5f);
    p = wasm_f32x4_mul(wasm_f32x4_add(wasm_f32x4_mul(p, t), wasm_f32x4_splat(-1.453152027f * 0.5f)), t);
    p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(1.421413741f * 0.5f)), t);
    p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(-0.284496736f * 0.5f)), t);
    p = wasm_f32x4_mul(wasm_f32x4_add(p, wasm_f32x4_splat(0.254829592f * 0.5f)), t);
    v128_t e = exp4(wasm_f32x4_mul(wasm_f32x4_mul(a, a), wasm_f32x4_splat(-0.5f)));
    v128_t tail = wasm_f32x4_mul(wasm_f32x4_mul(p, e), a);
    tail = wasm_v128_andnot(tail, wasm_f32x4_gt(ax, wasm_f32x4_splat(12.6f)));
    v128_t inf = wasm_f32x4_eq(ax, wasm_f32x4_splat(__builtin_inff()));  // 0 * inf: the tail is 0 there
    tail = wasm_v128_andnot(tail, wasm_v128_and(inf, wasm_f32x4_gt(x, wasm_f32x4_splat(0.0f))));
    tail = wasm_v128_bitselect(wasm_f32x4_splat(__builtin_nanf("")), tail,
                               wasm_v128_and(inf, wasm_f32x4_lt(x, wasm_f32x4_splat(0.0f))));
    return wasm_f32x4_sub(wasm_f32x4_max(x, wasm_f32x4_splat(0.0f)), tail);
}

// y[0:n] = f(x[0:n]) four at a time; the tail through the same vector code, so every element gets the
// same rounding. y may be x.
#define ELEMENTWISE(name, f)                                                            \
    __attribute__((export_name(name))) void f##_f32(const float *x, float *y, int n) {  \
        int i = 0;                                                                      \
        for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, f(wasm_v128_load(x + i)));     \
        if (i < n) {                                                                    \
            float t[4] = {0, 0, 0, 0};                                                  \
            for (int j = 0; i + j < n; j++) t[j] = x[i + j];                            \
            wasm_v128_store(t, f(wasm_v128_load(t)));                                   \
            for (int j = 0; i + j < n; j++) y[i + j] = t[j];                            \
        }                                                                               \
    }

ELEMENTWISE("ember_silu_f32", silu4)
ELEMENTWISE("ember_gelu_f32", gelu4)

// The same with the elements split between threads (parallel.h: the page's pool), UNARY_BLOCK at a time: every
// lane is computed alone, so the bits are the serial call's. which: 0 SiLU, 1 GELU; 0, or PARALLEL_LOST.
#define UNARY_BLOCK 4096
typedef struct {
    const float *x;
    float *y;
    int n, which;
} unary_t;

static void unary_blocks(const void *arg, int b0, int b1, int thread) {
    const unary_t *u = (const unary_t *)arg;
    long s = (long)b0 * UNARY_BLOCK, e = (long)b1 * UNARY_BLOCK < u->n ? (long)b1 * UNARY_BLOCK : u->n;
    (void)thread;
    (u->which ? gelu4_f32 : silu4_f32)(u->x + s, u->y + s, (int)(e - s));
}

__attribute__((export_name("ember_unary_blocks_f32")))
int ember_unary_blocks_f32(int which, const float *x, float *y, int n) {
    unary_t u = {x, y, n, which};
    int blocks = (n + UNARY_BLOCK - 1) / UNARY_BLOCK;
    return ember_parallel(unary_blocks, &u, blocks, ember_chunks(blocks, 16L * UNARY_BLOCK));
}

// x[r, 0:cols] = exp(x[r, :] - max(x[r, :])) for each of `rows` rows (row stride rs), in place: the
// unnormalised softmax of a block of attention scores (the caller sums the rows in its next matmul).
// One read for the max, one read-write for the exponentials, where numpy makes three passes and a
// scalar exp. A NaN in a row makes that row NaN (as numpy's max then exp); a row of -inf gives NaN too.
typedef struct {
    float *x;
    int cols, rs;
} rowmax_t;

static void exp_rowmax_rows(const void *arg, int r0, int r1, int thread) {
    const rowmax_t *a = (const rowmax_t *)arg;
    float *x = a->x;
    int cols = a->cols, rs = a->rs;
    (void)thread;
    for (int r = r0; r < r1; r++) {
        float *row = x + (long)r * rs;
        int full = cols & ~3;
        v128_t m4 = wasm_f32x4_splat(-__builtin_inff());
        for (int j = 0; j < full; j += 4) m4 = wasm_f32x4_max(m4, wasm_v128_load(row + j));
        float lanes[4], m = -__builtin_inff();
        wasm_v128_store(lanes, m4);
        for (int l = 0; l < 4; l++)  // (f32x4.max propagates NaN; the scalar max must too)
            m = (lanes[l] > m || lanes[l] != lanes[l]) ? lanes[l] : m;
        for (int j = full; j < cols; j++) m = (row[j] > m || row[j] != row[j]) ? row[j] : m;
        v128_t mv = wasm_f32x4_splat(m);
        for (int j = 0; j < full; j += 4)
            wasm_v128_store(row + j, exp4(wasm_f32x4_sub(wasm_v128_load(row + j), mv)));
        if (full < cols) {
            float t[4] = {0, 0, 0, 0};
            for (int j = full; j < cols; j++) t[j - full] = row[j];
            wasm_v128_store(t, exp4(wasm_f32x4_sub(wasm_v128_load(t), mv)));
            for (int j = full; j < cols; j++) row[j] = t[j - full];
        }
    }
}

__attribute__((export_name("ember_exp_rowmax_f32")))
void ember_exp_rowmax_f32(float *x, int rows, int cols, int rs) {
    rowmax_t a = {x, cols, rs};
    exp_rowmax_rows(&a, 0, rows, 0);
}

// ember_exp_rowmax_f32 with the rows split between threads (parallel.h: the page's pool); 0, or PARALLEL_LOST
__attribute__((export_name("ember_exp_rowmax_rows_f32")))
int ember_exp_rowmax_rows_f32(float *x, int rows, int cols, int rs) {
    rowmax_t a = {x, cols, rs};
    return ember_parallel(exp_rowmax_rows, &a, rows, ember_chunks(rows, 8L * cols));
}
