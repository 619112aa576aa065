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
// with AVX2 and FMA but not AVX-512 the tiles are fvec.h's 6 x 2 (4 x 3 before: Whisper tiny's encoder attention,
// 6 heads of 1500 x 1500, 77 -> 50 ms a layer on one thread; torch's SDPA 55), units whole 6-row tiles
#if FW == 8 && F8_MR == 6
#define QB 36      // query rows of a unit (its scores and output rows: 64 KiB of stack)
#else
#define QB 32      // query rows of a unit (its scores and output rows: 56 KiB of stack)
#endif
#define NK 192     // keys of a block (a multiple of a score tile's width on every target: 48 at most)
#define MAX_DV 256
static const float IOTA[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

typedef struct {
    const float *q, *k, *v, *m;
    float *o, *kt;
    int b1, b2, l, s, d, dv, causal, qblocks;
    long spad;  // keys of a transposed head, rounded up to 16 (zeros past s)
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
    // the score tiles read a block's keys in whole vectors of up to 16 lanes, nothing past that: a decoded token's
    // 12 heads of 16 keys were padded to 192 (each call wrote 147k floats, mostly zeros: ~60 us)
    a->spad = ((long)a->s + 15) / 16 * 16;
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
        int whole = a->s & ~7;
        for (int j0 = 0; j0 < whole; j0 += 8) {  // 8 keys at a time: 8 rows read as streams, 8 floats written a dim
            const float *r = k + (long)j0 * a->ks[2];
            long rs = a->ks[2];
            for (int i = 0; i < a->d; i++) {
                float *t = kt + (long)i * a->spad + j0;
                t[0] = r[i], t[1] = r[rs + i], t[2] = r[2 * rs + i], t[3] = r[3 * rs + i];
                t[4] = r[4 * rs + i], t[5] = r[5 * rs + i], t[6] = r[6 * rs + i], t[7] = r[7 * rs + i];
            }
        }
        for (int j0 = whole; j0 < a->spad; j0 += 8)  // the last keys, then zeros to the padded width
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

// ---------------------------------------------------------------------------------------------- the tiles
// The register tiles of fvec.h's fw (rows x vectors): AVX-512's 16 lanes natively (32 registers: 8 x 3 for the
// scores, 6 x 4 for the output rows, 64 columns), f8 elsewhere (fvec.h's F8_MR x F8_NV). Each lane's multiply-adds
// are f8_madd's (fused on x86 natively, as AVX2's), in one order along the inner dimension whatever the width or
// tile: every target that fuses alike gets the same bits.
#if FW == 16
#define QK_MR 8
#define QK_NV 3
#define PV_MR 6
#define PV_NV 4
#else
#define QK_MR F8_MR
#define QK_NV F8_NV
#define PV_MR F8_MR
#define PV_NV F8_NV
#endif

// accumulators c<row><vector> in named variables (never an array: fvec.h's register tiles), MRc <= 8, NVc <= 4
#define VT_ROW(M, r) M(r, 0) M(r, 1) M(r, 2) M(r, 3)
#define VT_EACH(M) VT_ROW(M, 0) VT_ROW(M, 1) VT_ROW(M, 2) VT_ROW(M, 3) VT_ROW(M, 4) VT_ROW(M, 5) VT_ROW(M, 6) \
    VT_ROW(M, 7)
#define VT_DECL(r, j) fw c##r##j = fw_zero();
#define VT_LOAD(r, j)                                                             \
    if (r < MRc && j < NVc) {                                                     \
        c##r##j = fw_load_part(c + r * ldc + FW * j, width - FW * j);            \
        c##r##j = fw_mul(c##r##j, fw_splat(scale[r]));                            \
    }
#define VT_STORE(r, j) \
    if (r < MRc && j < NVc) fw_store_part(c + r * ldc + FW * j, c##r##j, width - FW * j);
#define VT_MADD(r)                                                        \
    if (r < MRc) {                                                        \
        fw av = fw_bcast(a + r * lda + i);                                \
        c##r##0 = fw_madd(c##r##0, av, x0);                               \
        if (NVc > 1) c##r##1 = fw_madd(c##r##1, av, x1);                  \
        if (NVc > 2) c##r##2 = fw_madd(c##r##2, av, x2);                  \
        if (NVc > 3) c##r##3 = fw_madd(c##r##3, av, x3);                  \
    }

// c[r][0:width] = (scale ? c[r] scale[r] : 0) + sum over i < kd of a[r][i] b[i][0:width], for MRc rows; b's rows
// are read `width` floats wide (full vectors where `full`: b has them, zero padding), c's written `width` wide
static inline __attribute__((always_inline)) void tile(const int MRc, const int NVc, int kd, const float *a, long lda,
                                                       const float *b, long ldb, float *c, long ldc, int width,
                                                       const float *scale, int full) {
    VT_EACH(VT_DECL)
    if (scale) {
        VT_EACH(VT_LOAD)
    }
    for (int i = 0; i < kd; i++) {
        const float *x = b + i * ldb;
        fw x0 = full ? fw_load(x) : fw_load_part(x, width);
        fw x1 = NVc > 1 ? (full ? fw_load(x + FW) : fw_load_part(x + FW, width - FW)) : x0;
        fw x2 = NVc > 2 ? (full ? fw_load(x + 2 * FW) : fw_load_part(x + 2 * FW, width - 2 * FW)) : x0;
        fw x3 = NVc > 3 ? (full ? fw_load(x + 3 * FW) : fw_load_part(x + 3 * FW, width - 3 * FW)) : x0;
        VT_MADD(0) VT_MADD(1) VT_MADD(2) VT_MADD(3) VT_MADD(4) VT_MADD(5) VT_MADD(6) VT_MADD(7)
    }
    VT_EACH(VT_STORE)
}

#define TILE_ARGS kd, a, lda, b, ldb, c, ldc, width, scale, full
#define TILE_NV(MRc, NVMAX)                                                           \
    switch (nv) {                                                                     \
    case 1: tile(MRc, 1, TILE_ARGS); break;                                           \
    case 2: tile(MRc, NVMAX >= 2 ? 2 : 1, TILE_ARGS); break;                          \
    case 3: tile(MRc, NVMAX >= 3 ? 3 : 1, TILE_ARGS); break;                          \
    default: tile(MRc, NVMAX >= 4 ? 4 : 1, TILE_ARGS); break;                         \
    }
#define TILE_MR(MR, NVMAX)                                      \
    switch (mr) {  /* (cases past MR are never taken) */        \
    case 1: TILE_NV(1, NVMAX) break;                            \
    case 2: TILE_NV(MR >= 2 ? 2 : 1, NVMAX) break;              \
    case 3: TILE_NV(MR >= 3 ? 3 : 1, NVMAX) break;              \
    case 4: TILE_NV(MR >= 4 ? 4 : 1, NVMAX) break;              \
    case 5: TILE_NV(MR >= 5 ? 5 : 1, NVMAX) break;              \
    case 6: TILE_NV(MR >= 6 ? 6 : 1, NVMAX) break;              \
    case 7: TILE_NV(MR >= 7 ? 7 : 1, NVMAX) break;              \
    default: TILE_NV(MR >= 8 ? 8 : 1, NVMAX) break;             \
    }

// c (rows x cols) = (scale ? c diag(scale) : 0) + a (rows x kd) b (kd x cols), in MR x NV register tiles; `full`:
// b's rows may be read in whole vectors past cols
#define GEMM(name, MR, NV)                                                                                         \
    static void name(int rows, int cols, int kd, const float *a0, long lda, const float *b0, long ldb, float *c0,  \
                     long ldc, const float *scale0, int full) {                                                    \
        for (int j0 = 0; j0 < cols;) { /* a block of b's columns, in cache for every block of rows */             \
            int left = cols - j0, nv = left >= FW * NV ? NV : (left + FW - 1) / FW;                                \
            int width = left < FW * nv ? left : FW * nv;                                                           \
            for (int r0 = 0; r0 < rows; r0 += MR) {                                                                \
                int mr = rows - r0 < MR ? rows - r0 : MR;                                                          \
                const float *a = a0 + r0 * lda, *scale = scale0 ? scale0 + r0 : 0, *b = b0 + j0;                   \
                float *c = c0 + r0 * ldc + j0;                                                                     \
                TILE_MR(MR, NV)                                                                                    \
            }                                                                                                      \
            j0 += width;                                                                                           \
        }                                                                                                          \
    }
GEMM(gemm_scores, QK_MR, QK_NV)
GEMM(gemm_values, PV_MR, PV_NV)

// ---------------------------------------------------------------------------------------------- a unit
// The weights are 2^x for x = (s - row max) scale log2(e) (the scale and log2(e) in one multiply-add, and a
// mask's scores first scaled and masked in place), by exp2_weights: 0 below 2^-125 (no subnormal weight slows the
// product with V, and -inf, a masked key, gives 0).

#define LOG2E 1.44269504088896341f

// 2^x for x <= 0 (-inf and NaN too): x = m + f with m an integer (rounded by adding 1.5 2^23), f in [-0.5, 0.5];
// 2^f by Cephes exp2f's degree-6 polynomial (~1 ulp), 2^m in the exponent bits
static inline fw exp2_weights(fw x) {
    x = fw_max(fw_splat(-127.0f), x);  // (NaN stays: fw_max(a, b) is a > b ? a : b)
    fw m = fw_sub(fw_add(x, fw_splat(12582912.0f)), fw_splat(12582912.0f));
    fw f = fw_sub(x, m);
    fw p = fw_splat(1.535336188319500e-4f);
    p = fw_madd(fw_splat(1.339887440266574e-3f), p, f);
    p = fw_madd(fw_splat(9.618437357674640e-3f), p, f);
    p = fw_madd(fw_splat(5.550332471162809e-2f), p, f);
    p = fw_madd(fw_splat(2.402264791363012e-1f), p, f);
    p = fw_madd(fw_splat(6.931472028550421e-1f), p, f);
    p = fw_madd(fw_splat(1.0f), p, f);
    m = fw_sel(fw_gt(m, fw_splat(-126.5f)), m, fw_zero());  // (NaN: 2^0, p is NaN; -127: 2^0, zeroed next)
    return fw_sel(fw_gt(fw_splat(-125.5f), x), fw_zero(), fw_mul(p, fw_pow2i(m)));
}

static void attend_rows(const attn_t *a, int u0, int u1) {
    float sc[QB * NK], acc[QB * MAX_DV], mx[QB], sum[QB], alpha[QB];
    const fw ninf = fw_splat(-__builtin_inff());
    for (int u = u0; u < u1; u++) {
        int h = u / a->qblocks, i0 = (u % a->qblocks) * QB, hb = h / a->b2, hh = h % a->b2;
        int n = a->l - i0 < QB ? a->l - i0 : QB;
        const float *q = a->q + hb * a->qs[0] + hh * a->qs[1] + i0 * a->qs[2];
        const float *kt = a->kt + (long)h * a->d * a->spad, *v = a->v + hb * a->vs[0] + hh * a->vs[1];
        const float *m = a->m ? a->m + hb * a->ms[0] + hh * a->ms[1] + i0 * a->ms[2] : 0;
        // the exponent's multiplier: raw scores' scale log2(e); log2(e) where a mask's scores are scaled first
        float mul = m ? LOG2E : a->scale * LOG2E;
        for (int r = 0; r < n; r++) {
            mx[r] = -__builtin_inff(), sum[r] = 0.0f;
            for (int j = 0; j < a->dv; j++) acc[r * MAX_DV + j] = 0.0f;
        }
        int keys = a->causal && i0 + n < a->s ? i0 + n : a->s;  // causal: no key past the last row's
        for (int j0 = 0; j0 < keys; j0 += NK) {
            int nk = keys - j0 < NK ? keys - j0 : NK, nk8 = (nk + 7) & ~7;
            gemm_scores(n, nk8, a->d, q, a->qs[2], kt + j0, a->spad, sc, NK, 0, 1);  // (n, nk8) raw scores
            for (int r = 0; r < n; r++) {
                float *s = sc + r * NK;
                int visible = a->causal ? i0 + r + 1 - j0 : nk;  // keys j0 + j <= i0 + r
                visible = visible < nk ? (visible < 0 ? 0 : visible) : nk;
                const float *mr = m ? m + r * a->ms[2] + j0 : 0;
                // FW scores at a time (a row of sc has room for whole fw past nk8; lanes past the visible keys are
                // set to -inf), the sum of the weights in f8's lanes (j % 8) in key order: the bits of any width
                float lanes[FW];
                fw top = fw_splat(mx[r]);
                if (mr) {  // s scale + mask, -inf past the visible keys
                    fw sv = fw_splat(a->scale);
                    for (int j = 0; j < nk8; j += FW) {
                        fw x = fw_add(fw_mul(fw_load(s + j), sv), fw_load_part(mr + j, visible - j));
                        if (j + FW > visible)
                            x = fw_sel(fw_gt(fw_splat((float)(visible - j)), fw_load(IOTA)), x, ninf);
                        fw_store(s + j, x);
                        top = fw_max(x, top);
                    }
                } else {  // raw scores, -inf past the visible keys
                    int j = 0;
                    for (; j + FW <= visible; j += FW) top = fw_max(fw_load(s + j), top);
                    for (; j < nk8; j += FW) {
                        fw x = fw_sel(fw_gt(fw_splat((float)(visible - j)), fw_load(IOTA)), fw_load(s + j), ninf);
                        fw_store(s + j, x);
                        top = fw_max(x, top);
                    }
                }
                fw_store(lanes, top);
                float best = lanes[0];
                for (int l = 1; l < FW; l++) best = lanes[l] > best ? lanes[l] : best;
                // a row whose keys so far are all masked keeps weights 0 (-inf - -inf would be NaN)
                float base = best == -__builtin_inff() ? 0.0f : best;
                fw_store(lanes, exp2_weights(fw_mul(fw_sub(fw_splat(mx[r]), fw_splat(base)), fw_splat(mul))));
                alpha[r] = mx[r] == -__builtin_inff() ? 0.0f : lanes[0];
                mx[r] = best;
                f8 total = f8_zero();
                fw nb = fw_splat(-base * mul), mv = fw_splat(mul);
                for (int j = 0; j < nk8; j += FW) {  // weights 2^((s - max) mul)
                    fw e = exp2_weights(fw_madd(nb, fw_load(s + j), mv));
                    fw_store(s + j, e);
                    total = f8_add(total, fw_half(e, 0));
                    if (FW == 16 && j + 8 < nk8)
                        total = f8_add(total, fw_half(e, 1));
                }
                f8_store(lanes, total);
                sum[r] = sum[r] * alpha[r] + (((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                                              ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
            }
            gemm_values(n, a->dv, nk, sc, NK, v + (long)j0 * a->vs[2], a->vs[2], acc, MAX_DV, alpha,
                        a->dv % FW == 0);
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
    // (a float moved costs about what 8 multiply-adds do: MiniLM's 12 heads of 128 keys were one thread's 50 us)
    int rc = ember_parallel(prepare_job, &a, heads, ember_chunks(heads, 8L * a.d * a.spad));
    long rows = a.l < QB ? a.l : QB;  // (a unit's query rows: one for a decoded token)
    return rc ? rc : ember_parallel(rows_job, &a, units, ember_chunks(units, rows * a.s * (a.d + a.dv)));
}
