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

static float lanes_sum(const float *x, int n) {  // sum of x[0:n] in 8 lanes, then in pairs
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += x[i + j];
    for (int j = 0; i + j < n; j++) l[j] += x[i + j];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static float lanes_sq_dev(const float *x, int n, float mu) {  // sum of (x - mu)^2, as lanes_sum
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            float d = x[i + j] - mu;
            l[j] += d * d;
        }
    for (int j = 0; i + j < n; j++) {
        float d = x[i + j] - mu;
        l[j] += d * d;
    }
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static void layer_norm_rows(const intptr_t *p, int r0, int r1) {
    const float *x0 = (const float *)p[R_X], *w = (const float *)p[R_W], *b = (const float *)p[R_B];
    float *y0 = (float *)p[R_Y];
    int n = (int)p[R_COLS];
    uint32_t bits = (uint32_t)p[R_ARG];
    float eps, inv_n = 1.0f / (float)n;
    __builtin_memcpy(&eps, &bits, 4);
    for (int r = r0; r < r1; r++) {
        const float *x = x0 + (long)r * p[R_XS];
        float *y = y0 + (long)r * p[R_YS];
        float mu = lanes_sum(x, n) * inv_n;
        float sd = __builtin_sqrtf(lanes_sq_dev(x, n, mu) * inv_n + eps);
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
