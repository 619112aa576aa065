// A 3x3 conv of stride 1 as Winograd's F(4x4, 3x3) for the CPU backend (cpu_float_kernels.py: the registry's
// conv_bias_act takes it for 3x3 convs of many channels, cpu_dense.py), natively and in the page. Freestanding: the
// caller passes every buffer (ember_conv3x3_winograd_scratch_floats).
#include <stdint.h>

#include "conv.h"
#include "parallel.h"

// ---------------------------------------------------------------------------------------------- Winograd F(4x4, 3x3)
// A 3x3 conv of stride 1, dilation 1 and one group as Lavin & Gray's F(4x4, 3x3) (arXiv 1509.09308): each 4 x 4
// block of output pixels (a tile) is A^T [sum over channels of U_oc * V_c] A, V_c = B^T d B the transform of the
// channel's 6 x 6 input block under the tile, U_oc = G g G^T the weight's (made once per weight by the caller:
// cpu_dense.py). The channel sums are 36 products (O, C) x (C, tiles), one per position of the 6 x 6: 2.25
// multiply-adds an output pixel per channel pair where the direct conv has 9. The products are conv.c's (a 1x1 conv
// of 36 groups over the transformed tiles, its tile natively or the page's micro-kernel: one multiply-add chain over
// the channels for every value, as in every conv there; natively gemm_native.c by default); the transforms are adds
// and multiplies in one fixed order, never fused (the native build has -ffp-contract=off), so the page's relaxed
// build gives the native bits. The bias and the activation apply as act(y + b): natively as the output rows leave,
// in the page as one pass over each output channel's plane.
//
// Memory (scratch): V (n, 36, c, tp) and the products M (n, 36, o, tp), tp the image's tiles rounded up to 16 (the
// products' vectors fill whole rows: the 1x1 conv reads V in place), and each thread's row buffers.

// W_TILE_PRODUCTS: 1 for conv.c's products natively too (the page's: a test compares the two). W_GEMM: in the page,
// gemm.c's scratch for each of the threads (ember_sgemm_scratch_floats() each) where the products may run there, or 0
enum { W_X, W_U, W_B, W_Y, W_SCRATCH, W_N, W_C, W_H, W_W, W_O, W_PH, W_PW, W_ACT, W_TILE_PRODUCTS, W_GEMM, W_FIELDS };

typedef struct {
    const float *x, *u, *b;
    float *y, *v, *m, *rows;  // rows: PARALLEL_MAX_THREADS buffers of row_floats
    int n, c, h, wd, o, ph, pw, act, ho, wo, tx, ty;  // tx, ty: tiles a row, a column
    int tile_products;
    long tp, txp, row_floats;  // txp: tx rounded up to whole vectors, plus one (a row's buffers)
    float *gemm;               // W_GEMM
} wino_t;

static int wino_setup(const intptr_t *p, wino_t *k) {
    k->x = (const float *)p[W_X], k->u = (const float *)p[W_U], k->b = (const float *)p[W_B];
    k->y = (float *)p[W_Y];
    k->n = (int)p[W_N], k->c = (int)p[W_C], k->h = (int)p[W_H], k->wd = (int)p[W_W], k->o = (int)p[W_O];
    k->ph = (int)p[W_PH], k->pw = (int)p[W_PW], k->act = (int)p[W_ACT], k->tile_products = (int)p[W_TILE_PRODUCTS];
    k->gemm = (float *)p[W_GEMM];
    if (k->n < 1 || k->c < 1 || k->o < 1 || k->h < 1 || k->wd < 1 || k->ph < 0 || k->pw < 0 || k->act < 0 ||
        k->act > 4 || k->h > (1 << 24) || k->wd > (1 << 24) || k->ph > 2 || k->pw > 2)
        return -1;
    k->ho = k->h + 2 * k->ph - 2, k->wo = k->wd + 2 * k->pw - 2;
    if (k->ho < 1 || k->wo < 1)
        return -1;
    k->tx = (k->wo + 3) / 4, k->ty = (k->ho + 3) / 4;
    k->tp = ((long)k->tx * k->ty + 15) & ~15L;
    k->txp = ((long)k->tx + FW - 1) / FW * FW + FW;
    // the input's: 4 phases of a padded row, 8 rows' six column transforms; the output's: 4 x 6 rows, 4 phases
    k->row_floats = 52 * k->txp + 16;
    float *s = (float *)p[W_SCRATCH];
    k->v = s, k->m = s + (long)k->n * 36 * k->c * k->tp;
    k->rows = k->m + (long)k->n * 36 * k->o * k->tp + 16;  // (then the products' own scratch)
    return 0;
}

