// Float32 attention in one pass over the keys (flash attention's online softmax): for a block of query rows,
// key block by key block, scores = q K^T scale (+ mask, causal), the running row maximum and sum updated, and the
// output rows rescaled and accumulated with the block's weights times V; divided by the sum at the end. No (L, S)
// score matrix is ever written: a block of QB x NK scores lives on the stack, in L1. The CPU backend's kernel for
// the registry's `attention` op on long sequences (cpu_fused.py), natively and in the page.
//
// q, k, v, mask and out are addressed by strides over two leading dims (batch, heads) and rows, with unit column
// stride: the heads of a (batch, seq, heads, head_dim) projection are read where they lie, and the output is
// written as (batch, seq, heads, head_dim) rows for the output projection (no transposed copies).
//
// Passes: ember_attention_prepare_rows transposes each head's K into scratch (head_dim x keys, zero-padded to
// whole key blocks), then ember_attention_rows computes units of QB query rows of one head. Each output row is
// computed alike in any range of units (fixed key blocks from 0, one order of multiply-adds), so the result does
// not depend on how units are split between threads.
#include <stdint.h>

#include "fvec.h"

#include "parallel.h"

enum { A_Q, A_K, A_V, A_M, A_O, A_SCRATCH, A_B1, A_B2, A_L, A_S, A_D, A_DV, A_CAUSAL, A_SCALE,  // scale: float bits
       A_QS, A_KS = A_QS + 3, A_VS = A_KS + 3, A_MS = A_VS + 3, A_OS = A_MS + 3,  // strides (b1, b2, row), floats
       A_FIELDS = A_OS + 3 };
#ifndef QB
#define QB 32      // query rows of a unit (its scores and output rows: 56 KiB of stack)
#endif
#ifndef NK
#define NK 192     // keys of a block (a multiple of 8 F8_NV on every target)
#endif
#define MAX_DV 256
static const float IOTA[8] = {0, 1, 2, 3, 4, 5, 6, 7};

typedef struct {
    const float *q, *k, *v, *m;
    float *o, *kt;
    int b1, b2, l, s, d, dv, causal, qblocks;
    long spad;  // keys of a transposed head, whole blocks
    float scale;
    long qs[3], ks[3], vs[3], ms[3], os[3];
} attn_t;

static int setup(const intptr_t *p, attn_t *a) {
    a->q = (const float *)p[A_Q], a->k = (const float *)p[A_K], a->v = (const float *)p[A_V];
    a->m = (const float *)p[A_M], a->o = (float *)p[A_O], a->kt = (float *)p[A_SCRATCH];
    a->b1 = (int)p[A_B1], a->b2 = (int)p[A_B2], a->l = (int)p[A_L], a->s = (int)p[A_S];
    a->d = (int)p[A_D], a->dv = (int)p[A_DV], a->causal = (int)p[A_CAUSAL];
    uint32_t bits = (uint32_t)p[A_SCALE];
    __builtin_memcpy(&a->scale, &bits, 4);
    for (int i = 0; i < 3; i++)
        a->qs[i] = p[A_QS + i], a->ks[i] = p[A_KS + i], a->vs[i] = p[A_VS + i], a->ms[i] = p[A_MS + i],
        a->os[i] = p[A_OS + i];
    if (a->b1 < 1 || a->b2 < 1 || a->l < 1 || a->s < 1 || a->d < 1 || a->dv < 1 || a->dv > MAX_DV)
        return -1;
    a->qblocks = (a->l + QB - 1) / QB;
    a->spad = ((long)a->s + NK - 1) / NK * NK;
    return 0;
}

// floats of scratch (the transposed keys), or -1 for parameters the kernel does not take; pass 0: units of the
// prepare pass (heads), 1: of the output pass (heads x blocks of QB query rows)
EMBER_EXPORT(ember_attention_scratch_floats)
long ember_attention_scratch_floats(const intptr_t *p, int pass) {
    attn_t a;
    if (setup(p, &a))
        return -1;
    long heads = (long)a.b1 * a.b2;
    return pass == 0 ? heads : pass == 1 ? heads * a.qblocks : heads * a.d * a.spad + 8;
}

