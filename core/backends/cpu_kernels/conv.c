// Direct float32 convolution (conv2d; conv1d as one row), NCHW in and out, any stride, padding, dilation and
// groups, the bias and an activation (ReLU, SiLU, GELU) applied as each output row leaves the registers: the CPU
// backend's kernel for the registry's `conv_bias_act` op (cpu_float_kernels.py), natively and in the page.
//
// No im2col: the padded input is split once into stride-phase planes (plane (a, b) holds the padded pixels whose
// row is a and column b modulo the stride; for stride 1 it is the padded image), so every kernel tap reads a
// contiguous run of a plane for consecutive output pixels. A register tile of F8_MR output channels x F8_NV
// 8-pixel vectors accumulates over input channels and taps (weights broadcast, pixels loaded), in blocks of
// channels whose weights stay in L1 while a block of output rows streams through.
//
// Work is cut into units, one output row segment of at most SEG pixels of one image. `ember_conv2d_rows` computes
// a range of units (the page's worker pool and threads.c split ranges between threads), and every output is one
// multiply-add chain over (channel, tap) in the same order whatever the tiling, the range or the thread: results
// do not depend on the split. Freestanding: the caller passes every buffer (ember_conv2d_scratch_floats).
#include <stdint.h>

#include "fvec.h"

#if !defined(__wasm__)
typedef void (*ember_rows_fn)(const void *arg, int r0, int r1);
int ember_parallel_rows(ember_rows_fn fn, const void *arg, int n, int threads);
#endif

// intptr_t parameters, filled by cpu_float_kernels.py
enum { C_X, C_W, C_B, C_Y, C_SCRATCH, C_N, C_C, C_H, C_W_, C_O, C_KH, C_KW, C_SH, C_SW, C_PH, C_PW, C_DH, C_DW,
       C_GROUPS, C_ACT, C_FIELDS };
#define SEG 192        // output pixels a unit at most (a multiple of every target's 8 * F8_NV)
#define KC_TAPS (2304 / F8_MR)  // channels x taps of a weight block (its F8_MR rows: 9 KiB, in L1)
#define PANEL 65536    // floats of input planes a block of units reads for a block of channels (in L2)
#define MAX_TAPS 1024

typedef struct {
    const float *x, *w, *b;
    float *y, *planes;
    int n, c, h, wd, o, kh, kw, sh, sw, ph, pw, dh, dw, groups, act;
    int ho, wo, hq, wq, wqa, nseg, taps, cg, og, kc, ub;
    long cs, phase, image;  // floats from one plane channel, phase, image to the next
} conv_t;

static int setup(const intptr_t *p, conv_t *k) {
    k->x = (const float *)p[C_X], k->w = (const float *)p[C_W], k->b = (const float *)p[C_B];
    k->y = (float *)p[C_Y], k->planes = (float *)p[C_SCRATCH];
    k->n = (int)p[C_N], k->c = (int)p[C_C], k->h = (int)p[C_H], k->wd = (int)p[C_W_], k->o = (int)p[C_O];
    k->kh = (int)p[C_KH], k->kw = (int)p[C_KW], k->sh = (int)p[C_SH], k->sw = (int)p[C_SW];
    k->ph = (int)p[C_PH], k->pw = (int)p[C_PW], k->dh = (int)p[C_DH], k->dw = (int)p[C_DW];
    k->groups = (int)p[C_GROUPS], k->act = (int)p[C_ACT];
    if (k->n < 1 || k->c < 1 || k->o < 1 || k->kh < 1 || k->kw < 1 || k->sh < 1 || k->sw < 1 || k->dh < 1 ||
        k->dw < 1 || k->ph < 0 || k->pw < 0 || k->groups < 1 || k->c % k->groups || k->o % k->groups ||
        k->kh * k->kw > MAX_TAPS)
        return -1;
    k->ho = (k->h + 2 * k->ph - k->dh * (k->kh - 1) - 1) / k->sh + 1;
    k->wo = (k->wd + 2 * k->pw - k->dw * (k->kw - 1) - 1) / k->sw + 1;
    if (k->ho < 1 || k->wo < 1)
        return -1;
    k->hq = k->ho + (k->kh - 1) * k->dh / k->sh;
    k->wq = k->wo + (k->kw - 1) * k->dw / k->sw;
    k->wqa = (k->wq + 8 + 7) & ~7;  // room for a last vector's lanes past the row (zeros)
    k->nseg = (k->wo + SEG - 1) / SEG;
    k->taps = k->kh * k->kw;
    k->cg = k->c / k->groups, k->og = k->o / k->groups;
    k->kc = KC_TAPS / k->taps > 0 ? KC_TAPS / k->taps : 1;
    k->kc = k->kc < k->cg ? k->kc : k->cg;
    // units that share a pass over the weights: their new input rows of every phase fill about PANEL floats
    long per_unit = (long)k->kc * k->sh * k->sw * (k->wqa < SEG + 8 ? k->wqa : SEG + 8);
    k->ub = PANEL / per_unit < 1 ? 1 : PANEL / per_unit > 8 ? 8 : (int)(PANEL / per_unit);
    k->cs = (long)k->hq * k->wqa;
    k->phase = k->cs * k->c;
    k->image = k->phase * k->sh * k->sw;
    return 0;
}

