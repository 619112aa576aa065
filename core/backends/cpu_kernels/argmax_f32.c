// Greedy decoding's pick from a float32 output layer without streaming all of it: the index of the largest
// output of y = x W (W input-major, (cols, rows) rows `lead` floats apart, as matvec_f32.h reads an LM head), the
// first of equal ones, which is argmax(ember_matvec_f32(W, x)). A screen over W's float16 copy bounds every
// output (half the bytes: stories15M's 37 MB head read as 18 MB a token), and only the outputs that can be the
// largest (a few) are computed from W, as ember_matvec_f32 computes each (inputs in order from 0, a multiply then
// an add), so the pick is the exact one, never an approximation's.
//
// The bound. With h_i = w_i rounded to a half (|w_i - h_i| <= r |h_i|, r = 2^-11 / (1 - 2^-11), or <= 2^-25
// where w_i is below the halves' normal range; a weight outside their range has no screen), the screen's
// a = fl(sum x_i h_i) in any order (the threads' vectors), and the kernel's y = fl(sum x_i w_i):
//   |y - a| <= |y - sum x w| + |sum x (w - h)| + |sum x h - a|
//           <= g sum |x w| + r S + 2^-25 X + g S           (S = sum |x||h| <= |x|_2 |h|_2, X = sum |x|)
//           <= (r + g (2 + r)) |x|_2 |h|_2 + (1 + g) 2^-25 X   (sum |x w| <= (1 + r) S + 2^-25 X)
// where g = K u / (1 - K u), u = 2^-24, bounds a dot product's rounding in any order (Higham, Accuracy and
// Stability, 3.1), and each output's |h|_2 is computed once with the copy (norms, rounded up); plus 2^-149 a
// product for underflow, the bound taken 2^-10 larger for its own rounding, and |a| 2^-22 more for the rounding
// of a +- bound. A row whose upper end is below the largest lower end is smaller than that row's output,
// strictly: it cannot be the pick, nor tie it. (Cauchy-Schwarz for S costs a screen no second sum an output; on
// random weights it is ~1.6x sum |x||h|.)
#include <math.h>
#include <stdint.h>

#include "fvec.h"  // (EMBER_EXPORT, simd.h, half.h)
#include "parallel.h"

// the screen: a = the halves' product, as matvec_f16.c computes it (threaded by blocks of outputs)
int ember_matvec_f16(const uint16_t *wt, long lead, int rows, int cols, const float *x, float *y);

// The pick (>= 0), or: -1 cols not a multiple of 8, -2 x or a screened output not finite, -3 more than
// `max_exact` outputs could be the largest (x all zeros: every one), PARALLEL_LOST; the caller then computes every
// output. ht: W's halves, input-major, rows `hlead` halves apart; norms: each output's |h|_2 (rounded up);
// scratch: 2 rows floats; *exact gets how many outputs were computed from W.
EMBER_EXPORT(ember_matvec_f32_argmax)
int ember_matvec_f32_argmax(const float *wt, long lead, const uint16_t *ht, long hlead, const float *norms, int rows,
                            int cols, const float *x, float *scratch, int max_exact, int *exact) {
    *exact = 0;
    if (cols % 8 != 0 || rows <= 0)
        return -1;
    double xl1 = 0.0, xl2 = 0.0;
    for (int i = 0; i < cols; i++) {
        double m = x[i] < 0 ? -x[i] : x[i];
        if (!(m <= 3.0e38))
            return -2;
        xl1 += m;
        xl2 += m * m;
    }
    int rc = ember_matvec_f16(ht, hlead, rows, cols, x, scratch);
    if (rc != 0)
        return rc;
    double u = 1.0 / 16777216.0, g = cols * u / (1.0 - cols * u), r = (1.0 / 2048.0) / (1.0 - 1.0 / 2048.0);
    double c1d = (r + g * (2.0 + r)) * sqrt(xl2) * (1.0 + 1.0 / 1024.0);
    double c0d = xl1 * (1.0 + g) / 33554432.0 * (1.0 + 1.0 / 1024.0) + 2.0 * cols * 0x1p-149;
    if (!(sqrt(xl2) * 65504.0 * sqrt((double)cols) <= 1.0e38))
        return -2;  // (every partial sum of y, at most |x|_2 |w|_2, is then finite, and so are the bounds)
    float c1 = (float)c1d, c0 = (float)c0d;
    float *a = scratch, *s = scratch + rows, best_lo = -3.4e38f;
    for (int o = 0; o < rows; o++) {  // s: each output's bound
        float av = a[o] < 0 ? -a[o] : a[o];
        if (!(av <= 3.0e38f))
            return -2;
        float b = norms[o] * c1 + c0 + av * 0x1p-22f;
        s[o] = b;
        best_lo = a[o] - b > best_lo ? a[o] - b : best_lo;
    }
    int count = 0;
    for (int o = 0; o < rows; o++)
        count += a[o] + s[o] >= best_lo;
    if (count > max_exact)
        return -3;
    int arg = -1;
    float best = 0.0f;
    for (int o = 0; o < rows; o++) {
        if (a[o] + s[o] < best_lo)
            continue;
        float y = 0.0f;  // ember_matvec_f32's steps for output o
        for (int i = 0; i < cols; i++)
            y += x[i] * wt[(long)i * lead + o];
        if (arg < 0 || y > best) {  // (the first of equal largest, as numpy's argmax)
            arg = o;
            best = y;
        }
    }
    *exact = count;
    return arg;
}

