// Row kernels of dense encoders (float32), in one pass over each row where numpy makes several: LayerNorm
// (x - mean) / sqrt(var + eps) w + b, and a linear layer's epilogue act(x + b) (GELU erf / tanh, SiLU, ReLU) with
// the bias per column. The CPU backend's kernels for the registry's `layer_norm` and `bias_act` ops
// (cpu_fused.py), natively and in the page. Rows are addressed by a row stride (unit column stride); out may be
// x. Sums run in 8 lanes (i % 8), added in one fixed order: every target and any split of rows gives the same bits.
#include <stdint.h>

#include "fvec.h"

#include "parallel.h"

// intptr_t parameters: x, out, weight (or 0), bias (or 0), rows, cols, x's and out's row strides (floats), then
// LayerNorm's eps (float bits) or the epilogue's activation (fvec.h's ACT_*), and for the epilogue 0 (a bias per
// column) or c: one bias per row, row r's b[r % c] (a convolution's (N C, H W) output rows with C channels)
enum { R_X, R_Y, R_W, R_B, R_ROWS, R_COLS, R_XS, R_YS, R_ARG, R_BROWS, R_FIELDS };

#define ROWS_PER_UNIT 16

// Sum then sum of squared deviations of R_GROUP rows at once, in 8 lanes (i % 8) each, then in pairs: every row's
// sums are the chains one row alone would add (the same bits), four of them interleaved so each add's latency hides
// behind the other rows' (one row's 8-lane chain is latency-bound: 0.5 ns an element for 384-wide rows before).
#define R_GROUP 4

static float lanes_total(f8 acc, const float *x, int i, int n, const float *mu) {  // + the tail, lanes paired
    float l[8];
    f8_store(l, acc);
    for (int j = 0; i + j < n; j++) {
        float v = mu ? x[i + j] - *mu : x[i + j];
        l[j] += mu ? v * v : v;
    }
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static void group_stats(const float *const *x, int n, float inv_n, float eps, float *mu, float *sd) {
    f8 s0 = f8_zero(), s1 = f8_zero(), s2 = f8_zero(), s3 = f8_zero();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = f8_add(s0, f8_load(x[0] + i));
        s1 = f8_add(s1, f8_load(x[1] + i));
        s2 = f8_add(s2, f8_load(x[2] + i));
        s3 = f8_add(s3, f8_load(x[3] + i));
    }
    f8 s[R_GROUP] = {s0, s1, s2, s3};
    for (int r = 0; r < R_GROUP; r++)
        mu[r] = lanes_total(s[r], x[r], i, n, 0) * inv_n;
    f8 m0 = f8_splat(mu[0]), m1 = f8_splat(mu[1]), m2 = f8_splat(mu[2]), m3 = f8_splat(mu[3]);
    s0 = s1 = s2 = s3 = f8_zero();
    for (i = 0; i + 8 <= n; i += 8) {
        f8 d0 = f8_sub(f8_load(x[0] + i), m0), d1 = f8_sub(f8_load(x[1] + i), m1);
        f8 d2 = f8_sub(f8_load(x[2] + i), m2), d3 = f8_sub(f8_load(x[3] + i), m3);
        s0 = f8_add(s0, f8_mul(d0, d0));
        s1 = f8_add(s1, f8_mul(d1, d1));
        s2 = f8_add(s2, f8_mul(d2, d2));
        s3 = f8_add(s3, f8_mul(d3, d3));
    }
    f8 q[R_GROUP] = {s0, s1, s2, s3};
    for (int r = 0; r < R_GROUP; r++)
        sd[r] = __builtin_sqrtf(lanes_total(q[r], x[r], i, n, mu + r) * inv_n + eps);
}