// floats of scratch ember_conv2d needs (the planes), or -1 for parameters it does not take
EMBER_EXPORT(ember_conv2d_scratch_floats)
long ember_conv2d_scratch_floats(const intptr_t *p) {
    conv_t k;
    return setup(p, &k) ? -1 : k.image * k.n + 8;
}

// units of each pass: the planes' (images x channels), then the output's (images x rows x segments)
EMBER_EXPORT(ember_conv2d_units)
long ember_conv2d_units(const intptr_t *p, int pass) {
    conv_t k;
    if (setup(p, &k))
        return -1;
    return pass == 0 ? (long)k.n * k.c : (long)k.n * k.ho * k.nseg;
}

// ---------------------------------------------------------------------------------------------- the planes

static void planes_rows(const conv_t *k, int u0, int u1) {
    for (int u = u0; u < u1; u++) {
        int n = u / k->c, c = u % k->c;
        const float *src = k->x + ((long)n * k->c + c) * k->h * k->wd;
        for (int a = 0; a < k->sh; a++)
            for (int b = 0; b < k->sw; b++) {
                float *dst = k->planes + n * k->image + (a * k->sw + b) * k->phase + c * k->cs;
                for (int r = 0; r < k->hq; r++, dst += k->wqa) {
                    int ih = r * k->sh + a - k->ph;
                    if (ih < 0 || ih >= k->h) {
                        for (int q = 0; q < k->wqa; q++) dst[q] = 0.0f;
                        continue;
                    }
                    const float *row = src + (long)ih * k->wd;
                    for (int q = 0; q < k->wqa; q++) {
                        int iw = q * k->sw + b - k->pw;
                        dst[q] = q < k->wq && iw >= 0 && iw < k->wd ? row[iw] : 0.0f;
                    }
                }
            }
    }
}

EMBER_EXPORT(ember_conv2d_prepare_rows)
void ember_conv2d_prepare_rows(const intptr_t *p, int u0, int u1) {
    conv_t k;
    if (!setup(p, &k))
        planes_rows(&k, u0, u1);
}

// ---------------------------------------------------------------------------------------------- the tile

// y[r][0:width] (+)= sum over kc channels and the taps of w[r][c][t] x_t[c][0:width] for MRc output channels
// (rows of y yos apart, of w wos apart) and width <= 8 NVc pixels; src: the planes at this output pixel of the
// block's first channel (off: each tap's offset)
static inline __attribute__((always_inline)) void tile(const int MRc, const int NVc, const float *src, long cs,
                                                       const long *off, int taps, const float *w, long wos, int kc,
                                                       float *y, long yos, int width, int first) {
#define TILE_Y y
#define TILE_YS yos
#define TILE_W width
#define TILE_MUL ((const float *)0)
#define TILE_A(r) (wc + (r) * wos + t)
    TILE_DECL;
    if (!first) {
        TILE_EACH(TILE_LOAD_ONE)
    }
    for (int c = 0; c < kc; c++) {
        const float *xc = src + c * cs, *wc = w + c * taps;
        for (int t = 0; t < taps; t++)
            TILE_STEP(xc + off[t]);
    }
    TILE_EACH(TILE_STORE_ONE)
#undef TILE_Y
#undef TILE_YS
#undef TILE_W
#undef TILE_MUL
#undef TILE_A
}

#define TILE_ARGS src, k->cs, off, k->taps, w, wos, kc, y, yos, width, first
#define TILE_NV(MRc)                                                         \
    switch (nv) {                                                            \
    case 1: tile(MRc, 1, TILE_ARGS); break;                                  \
    case 2: if (F8_NV >= 2) tile(MRc, F8_NV >= 2 ? 2 : 1, TILE_ARGS); break; \
    default: if (F8_NV >= 3) tile(MRc, F8_NV >= 3 ? 3 : 1, TILE_ARGS); break; \
    }