// The screen's copy, made once per weight: W (n_in, n_out) float32 rounded to halves (nearest even) in h, the same
// layout, and each output's Euclidean norm of them in norms, rounded up (a half's square is exact as a float, so
// only the n_in additions round: the sum is within n_in u of its value); h 0: the norms alone (W's values are
// halves already). 0, or -1 where a value is not finite or is past the halves' range (no screen: the pick then
// computes every output).
EMBER_EXPORT(ember_f16_screen_copy)
int ember_f16_screen_copy(const float *w, int n_in, int n_out, uint16_t *h, float *norms) {
    int bad = 0;
    for (int o = 0; o < n_out; o++)
        norms[o] = 0.0f;  // (sums of squares first)
    for (int i = 0; i < n_in; i++) {
        const float *src = w + (long)i * n_out;
        uint16_t *dst = h ? h + (long)i * n_out : 0;
        int o = 0;
#if defined(__AVX512F__) && !defined(EMBER_SIMD_SCALAR)
        for (; o + 16 <= n_out; o += 16) {
            __m512 v = _mm512_loadu_ps(src + o);
            __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), v);
            bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(65504.0f), _CMP_LE_OQ) != 0xFFFF;  // (NaN: not <=)
            __m256i q = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            if (dst)
                _mm256_storeu_si256((__m256i *)(dst + o), q);
            __m512 hv = _mm512_cvtph_ps(q);
            _mm512_storeu_ps(norms + o, _mm512_add_ps(_mm512_loadu_ps(norms + o), _mm512_mul_ps(hv, hv)));
        }
#elif defined(__AVX__) && defined(__F16C__) && !defined(EMBER_SIMD_SCALAR)
        for (; o + 8 <= n_out; o += 8) {
            __m256 v = _mm256_loadu_ps(src + o);
            __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
            bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(65504.0f), _CMP_LE_OQ)) != 0xFF;
            __m128i q = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            if (dst)
                _mm_storeu_si128((__m128i *)(dst + o), q);
            __m256 hv = _mm256_cvtph_ps(q);
            _mm256_storeu_ps(norms + o, _mm256_add_ps(_mm256_loadu_ps(norms + o), _mm256_mul_ps(hv, hv)));
        }
#endif
        for (; o < n_out; o++) {
            float a = src[o] < 0 ? -src[o] : src[o];
            bad |= !(a <= 65504.0f);
            uint16_t q = f32_to_f16(src[o]);
            if (dst)
                dst[o] = q;
            uint8_t b[2] = {(uint8_t)q, (uint8_t)(q >> 8)};
            float hv = f16_to_f32(b);
            norms[o] += hv * hv;
        }
    }
    if (bad)
        return -1;
    float up = (float)(1.0 + n_in / 16777216.0 + 1.0 / 1048576.0);
    for (int o = 0; o < n_out; o++)
        norms[o] = nextafterf(sqrtf(norms[o]) * up, 3.4e38f);
    return 0;
}