static void transpose_heads(const attn_t *a, int h0, int h1) {
    for (int h = h0; h < h1; h++) {
        const float *k = a->k + (h / a->b2) * a->ks[0] + (h % a->b2) * a->ks[1];
        float *kt = a->kt + (long)h * a->d * a->spad;
        for (int j0 = 0; j0 < a->spad; j0 += 8)  // 8 keys at a time: each key's row read once
            for (int i = 0; i < a->d; i++)
                for (int j = j0; j < j0 + 8; j++)
                    kt[(long)i * a->spad + j] = j < a->s ? k[(long)j * a->ks[2] + i] : 0.0f;
    }
}

EMBER_EXPORT(ember_attention_prepare_rows)
void ember_attention_prepare_rows(const intptr_t *p, int h0, int h1) {
    attn_t a;
    if (!setup(p, &a))
        transpose_heads(&a, h0, h1);
}

// ---------------------------------------------------------------------------------------------- the tile

// c[r][0:width] = (scale ? c[r] scale[r] : 0) + sum over kd of a[r][i] b[i][0:width], for MRc rows (a's rows lda
// apart, unit stride along i; b's rows ldb apart; c's ldc apart), width <= 8 NVc
static inline __attribute__((always_inline)) void tile(const int MRc, const int NVc, int kd, const float *a, long lda,
                                                       const float *b, long ldb, float *c, long ldc, int width,
                                                       const float *scale) {
#define TILE_Y c
#define TILE_YS ldc
#define TILE_W width
#define TILE_MUL scale
#define TILE_A(r) (a + (r) * lda + i)
    TILE_DECL;
    if (scale) {
        TILE_EACH(TILE_LOAD_ONE)
    }
    for (int i = 0; i < kd; i++)
        TILE_STEP(b + i * ldb);
    TILE_EACH(TILE_STORE_ONE)
#undef TILE_Y
#undef TILE_YS
#undef TILE_W
#undef TILE_MUL
#undef TILE_A
}

#define TILE_ARGS kd, a, lda, b, ldb, c, ldc, width, scale
#define TILE_NV(MRc)                                                         \
    switch (nv) {                                                            \
    case 1: tile(MRc, 1, TILE_ARGS); break;                                  \
    case 2: if (F8_NV >= 2) tile(MRc, F8_NV >= 2 ? 2 : 1, TILE_ARGS); break; \
    default: if (F8_NV >= 3) tile(MRc, F8_NV >= 3 ? 3 : 1, TILE_ARGS); break; \
    }

// c (rows x cols) = (scale ? c diag(scale) : 0) + a (rows x kd) b (kd x cols), in register tiles
static void gemm(int rows, int cols, int kd, const float *a0, long lda, const float *b0, long ldb, float *c0,
                 long ldc, const float *scale0) {
    for (int r0 = 0; r0 < rows; r0 += F8_MR) {
        int mr = rows - r0 < F8_MR ? rows - r0 : F8_MR;
        const float *a = a0 + r0 * lda, *scale = scale0 ? scale0 + r0 : 0;
        for (int j0 = 0; j0 < cols;) {
            int left = cols - j0, nv = left >= 8 * F8_NV ? F8_NV : (left + 7) / 8;
            int width = left < 8 * nv ? left : 8 * nv;
            const float *b = b0 + j0;
            float *c = c0 + r0 * ldc + j0;
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
            j0 += width;
        }
    }
}

// ---------------------------------------------------------------------------------------------- a unit