// the 1x1 conv of 36 groups whose products are M = U V, per image: x V (n, 36 c, 1, tp), w U (36 o, c, 1, 1)
static void wino_products_params(const wino_t *k, intptr_t *q, float *scratch) {
    for (int i = 0; i < C_FIELDS; i++) q[i] = 0;
    q[C_X] = (intptr_t)k->v, q[C_W] = (intptr_t)k->u, q[C_Y] = (intptr_t)k->m, q[C_SCRATCH] = (intptr_t)scratch;
    q[C_N] = k->n, q[C_C] = 36L * k->c, q[C_H] = 1, q[C_W_] = k->tp, q[C_O] = 36L * k->o;
    q[C_KH] = q[C_KW] = q[C_SH] = q[C_SW] = q[C_DH] = q[C_DW] = 1;
    q[C_GROUPS] = 36;
}

EMBER_EXPORT(ember_conv3x3_winograd_scratch_floats)
long ember_conv3x3_winograd_scratch_floats(const intptr_t *p) {
    wino_t k;
    if (wino_setup(p, &k))
        return -1;
    intptr_t q[C_FIELDS];
    wino_products_params(&k, q, 0);
    long inner = ember_conv2d_scratch_floats(q);
    if (inner < 0)
        return -1;
    return (long)(k.rows - k.v) + PARALLEL_MAX_THREADS * k.row_floats + inner;
}

// B^T's rows on six vectors d0..d5 (six values down a column or along a row of 6 x 6 blocks): the six transforms
#define WINO_BT(d0, d1, d2, d3, d4, d5, t)                                                                   \
    {                                                                                                        \
        const fw four = fw_splat(4.0f), five = fw_splat(5.0f), two = fw_splat(2.0f);                         \
        fw d42 = fw_sub(d4, d2), d31 = fw_mul(fw_sub(d3, d1), two);                                          \
        t[0] = fw_add(fw_sub(fw_mul(d0, four), fw_mul(d2, five)), d4);                                       \
        t[1] = fw_sub(fw_add(d4, d3), fw_mul(fw_add(d1, d2), four));                                         \
        t[2] = fw_add(fw_sub(d4, d3), fw_mul(fw_sub(d1, d2), four));                                         \
        t[3] = fw_add(d42, d31);                                                                             \
        t[4] = fw_sub(d42, d31);                                                                             \
        t[5] = fw_add(fw_sub(fw_mul(d1, four), fw_mul(d3, five)), d5);                                       \
    }

// A^T's rows on six vectors m0..m5: the four outputs
#define WINO_AT(m0, m1, m2, m3, m4, m5, o)                                                                   \
    {                                                                                                        \
        fw a12 = fw_add(m1, m2), s12 = fw_sub(m1, m2), a34 = fw_add(m3, m4), s34 = fw_sub(m3, m4);           \
        o[0] = fw_add(fw_add(m0, a12), a34);                                                                 \
        o[1] = fw_add(s12, fw_mul(s34, fw_splat(2.0f)));                                                     \
        o[2] = fw_add(a12, fw_mul(a34, fw_splat(4.0f)));                                                     \
        o[3] = fw_add(fw_add(s12, fw_mul(s34, fw_splat(8.0f))), m5);                                         \
    }

