// Feature-map kernels that only move and compare floats, float32 NCHW: max pooling over windows (any kernel,
// stride, padding and dilation; the caller's output size covers ceil mode) and nearest upsampling by whole factors;
// and moves of whole arrays (a concatenation's spans, a weight's transposed copy).
// The CPU backend's kernels for the registry's `max_pool2d` and `upsample_nearest` ops (cpu_float_kernels.py),
// natively and in the page. Planes (image, channel) are split between threads (parallel.h): each output is computed
// alike in any split. (YOLOv8s's SPPF pools and its two upsamplings took ~4.3 ms of numpy views and passes a
// forward; here ~0.2 ms.)
#include <stdint.h>

#include "fvec.h"
#include "half.h"

#include "parallel.h"

// intptr_t parameters of the pool: x, y, planes (N C), h, w, ho, wo, kh, kw, sh, sw, ph, pw (the top and left
// pads), dh, dw
enum { M_X, M_Y, M_PLANES, M_H, M_W, M_HO, M_WO, M_KH, M_KW, M_SH, M_SW, M_PH, M_PW, M_DH, M_DW, M_FIELDS };

// The larger of m and v where m is no NaN, else m; a NaN v is taken (fvec.h's max is a > b ? a : b on every
// target): a window with a NaN gives NaN, as torch's and numpy's max do, and every target gives the same bits.
static inline float max_nan(float m, float v) { return m != m ? m : m > v ? m : v; }
static inline fw fw_max_nan(fw m, fw v) { return fw_sel(fw_eq(m, m), fw_max(m, v), m); }

static int pool_args_ok(const intptr_t *p) {
    for (int i = M_PLANES; i < M_FIELDS; i++)
        if (p[i] < (i == M_PH || i == M_PW ? 0 : 1))
            return 0;
    return p[M_KH] * p[M_KW] <= 4096;
}

#define ROW_SPAN 2048  // padded columns a row's windows may read for the separable pass (on the stack)

// Each output row of a plane: the max over the window's rows of every column (-inf outside x) into `cols`, a row
// padded on both sides, then the max over each window's columns of that. k_h + k_w compares an output where a
// window's every tap takes k_h k_w, and no output needs bounds checks.
static void pool_rows_separable(const intptr_t *p, const float *x, float *y, float *cols) {
    long h = p[M_H], w = p[M_W], ho = p[M_HO], wo = p[M_WO];
    long kh = p[M_KH], kw = p[M_KW], sh = p[M_SH], sw = p[M_SW], ph = p[M_PH], pw = p[M_PW], dh = p[M_DH], dw = p[M_DW];
    long span = (wo - 1) * sw + (kw - 1) * dw + 1;  // cols[c]: input column c - pw
    long c0 = pw < span ? pw : span, c1 = pw + w < span ? pw + w : span;
    fw low = fw_splat(-__builtin_inff());
    for (long c = 0; c < c0; c++) cols[c] = -__builtin_inff();
    for (long c = c1; c < span; c++) cols[c] = -__builtin_inff();
    for (long oh = 0; oh < ho; oh++, y += wo) {
        long top = oh * sh - ph;
        for (long c = c0; c < c1; c += FW) {
            int n = c1 - c < FW ? (int)(c1 - c) : FW;
            fw m = low;
            for (long i = 0; i < kh; i++) {
                long ih = top + i * dh;
                if (ih >= 0 && ih < h)
                    m = fw_max_nan(m, n == FW ? fw_load(x + ih * w + c - pw) : fw_load_part(x + ih * w + c - pw, n));
            }
            fw_store_part(cols + c, m, n);
        }
        if (sw == 1) {
            for (long ow = 0; ow < wo; ow += FW) {  // (a vector past span reads cols' spare FW floats: not stored)
                int n = wo - ow < FW ? (int)(wo - ow) : FW;
                fw m = low;
                for (long j = 0; j < kw; j++) m = fw_max_nan(m, fw_load(cols + ow + j * dw));
                fw_store_part(y + ow, m, n);
            }
        } else {
            for (long ow = 0; ow < wo; ow++) {
                float m = -__builtin_inff();
                for (long j = 0; j < kw; j++) m = max_nan(m, cols[ow * sw + j * dw]);
                y[ow] = m;
            }
        }
    }
}