static void attend_rows(const attn_t *a, int u0, int u1) {
    float sc[QB * NK], acc[QB * MAX_DV], mx[QB], sum[QB], alpha[QB];
    for (int u = u0; u < u1; u++) {
        int h = u / a->qblocks, i0 = (u % a->qblocks) * QB, hb = h / a->b2, hh = h % a->b2;
        int n = a->l - i0 < QB ? a->l - i0 : QB;
        const float *q = a->q + hb * a->qs[0] + hh * a->qs[1] + i0 * a->qs[2];
        const float *kt = a->kt + (long)h * a->d * a->spad, *v = a->v + hb * a->vs[0] + hh * a->vs[1];
        const float *m = a->m ? a->m + hb * a->ms[0] + hh * a->ms[1] + i0 * a->ms[2] : 0;
        for (int r = 0; r < n; r++) {
            mx[r] = -__builtin_inff(), sum[r] = 0.0f;
            for (int j = 0; j < a->dv; j++) acc[r * MAX_DV + j] = 0.0f;
        }
        int keys = a->causal && i0 + n < a->s ? i0 + n : a->s;  // causal: no key past the last row's
        for (int j0 = 0; j0 < keys; j0 += NK) {
            int nk = keys - j0 < NK ? keys - j0 : NK, nk8 = (nk + 7) & ~7;
            gemm(n, nk8, a->d, q, a->qs[2], kt + j0, a->spad, sc, NK, 0);  // (n, nk8) raw scores
            for (int r = 0; r < n; r++) {
                float *s = sc + r * NK;
                int visible = a->causal ? i0 + r + 1 - j0 : nk;  // keys j0 + j <= i0 + r
                visible = visible < nk ? (visible < 0 ? 0 : visible) : nk;
                const float *mr = m ? m + r * a->ms[2] + j0 : 0;
                float lanes[8];
                f8 top8 = f8_splat(mx[r]), sv = f8_splat(a->scale), ninf = f8_splat(-__builtin_inff());
                for (int j = 0; j < nk8; j += 8) {  // s scale (+ mask), -inf past the visible keys
                    f8 x = f8_mul(f8_load(s + j), sv);
                    if (mr)
                        x = f8_add(x, f8_load_part(mr + j, visible - j));
                    if (j + 8 > visible)
                        x = f8_sel(f8_gt(f8_splat((float)(visible - j)), f8_load(IOTA)), x, ninf);
                    f8_store(s + j, x);
                    top8 = f8_max(x, top8);
                }
                f8_store(lanes, top8);
                float top = lanes[0];
                for (int l = 1; l < 8; l++) top = lanes[l] > top ? lanes[l] : top;
                // a row whose keys so far are all masked keeps weights 0 (exp of -inf - -inf would be NaN)
                float base = top == -__builtin_inff() ? 0.0f : top;
                float old[8];
                f8_store(old, f8_exp(f8_splat(mx[r] - base)));
                alpha[r] = mx[r] == -__builtin_inff() ? 0.0f : old[0];
                mx[r] = top;
                f8 total = f8_zero(), bv = f8_splat(base);
                for (int j = 0; j < nk8; j += 8) {  // weights exp(s - max), 0 for masked keys
                    f8 x = f8_load(s + j), e = f8_sel(f8_eq(x, ninf), f8_zero(), f8_exp(f8_sub(x, bv)));
                    f8_store(s + j, e);
                    total = f8_add(total, e);
                }
                f8_store(lanes, total);
                sum[r] = sum[r] * alpha[r] + (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                                              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
            }
            gemm(n, a->dv, nk, sc, NK, v + (long)j0 * a->vs[2], a->vs[2], acc, MAX_DV, alpha);
        }
        float *o = a->o + hb * a->os[0] + hh * a->os[1] + i0 * a->os[2];
        for (int r = 0; r < n; r++)
            for (int j = 0; j < a->dv; j++) o[r * a->os[2] + j] = acc[r * MAX_DV + j] / sum[r];
    }
}

EMBER_EXPORT(ember_attention_rows)
void ember_attention_rows(const intptr_t *p, int u0, int u1) {
    attn_t a;
    if (!setup(p, &a))
        attend_rows(&a, u0, u1);
}

static void prepare_job(const void *arg, int h0, int h1, int thread) {  // (parallel.h)
    (void)thread;
    transpose_heads((const attn_t *)arg, h0, h1);
}

static void rows_job(const void *arg, int u0, int u1, int thread) {
    (void)thread;
    attend_rows((const attn_t *)arg, u0, u1);
}

// the whole attention: transposed keys, then every unit, each split between threads (parallel.h). Returns 0, -1
// for parameters it does not take, or PARALLEL_LOST (the page's pool lost a worker).
EMBER_EXPORT(ember_attention)
int ember_attention(const intptr_t *p) {
    attn_t a;
    if (setup(p, &a))
        return -1;
    int heads = a.b1 * a.b2, units = heads * a.qblocks;
    int rc = ember_parallel(prepare_job, &a, heads, ember_chunks(heads, (long)a.d * a.spad));
    return rc ? rc : ember_parallel(rows_job, &a, units, ember_chunks(units, (long)QB * a.s * (a.d + a.dv)));
}