// input row ih's six column transforms of every tile (h: 6 rows of txp): the row padded (columns -pw ..
// 4 tx + 1 - pw, zeros outside the image) as its four phases ph[j][t] = column 4 t + j, each tile's six columns
// 4 t .. 4 t + 5 the phases at t and t + 1
static void wino_in_row(const wino_t *k, const float *src, int ih, float *ph, float *h) {
    long txp = k->txp;
    if (ih < 0 || ih >= k->h) {
        for (long e = 0; e < 6 * txp; e++) h[e] = 0.0f;
        return;
    }
    const float *row = src + (long)ih * k->wd - k->pw;  // (column -pw: the padded row's first)
    float *restrict p0 = ph, *restrict p1 = ph + txp, *restrict p2 = ph + 2 * txp, *restrict p3 = ph + 3 * txp;
    // the phases' entries t whose four columns 4 t - pw .. 4 t + 3 - pw are all inside the image: [ta, tb) (a loop
    // the compiler turns into vector shuffles), the others one at a time
    long ta = (k->pw + 3) / 4, tb = (k->wd + k->pw) / 4;
    tb = tb < txp ? tb : txp;
    ta = ta < tb ? ta : tb;
    for (long t = ta; t < tb; t++) {
        const float *q = row + 4 * t;
        p0[t] = q[0], p1[t] = q[1], p2[t] = q[2], p3[t] = q[3];
    }
    for (long t = 0; t < txp; t++) {
        if (t == ta)
            t = tb;
        if (t >= txp)
            break;
        for (int j = 0; j < 4; j++) {
            long col = 4 * t + j - k->pw;
            ph[j * txp + t] = col >= 0 && col < k->wd ? row[4 * t + j] : 0.0f;
        }
    }
    for (long t = 0; t < k->tx; t += FW) {
        fw e[6];
        WINO_BT(fw_load(ph + t), fw_load(ph + txp + t), fw_load(ph + 2 * txp + t), fw_load(ph + 3 * txp + t),
                fw_load(ph + t + 1), fw_load(ph + txp + t + 1), e)
        for (int i = 0; i < 6; i++) fw_store(h + i * txp + t, e[i]);
    }
}

// rows [r0, r1) of (image, channel): every tile's V = B^T d B into V[n][p][c][tile], p = 6 a + i (a: down the
// block's columns, i: along its rows). An input row's column transforms serve the two tile rows that read it.
static void wino_in_rows(const void *arg, int r0, int r1, int thread) {
    const wino_t *k = (const wino_t *)arg;
    long txp = k->txp, ps = (long)k->c * k->tp;
    float *ph = k->rows + thread * k->row_floats, *hs = ph + 4 * txp;  // hs: 8 slots of 6 rows, row ih's slot ih % 8
    for (int r = r0; r < r1; r++) {
        int n = r / k->c, c = r % k->c;
        const float *src = k->x + ((long)n * k->c + c) * k->h * k->wd;
        float *v = k->v + ((long)n * 36 * k->c + c) * k->tp;  // position p's row: v + p ps
        for (int ty = 0; ty < k->ty; ty++) {
            int top = 4 * ty - k->ph;
            for (int j = ty ? 2 : 0; j < 6; j++)  // (rows 0, 1 are the last tile row's 4, 5)
                wino_in_row(k, src, top + j, ph, hs + ((top + j + 8) & 7) * 6 * txp);
            const float *hj[6];
            for (int j = 0; j < 6; j++) hj[j] = hs + ((top + j + 8) & 7) * 6 * txp;
            long t0 = (long)ty * k->tx;
            for (int i = 0; i < 6; i++)
                for (long t = 0; t < k->tx; t += FW) {
                    // (a whole vector where it stays inside the channel's row: the lanes past the tile row are the
                    // next one's, written after, or past the image's tiles, zeroed after)
                    int w = t0 + t + FW <= k->tp ? FW : (int)(k->tx - t);
                    fw e[6];
                    WINO_BT(fw_load(hj[0] + i * txp + t), fw_load(hj[1] + i * txp + t), fw_load(hj[2] + i * txp + t),
                            fw_load(hj[3] + i * txp + t), fw_load(hj[4] + i * txp + t), fw_load(hj[5] + i * txp + t),
                            e)
                    for (int a = 0; a < 6; a++) fw_store_part(v + (6L * a + i) * ps + t0 + t, e[a], w);
                }
        }
        long t1 = (long)k->tx * k->ty;  // the tiles past the image's, up to tp: zeros
        for (int p = 0; p < 36; p++)
            for (long t = t1; t < k->tp; t++) v[p * ps + t] = 0.0f;
    }
}