static void tile_any(const conv_t *k, int mr, int nv, const float *src, const long *off, const float *w, long wos,
                     int kc, float *y, long yos, int width, int first) {
    switch (mr) {  // (the cases past F8_MR are never taken: mr <= F8_MR)
    case 1: TILE_NV(1) break;
    case 2: TILE_NV(2) break;
    case 3: TILE_NV(3) break;
    case 4: TILE_NV(4) break;
    case 5: TILE_NV(F8_MR >= 5 ? 5 : 1) break;
    case 6: TILE_NV(F8_MR >= 6 ? 6 : 1) break;
    case 7: TILE_NV(F8_MR >= 7 ? 7 : 1) break;
    default: TILE_NV(F8_MR) break;
    }
}

// ---------------------------------------------------------------------------------------------- the output

static void conv_rows(const conv_t *k, int u0, int u1) {
    long off[MAX_TAPS];
    for (int i = 0; i < k->kh; i++)
        for (int j = 0; j < k->kw; j++) {
            int dy = i * k->dh, dx = j * k->dw;
            off[i * k->kw + j] = ((dy % k->sh) * k->sw + dx % k->sw) * k->phase + (long)(dy / k->sh) * k->wqa + dx / k->sw;
        }
    long wos = (long)k->cg * k->taps, yos = (long)k->ho * k->wo;
    for (int ub = u0; ub < u1; ub += k->ub) {
        int ue = ub + k->ub < u1 ? ub + k->ub : u1;
        for (int g = 0; g < k->groups; g++)
            for (int c0 = 0; c0 < k->cg; c0 += k->kc) {
                int kc = k->cg - c0 < k->kc ? k->cg - c0 : k->kc, first = c0 == 0, last = c0 + kc >= k->cg;
                for (int o0 = 0; o0 < k->og; o0 += F8_MR) {
                    int mr = k->og - o0 < F8_MR ? k->og - o0 : F8_MR, o = g * k->og + o0;
                    const float *w = k->w + (long)o * wos + (long)c0 * k->taps;
                    for (int u = ub; u < ue; u++) {
                        int seg = u % k->nseg, row = u / k->nseg, n = row / k->ho, oh = row % k->ho;
                        int ow0 = seg * SEG, ow1 = ow0 + SEG < k->wo ? ow0 + SEG : k->wo;
                        const float *base = k->planes + n * k->image + (long)(g * k->cg + c0) * k->cs +
                                            (long)oh * k->wqa;
                        float *yrow = k->y + ((long)n * k->o + o) * yos + (long)oh * k->wo;
                        for (int ow = ow0; ow < ow1;) {
                            int left = ow1 - ow, nv = left >= 8 * F8_NV ? F8_NV : (left + 7) / 8;
                            int width = left < 8 * nv ? left : 8 * nv;
                            tile_any(k, mr, nv, base + ow, off, w, wos, kc, yrow + ow, yos, width, first);
                            ow += width;
                        }
                        if (last && (k->b || k->act))
                            for (int r = 0; r < mr; r++)
                                act_row(yrow + r * yos + ow0, ow1 - ow0, k->b ? k->b[o + r] : 0.0f, k->act);
                    }
                }
            }
    }
}

// output units [u0, u1) (after the planes are prepared)
EMBER_EXPORT(ember_conv2d_rows)
void ember_conv2d_rows(const intptr_t *p, int u0, int u1) {
    conv_t k;
    if (!setup(p, &k))
        conv_rows(&k, u0, u1);
}

#if !defined(__wasm__)
static void planes_job(const void *arg, int u0, int u1) { planes_rows((const conv_t *)arg, u0, u1); }
static void conv_job(const void *arg, int u0, int u1) { conv_rows((const conv_t *)arg, u0, u1); }
#endif

// the whole convolution: the planes, then every output unit; natively split between `threads` threads.
// Returns 0, or -1 for parameters it does not take.
EMBER_EXPORT(ember_conv2d)
int ember_conv2d(const intptr_t *p, int threads) {
    conv_t k;
    if (setup(p, &k))
        return -1;
    int prep = k.n * k.c, units = k.n * k.ho * k.nseg;
#if defined(__wasm__)
    (void)threads;
    planes_rows(&k, 0, prep);
    conv_rows(&k, 0, units);
#else
    ember_parallel_rows(planes_job, &k, prep, threads);
    ember_parallel_rows(conv_job, &k, units, threads);
#endif
    return 0;
}