// The same windows tap by tap with bounds checks (rows whose windows read past ROW_SPAN padded columns).
static void pool_rows_direct(const intptr_t *p, const float *x, float *y) {
    long h = p[M_H], w = p[M_W], ho = p[M_HO], wo = p[M_WO];
    long kh = p[M_KH], kw = p[M_KW], sh = p[M_SH], sw = p[M_SW], ph = p[M_PH], pw = p[M_PW], dh = p[M_DH], dw = p[M_DW];
    for (long oh = 0; oh < ho; oh++, y += wo)
        for (long ow = 0; ow < wo; ow++) {
            float m = -__builtin_inff();
            for (long i = 0; i < kh; i++) {
                long ih = oh * sh - ph + i * dh;
                if (ih < 0 || ih >= h)
                    continue;
                for (long j = 0; j < kw; j++) {
                    long iw = ow * sw - pw + j * dw;
                    if (iw >= 0 && iw < w)
                        m = max_nan(m, x[ih * w + iw]);
                }
            }
            y[ow] = m;
        }
}

static void pool_planes(const intptr_t *p, int u0, int u1) {
    float cols[ROW_SPAN + FW];
    long plane = p[M_H] * p[M_W], out = p[M_HO] * p[M_WO];
    int separable = (p[M_WO] - 1) * p[M_SW] + (p[M_KW] - 1) * p[M_DW] + 1 <= ROW_SPAN;
    for (int u = u0; u < u1; u++) {
        const float *x = (const float *)p[M_X] + (long)u * plane;
        float *y = (float *)p[M_Y] + (long)u * out;
        if (separable)
            pool_rows_separable(p, x, y, cols);
        else
            pool_rows_direct(p, x, y);
    }
}

static void pool_job(const void *arg, int u0, int u1, int thread) {  // (parallel.h)
    (void)thread;
    pool_planes((const intptr_t *)arg, u0, u1);
}

// y = the max of each window of x (-inf outside it): 0, -1 for parameters it does not take, or PARALLEL_LOST (the
// page's pool lost a worker)
EMBER_EXPORT(ember_max_pool2d)
int ember_max_pool2d(const intptr_t *p) {
    if (!pool_args_ok(p))
        return -1;
    int planes = (int)p[M_PLANES];
    return ember_parallel(pool_job, p, planes, ember_chunks(planes, p[M_HO] * p[M_WO] * p[M_KH] * p[M_KW]));
}

// intptr_t parameters of the upsampling: x, y, planes (N C), h, w, fh, fw
enum { U_X, U_Y, U_PLANES, U_H, U_W, U_FH, U_FW, U_FIELDS };

static void upsample_planes(const intptr_t *p, int u0, int u1) {
    long h = p[U_H], w = p[U_W], fh = p[U_FH], fwd = p[U_FW], wo = w * fwd;
    for (int u = u0; u < u1; u++) {
        const float *x = (const float *)p[U_X] + (long)u * h * w;
        float *y = (float *)p[U_Y] + (long)u * h * fh * wo;
        for (long r = 0; r < h; r++, x += w, y += fh * wo) {
            if (fwd == 2) {
                for (long i = 0; i < w; i++) y[2 * i] = y[2 * i + 1] = x[i];
            } else {
                for (long i = 0; i < w; i++)
                    for (long j = 0; j < fwd; j++) y[i * fwd + j] = x[i];
            }
            for (long k = 1; k < fh; k++) __builtin_memcpy(y + k * wo, y, (unsigned long)wo * sizeof(float));
        }
    }
}

static void upsample_job(const void *arg, int u0, int u1, int thread) {
    (void)thread;
    upsample_planes((const intptr_t *)arg, u0, u1);
}