// rows [r0, r1) of (image, output channel): every tile's A^T M A, then act(y + b) into y's rows
static void wino_out_rows(const void *arg, int r0, int r1, int thread) {
    const wino_t *k = (const wino_t *)arg;
    long txp = k->txp, ps = (long)k->o * k->tp;
    float *g = k->rows + thread * k->row_floats;  // g[q][i]: 4 x 6 rows of txp, the columns' transforms
    float *yp = g + 24 * txp;                     // 4 phases of an output row: yp[j][t] = column 4 t + j
    for (int r = r0; r < r1; r++) {
        int n = r / k->o, o = r % k->o;
        const float *m = k->m + ((long)n * 36 * k->o + o) * k->tp;  // position p's row: m + p ps
        float *y = k->y + ((long)n * k->o + o) * k->ho * k->wo;
        const float *b = k->b ? k->b + o : 0;
        for (int ty = 0; ty < k->ty; ty++) {
            long t0 = (long)ty * k->tx;
            for (int i = 0; i < 6; i++)  // down column i of the blocks: rows a = 0..5 -> output rows q = 0..3
                for (long t = 0; t < k->tx; t += FW) {
                    int w = t0 + t + FW <= k->tp ? FW : (int)(k->tx - t);  // (lanes past the row: not used)
                    const float *mi = m + (long)i * ps + t0 + t;
                    fw e[4];
                    WINO_AT(fw_load_part(mi, w), fw_load_part(mi + 6 * ps, w), fw_load_part(mi + 12 * ps, w),
                            fw_load_part(mi + 18 * ps, w), fw_load_part(mi + 24 * ps, w),
                            fw_load_part(mi + 30 * ps, w), e)
                    for (int q = 0; q < 4; q++) fw_store(g + (q * 6L + i) * txp + t, e[q]);
                }
            for (int q = 0; q < 4 && 4 * ty + q < k->ho; q++) {  // along output row q: columns 4 t .. 4 t + 3
                const float *gq = g + q * 6L * txp;
                for (long t = 0; t < k->tx; t += FW) {
                    fw e[4];
                    WINO_AT(fw_load(gq + t), fw_load(gq + txp + t), fw_load(gq + 2 * txp + t),
                            fw_load(gq + 3 * txp + t), fw_load(gq + 4 * txp + t), fw_load(gq + 5 * txp + t), e)
#if defined(__wasm__)
                    for (int j = 0; j < 4; j++) fw_store(yp + j * txp + t, e[j]);
                }
#else
                    for (int j = 0; j < 4; j++) fw_store(yp + j * txp + t, fw_bias_act(e[j], b, k->act));
                }
#endif
                float *restrict yr = y + (long)(4 * ty + q) * k->wo;
                const float *restrict y0 = yp, *restrict y1 = yp + txp, *restrict y2 = yp + 2 * txp,
                                      *restrict y3 = yp + 3 * txp;
                long full = k->wo / 4;  // tiles whose four columns are all inside
                for (long t = 0; t < full; t++)
                    yr[4 * t] = y0[t], yr[4 * t + 1] = y1[t], yr[4 * t + 2] = y2[t], yr[4 * t + 3] = y3[t];
                for (int j = 0; 4 * full + j < k->wo; j++) yr[4 * full + j] = yp[j * txp + full];
            }
        }
#if defined(__wasm__)
        // the page: act(y + b) over the channel's whole plane in one pass (conv.h), where a pass over each output
        // row's four phases (16-32 values on YOLO's deep maps) spent as much on the activation's constants and the
        // call as on its values
        if (b || k->act)
            ember_conv_epilogue(y, 0, 1, k->ho * k->wo, b, 0, k->act);
#endif
    }
}