static void layer_norm_rows(const intptr_t *p, int r0, int r1) {
    const float *x0 = (const float *)p[R_X], *w = (const float *)p[R_W], *b = (const float *)p[R_B];
    float *y0 = (float *)p[R_Y];
    int n = (int)p[R_COLS];
    uint32_t bits = (uint32_t)p[R_ARG];
    float eps, inv_n = 1.0f / (float)n;
    __builtin_memcpy(&eps, &bits, 4);
    for (int g = r0; g < r1; g += R_GROUP) {
        const float *xs[R_GROUP];
        float mus[R_GROUP], sds[R_GROUP];
        for (int k = 0; k < R_GROUP; k++)  // (past r1: the last row again, its results unused)
            xs[k] = x0 + (long)(g + k < r1 ? g + k : r1 - 1) * p[R_XS];
        group_stats(xs, n, inv_n, eps, mus, sds);
        for (int k = 0; k < R_GROUP && g + k < r1; k++) {
            const float *x = xs[k];
            float *y = y0 + (long)(g + k) * p[R_YS];
            float mu = mus[k], sd = sds[k];
            if (w && b)
                for (int i = 0; i < n; i++) y[i] = (x[i] - mu) / sd * w[i] + b[i];
            else if (w)
                for (int i = 0; i < n; i++) y[i] = (x[i] - mu) / sd * w[i];
            else if (b)
                for (int i = 0; i < n; i++) y[i] = (x[i] - mu) / sd + b[i];
            else
                for (int i = 0; i < n; i++) y[i] = (x[i] - mu) / sd;
        }
    }
}

static void bias_act_rows(const intptr_t *p, int r0, int r1) {
    const float *x0 = (const float *)p[R_X], *b = (const float *)p[R_B];
    float *y0 = (float *)p[R_Y];
    int n = (int)p[R_COLS], act = (int)p[R_ARG], per_row = (int)p[R_BROWS];
    for (int r = r0; r < r1; r++) {
        const float *x = x0 + (long)r * p[R_XS];
        float *y = y0 + (long)r * p[R_YS];
        if (b && per_row) {  // one bias for the row, added as the activation reads it
            if (y != x)
                for (int i = 0; i < n; i++) y[i] = x[i];
            act_row(y, n, b[r % per_row], act);
            continue;
        }
        if (b)
            for (int i = 0; i < n; i++) y[i] = x[i] + b[i];
        else if (y != x)
            for (int i = 0; i < n; i++) y[i] = x[i];
        if (act != ACT_NONE)
            act_row(y, n, 0.0f, act);
    }
}

// units (ROWS_PER_UNIT rows each) [u0, u1) of a parameter block
EMBER_EXPORT(ember_layer_norm_rows)
void ember_layer_norm_rows(const intptr_t *p, int u0, int u1) {
    int rows = (int)p[R_ROWS], r1 = u1 * ROWS_PER_UNIT;
    layer_norm_rows(p, u0 * ROWS_PER_UNIT, r1 < rows ? r1 : rows);
}

EMBER_EXPORT(ember_bias_act_rows)
void ember_bias_act_rows(const intptr_t *p, int u0, int u1) {
    int rows = (int)p[R_ROWS], r1 = u1 * ROWS_PER_UNIT;
    bias_act_rows(p, u0 * ROWS_PER_UNIT, r1 < rows ? r1 : rows);
}

EMBER_EXPORT(ember_rows_units)
int ember_rows_units(const intptr_t *p) { return (int)((p[R_ROWS] + ROWS_PER_UNIT - 1) / ROWS_PER_UNIT); }

static void layer_norm_job(const void *arg, int u0, int u1, int thread) {  // (parallel.h)
    (void)thread;
    ember_layer_norm_rows((const intptr_t *)arg, u0, u1);
}

static void bias_act_job(const void *arg, int u0, int u1, int thread) {
    (void)thread;
    ember_bias_act_rows((const intptr_t *)arg, u0, u1);
}

// a unit's work for parallel.h: its rows' floats, weighted as a float matvec's (a few operations each)
static long unit_work(const intptr_t *p) { return 4L * ROWS_PER_UNIT * p[R_COLS]; }

// the rows split between threads (parallel.h): 0, or PARALLEL_LOST (the page's pool lost a worker)
EMBER_EXPORT(ember_layer_norm)
int ember_layer_norm(const intptr_t *p) {
    int units = ember_rows_units(p);
    return ember_parallel(layer_norm_job, p, units, ember_chunks(units, unit_work(p)));
}

EMBER_EXPORT(ember_bias_act)
int ember_bias_act(const intptr_t *p) {
    int units = ember_rows_units(p);
    return ember_parallel(bias_act_job, p, units, ember_chunks(units, unit_work(p)));
}