// y (planes, h fh, w fw) = each x pixel repeated into an fh x fw block: 0, -1, or PARALLEL_LOST
EMBER_EXPORT(ember_upsample_nearest)
int ember_upsample_nearest(const intptr_t *p) {
    for (int i = U_PLANES; i < U_FIELDS; i++)
        if (p[i] < 1)
            return -1;
    int planes = (int)p[U_PLANES];
    return ember_parallel(upsample_job, p, planes, ember_chunks(planes, p[U_H] * p[U_W] * p[U_FH] * p[U_FW]));
}

// ---------------------------------------------------------------------------------------------- concatenation

// n spans of bytes (srcs[i], sizes[i]) written one after another from dst: a concatenation whose inputs are each
// one block of the output (along the first axis that is not 1), in chunks of CAT_CHUNK bytes split between
// threads (one core's copy of YOLOv8s's 57 MB of concatenated maps ran at ~12 GB/s; two cores read and write more)
#define CAT_CHUNK (1L << 18)

typedef struct {
    char *dst;
    const char *const *srcs;
    const long *sizes;
    int n;
} spans_t;

static void copy_job(const void *arg, int c0, int c1, int thread) {
    const spans_t *s = (const spans_t *)arg;
    (void)thread;
    long lo = (long)c0 * CAT_CHUNK, hi = (long)c1 * CAT_CHUNK, at = 0;
    for (int i = 0; i < s->n && at < hi; at += s->sizes[i], i++) {
        long a = lo > at ? lo : at, b = hi < at + s->sizes[i] ? hi : at + s->sizes[i];
        if (a < b)
            __builtin_memcpy(s->dst + a, s->srcs[i] + (a - at), (unsigned long)(b - a));
    }
}

EMBER_EXPORT(ember_copy_spans)
int ember_copy_spans(char *dst, const char *const *srcs, const long *sizes, int n) {
    spans_t s = {dst, srcs, sizes, n};
    long total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    int chunks = (int)((total + CAT_CHUNK - 1) / CAT_CHUNK);
    return chunks ? ember_parallel(copy_job, &s, chunks, chunks < PARALLEL_MAX_CHUNKS ? chunks : PARALLEL_MAX_CHUNKS)
                  : 0;
}

// ---------------------------------------------------------------------------------------------- weight layout
// dst (cols, rows) float32 = src (rows, cols)^T, src float32 or IEEE half (`half`): a checkpoint's weight in the
// input-major layout BLAS streams (numpy_backend.weight_layout), cast on the way. In 32 x 32 blocks, each read and
// written in L1, threads taking bands of 32 columns: Whisper tiny.en's 65 half weights (39M) took 150 ms of a cold
// process in numpy's strided copies.
#define TB 32

typedef struct {
    const void *src;
    float *dst;
    long rows, cols;
    int half;
} transpose_t;

static void transpose_job(const void *arg, int b0, int b1, int thread) {
    const transpose_t *t = (const transpose_t *)arg;
    (void)thread;
    for (long c0 = (long)b0 * TB; c0 < (long)b1 * TB && c0 < t->cols; c0 += TB) {
        long c1 = c0 + TB < t->cols ? c0 + TB : t->cols;
        for (long r0 = 0; r0 < t->rows; r0 += TB) {
            long r1 = r0 + TB < t->rows ? r0 + TB : t->rows;
            for (long c = c0; c < c1; c++) {
                float *d = t->dst + c * t->rows;
                if (t->half) {
                    const uint8_t *s = (const uint8_t *)t->src + 2 * c;
                    for (long r = r0; r < r1; r++) d[r] = f16_to_f32(s + 2 * r * t->cols);
                } else {
                    const float *s = (const float *)t->src + c;
                    for (long r = r0; r < r1; r++) d[r] = s[r * t->cols];
                }
            }
        }
    }
}

EMBER_EXPORT(ember_transpose_f32)
int ember_transpose_f32(const void *src, int half, long rows, long cols, float *dst) {
    transpose_t t = {src, dst, rows, cols, half};
    int bands = (int)((cols + TB - 1) / TB);
    return ember_parallel(transpose_job, &t, bands, ember_chunks_sized(bands, rows * TB, 1L << 16, 1L << 16));
}