#if !defined(__wasm__)
// natively the products are gemm_native.c's where this build has its kernel (AVX2 or AVX-512): packed panels of V,
// each output one multiply-add chain over the channels in order, the bits of this file's tile; a product a job
// (its own call runs on the job's thread: parallel.h's nested calls), so an image's few tiles still fill the threads
int ember_sgemm_native(int m, int n, int k, const float *a, long rsa, const float *b, long rsb, const float *bias,
                       const float *row_bias, float *c, long rsc, int act);
int ember_sgemm_native_width(void);

static void wino_products_job(const void *arg, int r0, int r1, int thread) {
    const wino_t *k = (const wino_t *)arg;
    (void)thread;
    for (int r = r0; r < r1; r++) {
        int n = r / 36, p = r % 36;
        ember_sgemm_native(k->o, k->tx * k->ty, k->c, k->u + (long)p * k->o * k->c, k->c,
                           k->v + ((long)n * 36 + p) * k->c * k->tp, k->tp, 0, 0,
                           k->m + ((long)n * 36 + p) * k->o * k->tp, k->tp, 0);
    }
}
#endif

#if defined(__wasm__)
int ember_sgemm_batched(int batch, int m, int n, int k, const float *a, const float *b, float *c, const int *strides,
                        float *scratch, int accumulate);  // (gemm.c)
#endif

// the whole convolution: the input transforms, the products, the output transforms, each split between threads
// (parallel.h). 0, -1 for parameters it does not take, or PARALLEL_LOST.
EMBER_EXPORT(ember_conv3x3_winograd)
int ember_conv3x3_winograd(const intptr_t *p) {
    wino_t k;
    if (wino_setup(p, &k))
        return -1;
    long tiles = (long)k.tx * k.ty;
    int rows = k.n * k.c;
    int rc = ember_parallel(wino_in_rows, &k, rows, ember_chunks(rows, tiles * 80));
    if (rc)
        return rc;
#if !defined(__wasm__)
    if (ember_sgemm_native_width() > 0 && !k.tile_products) {
        rows = 36 * k.n;
        rc = ember_parallel(wino_products_job, &k, rows, ember_chunks(rows, (long)k.o * k.c * tiles));
    } else
#else
    // in the page on gemm.c where the caller passed its scratch: an image's 36 products as one batched call (packed
    // panels, each value one multiply-add chain over the channels: the tile's bits; gemm.c's row-vector and column
    // paths sum otherwise, so not for one output channel or one tile). Chromium 156, one thread: ~1.1-1.2x the tile's
    if (k.gemm && k.o > 1 && tiles > 1) {
        int strides[8] = {k.o * k.c, k.c, 1, (int)(k.c * k.tp), (int)k.tp, 1, (int)(k.o * k.tp), (int)k.tp};
        for (int n = 0; n < k.n && !rc; n++)
            rc = ember_sgemm_batched(36, k.o, (int)tiles, k.c, k.u, k.v + (long)n * 36 * k.c * k.tp,
                                     k.m + (long)n * 36 * k.o * k.tp, strides, k.gemm, 0);
    } else
#endif
    {
        intptr_t q[C_FIELDS];
        wino_products_params(&k, q, k.rows + PARALLEL_MAX_THREADS * k.row_floats);
        rc = ember_conv2d(q);
    }
    if (rc)
        return rc;
    rows = k.n * k.o;
    return ember_parallel(wino_out_rows, &k, rows, ember_chunks(rows, tiles * 60));
}
