// C = A B for float32 matrices as they lie, natively (AVX-512, or AVX2 with FMA): the products of tens to hundreds
// of rows against a weight that encoders and prefill run (MiniLM's 128 tokens, a prompt), where OpenBLAS packs all
// of B on every call (one core, 128 x 384 x 1536: ~255 against ~220 GFLOP/s with B in cache, ~205 against ~195
// with B coming from memory as in a forward pass; the backend's rule for which products come here is
// cpu_matmul._GEMM_ROWS, and _BLOCKED_ROWS for a weight read from its blocked copy).
//
// A weight read again is best read from its blocked copy (made once by the caller: blocks of 16 columns, each
// (k, 16) contiguous, decode.c's float32 weight type -2), a panel's columns then one sequential stream for all of
// k, with no copy a call: MiniLM's 36 linears from memory 30.0 -> 26.9 ms on one core, onnxruntime's pre-packed
// MatMul 26.6. Otherwise:
//
// A is read in place (unit column stride); B (unit column stride, any row stride) in panels of NR columns, K cut
// into KC blocks, and every block of MR rows of A (held in registers: 8 x 32 with AVX-512's 32 vector registers,
// 6 x 16 with AVX2's 16) passes over a block of a panel while it is in L1. Where more than one block of rows reads
// it, the block is first copied to a thread-local buffer, zero-padded past n (B's own rows, a multiple of 4 KiB
// apart in a 2048- or 3072-wide weight, fall in the same L1 sets and evict one another: 0.7x BLAS there without
// the copy), GROUP panels together (longer runs of each row), the next block's rows prefetched into L2 meanwhile
// (runs this short are not followed by the hardware prefetcher).
//
// Each output is summed over k in order, one fused multiply-add per k (a block after the first resumes from C), so
// the bits depend on neither the row blocks, the threads (they take whole groups of panels: parallel.h) nor the
// build (AVX-512's and AVX2's agree). Native only: the page's products run gemm.c on its pool. Without either SIMD
// target the entry points say so (width 0) and the caller keeps BLAS.
#include "fvec.h"  // (EMBER_EXPORT)
#include "parallel.h"

// gv: one vector of a tile row, two per panel row (NR = 2 GV): AVX-512's 16 lanes, or AVX2's 8; gm: which lanes of
// one a masked load or store touches
#if defined(__AVX512F__) && !defined(EMBER_SIMD_SCALAR)
#include <immintrin.h>
#define GN_MR 8
#define GN_NR 32
typedef __m512 gv;
typedef __mmask16 gm;
static inline gm gm_first(int lanes) { return lanes >= 16 ? 0xFFFF : lanes <= 0 ? 0 : (gm)((1u << lanes) - 1); }
static inline gv gv_load(const float *p, gm m) { return _mm512_maskz_loadu_ps(m, p); }
static inline gv gv_whole(const float *p) { return _mm512_loadu_ps(p); }
static inline void gv_store(float *p, gm m, gv v) { _mm512_mask_storeu_ps(p, m, v); }
static inline void gv_put(float *p, gv v) { _mm512_store_ps(p, v); }  // (p 64-byte aligned)
static inline void gv_storeu(float *p, gv v) { _mm512_storeu_ps(p, v); }
static inline gv gv_bcast(const float *p) { return _mm512_set1_ps(*p); }
static inline gv gv_zero(void) { return _mm512_setzero_ps(); }
static inline gv gv_madd(gv c, gv a, gv b) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__) && !defined(EMBER_SIMD_SCALAR)
#include <immintrin.h>
#define GN_MR 6
#define GN_NR 16
typedef __m256 gv;
typedef __m256i gm;
static inline gm gm_first(int lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline gv gv_load(const float *p, gm m) { return _mm256_maskload_ps(p, m); }
static inline gv gv_whole(const float *p) { return _mm256_loadu_ps(p); }
static inline void gv_store(float *p, gm m, gv v) { _mm256_maskstore_ps(p, m, v); }
static inline void gv_put(float *p, gv v) { _mm256_store_ps(p, v); }  // (p 32-byte aligned)
static inline void gv_storeu(float *p, gv v) { _mm256_storeu_ps(p, v); }
static inline gv gv_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline gv gv_zero(void) { return _mm256_setzero_ps(); }
static inline gv gv_madd(gv c, gv a, gv b) { return _mm256_fmadd_ps(a, b, c); }
#else
#define GN_NR 0
#endif

#define GN_KC 256  // k per block of a panel's copy: KC x NR floats
#define GN_GROUP 2  // panels copied together (units of the threads' work: 6 of a 384-wide weight with AVX-512)
#define GN_BLOCK 16  // columns a block of a blocked B (cpu_matmul.BLOCK: decode.c's float32 weight type -2)

#if GN_NR
typedef struct {
    int m, n, k, act;
    const float *a, *b, *bias, *row_bias;
    long rsa, rsb, rsc;
    float *c;
    const float *const *brows;  // B's k rows' addresses (rows of several arrays: a concatenation), or NULL: b, rsb
} gn_job;

static inline const float *gn_row(const gn_job *j, int r) { return j->brows ? j->brows[r] : j->b + r * j->rsb; }

#define GV (GN_NR / 2)

// c[0:m, 0:nn] (+)= a[0:m, 0:kk] b[0:kk, 0:nn] for m <= MR rows, nn <= NR columns; b's columns GV and on start
// `half` floats after its first (GV: one row; a blocked weight's next block of 16: further). whole: b's rows
// readable for all NR columns (a copy or a blocked weight, zeros past nn, or nn = NR): plain loads (AVX2's masked
// loads in this loop were most of the time of YOLOv8s's 1x1 convs: 25 GMAC/s where the same tile in L1 gives 45)
static inline __attribute__((always_inline)) void gn_tile_any(const int whole, int kk, const float *a, long rsa,
                                                              const float *b, long rsb, long half, float *c,
                                                              long rsc, int m, int nn, int resume) {
    gm m0 = gm_first(nn), m1 = gm_first(nn - GV);
    gv acc0[GN_MR], acc1[GN_MR];
    const float *ar[GN_MR];
    // (every loop over the tile's rows unrolled: the accumulators stay in registers; a loop left rolled made GCC
    // keep them in memory, storing them every k)
#pragma GCC unroll 8
    for (int i = 0; i < GN_MR; i++) {
        int live = i < m;
        ar[i] = a + (live ? i : 0) * rsa;  // (rows past m read row 0; their sums are never stored)
        acc0[i] = resume && live ? gv_load(c + i * rsc, m0) : gv_zero();
        acc1[i] = resume && live ? gv_load(c + i * rsc + GV, m1) : gv_zero();
    }
    const float *bh = b + half;
    for (int p = 0; p < kk; p++) {
        gv b0 = whole ? gv_whole(b + p * rsb) : gv_load(b + p * rsb, m0);
        gv b1 = whole ? gv_whole(bh + p * rsb) : gv_load(bh + p * rsb, m1);
#pragma GCC unroll 8
        for (int i = 0; i < GN_MR; i++) {
            gv av = gv_bcast(ar[i] + p);
            acc0[i] = gv_madd(acc0[i], av, b0);
            acc1[i] = gv_madd(acc1[i], av, b1);
        }
    }
    if (nn == GN_NR) {  // plain stores: AVX2's masked store is microcoded on AMD (12 a tile were a third of a 64 x 64
                        // product's time over 160 x 120 pixels, YOLOv8s's first 1x1s)
#pragma GCC unroll 8
        for (int i = 0; i < GN_MR; i++)
            if (i < m) {
                gv_storeu(c + i * rsc, acc0[i]);
                gv_storeu(c + i * rsc + GV, acc1[i]);
            }
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < GN_MR; i++)
        if (i < m) {
            gv_store(c + i * rsc, m0, acc0[i]);
            gv_store(c + i * rsc + GV, m1, acc1[i]);
        }
}

static void gn_tile(int whole, int kk, const float *a, long rsa, const float *b, long rsb, long half, float *c,
                    long rsc, int m, int nn, int resume) {
    if (whole)
        gn_tile_any(1, kk, a, rsa, b, rsb, half, c, rsc, m, nn, resume);
    else
        gn_tile_any(0, kk, a, rsa, b, rsb, half, c, rsc, m, nn, resume);
}

// block (kk, NR) = B[k0:k0 + kk, n0:n0 + nn], zeros past nn
static inline void gn_copy(const gn_job *j, int k0, int kk, int n0, int nn, float *block) {
    gm m0 = gm_first(nn), m1 = gm_first(nn - GV);
    for (int r = 0; r < kk; r++) {
        const float *row = gn_row(j, k0 + r) + n0;
        gv_put(block + r * GN_NR, gv_load(row, m0));
        gv_put(block + r * GN_NR + GV, gv_load(row + GV, m1));
    }
}

// c[r, 0:nn] += bias[0:nn] for rows [0, m): the sum, then one add (numpy's y += b after the product, bit for bit)
static void gn_add_bias(float *c, long rsc, int m, int nn, const float *bias) {
    for (int r = 0; r < m; r++)
        for (int t = 0; t < nn; t++) c[r * rsc + t] += bias[t];
}

static void gn_panels(const void *p, int p0, int p1, int thread) {  // (parallel.h) groups [p0, p1) of GN_GROUP panels
    const gn_job *j = (const gn_job *)p;
    (void)thread;
    static _Thread_local float block[GN_KC * GN_NR * GN_GROUP] __attribute__((aligned(64)));
    int panels = (j->n + GN_NR - 1) / GN_NR;
    for (int g = p0; g < p1; g++) {
        int q0 = g * GN_GROUP, q1 = q0 + GN_GROUP < panels ? q0 + GN_GROUP : panels;
        // a blocked B is read as it lies, all of k at once (no copy to refill; one C store a tile)
        int blocked = j->rsb == 0 && !j->brows, kc = blocked ? j->k : GN_KC;
        for (int k0 = 0; k0 < j->k; k0 += kc) {
            int kk = j->k - k0 < kc ? j->k - k0 : kc;
            // read by several blocks of rows (or B's rows scattered over several arrays): copied once
            int copy = !blocked && (j->m > GN_MR || j->brows);
            if (copy)
                for (int q = q0; q < q1; q++) {
                    int n0 = q * GN_NR, nn = j->n - n0 < GN_NR ? j->n - n0 : GN_NR;
                    gn_copy(j, k0, kk, n0, nn, block + (q - q0) * GN_KC * GN_NR);
                }
            for (int q = q0; q < q1; q++) {
                int n0 = q * GN_NR, nn = j->n - n0 < GN_NR ? j->n - n0 : GN_NR;
                // panel q of a blocked B: its blocks n0 / 16 on, each (k, 16)
                const float *b = blocked ? j->b + (long)n0 * j->k + k0 * GN_BLOCK
                                 : copy ? block + (q - q0) * GN_KC * GN_NR : j->b + k0 * j->rsb + n0;
                long rsb = blocked ? GN_BLOCK : copy ? GN_NR : j->rsb;
                long half = blocked && GV == GN_BLOCK ? (long)j->k * GN_BLOCK : GV;
                // the block this panel's copy takes next (its next block, else the next group's first), fetched
                // into L2 a few rows per block of A's rows while the tiles compute: B's rows come from memory in
                // short runs the hardware prefetcher does not run ahead of, and all of a block's lines requested
                // at once (during the copy) overflowed the core's queue of misses and were mostly dropped
                int next_k0 = 0, next_n0 = 0, next_kk = 0;  // (rows [next_k0, + next_kk) of columns next_n0 on)
                if (copy && k0 + GN_KC < j->k) {
                    next_k0 = k0 + GN_KC, next_n0 = n0;
                    next_kk = j->k - k0 - GN_KC < GN_KC ? j->k - k0 - GN_KC : GN_KC;
                } else if (copy && g + 1 < p1 && n0 + GN_GROUP * GN_NR < j->n) {
                    next_k0 = 0, next_n0 = n0 + GN_GROUP * GN_NR;
                    next_kk = j->k < GN_KC ? j->k : GN_KC;
                }
                int tiles = (j->m + GN_MR - 1) / GN_MR, per = (next_kk + tiles - 1) / tiles;
                for (int i = 0, t = 0; i < j->m; i += GN_MR, t++) {
                    for (int r = t * per; r < (t + 1) * per && r < next_kk; r++) {
                        const float *next = gn_row(j, next_k0 + r) + next_n0;
                        for (int o = 0; o < GN_NR; o += 16)  // (each 64-byte line of the row)
                            _mm_prefetch((const char *)(next + o), _MM_HINT_T1);
                    }
                    gn_tile(copy || blocked || nn == GN_NR, kk, j->a + i * j->rsa + k0, j->rsa, b, rsb, half,
                            j->c + i * j->rsc + n0, j->rsc, j->m - i < GN_MR ? j->m - i : GN_MR, nn, k0 > 0);
                }
            }
        }
        if (j->bias || j->row_bias || j->act != ACT_NONE) {  // (the group's columns of C are still in cache)
            int n0 = q0 * GN_NR, nn = (j->n < q1 * GN_NR ? j->n : q1 * GN_NR) - n0;  // the group's columns
            if (j->row_bias) {  // act(c + b) a row at a time: conv.c's epilogue's steps
                for (int r = 0; r < j->m; r++)
                    act_row(j->c + (long)r * j->rsc + n0, nn, j->row_bias[r], j->act);
            } else {
                if (j->bias)
                    gn_add_bias(j->c + n0, j->rsc, j->m, nn, j->bias + n0);
                if (j->act != ACT_NONE)  // (rows.c's bias_act after the product: the same function, the same bits)
                    for (int r = 0; r < j->m; r++)
                        act_row(j->c + (long)r * j->rsc + n0, nn, 0.0f, j->act);
            }
        }
    }
}
#endif

// Columns per panel of this build's kernel: 32 (AVX-512), 16 (AVX2 + FMA), 0 where there is none.
EMBER_EXPORT(ember_sgemm_native_width)
int ember_sgemm_native_width(void) { return GN_NR; }

#if GN_NR
static int gn_run(const gn_job *j) {
    if (j->m <= 0 || j->n <= 0)
        return 0;
    if (j->k <= 0) {
        for (int i = 0; i < j->m; i++) {
            for (int q = 0; q < j->n; q++)
                j->c[i * j->rsc + q] = j->bias ? 0.0f + j->bias[q] : 0.0f;
            if (j->act != ACT_NONE || j->row_bias)
                act_row(j->c + (long)i * j->rsc, j->n, j->row_bias ? j->row_bias[i] : 0.0f, j->act);
        }
        return 0;
    }
    int groups = (j->n + GN_NR * GN_GROUP - 1) / (GN_NR * GN_GROUP);
    // one run of groups a thread: a chunk's first block is copied from memory unprefetched (the prefetch runs a
    // block ahead within a chunk), and one group a chunk made that every group's (MiniLM's 36 linears on two
    // threads: 15.8 ms as 6-24 chunks, 14.7 as 2)
    int chunks = ember_chunks(groups, (long)j->m * j->k * GN_NR * GN_GROUP), threads = ember_parallel_threads();
    return ember_parallel(gn_panels, j, groups, chunks < threads ? chunks : threads);
}
#endif

// c (m, n; rows rsc floats apart) = a (m, k; rows rsa apart) b (k, n; rows rsb apart) + bias (n; or NULL: none)
// or + row_bias (m: one per row, a 1x1 convolution's per output channel, added with the activation in one step as
// conv.c's epilogue adds it: then act(c + row_bias), the bits of conv.c's 1x1 tile; bias NULL),
// every operand with unit column stride; rsb 0: b is blocked, (ceil(n / 16), k, 16) with zeros past column n (a
// weight's copy made once: one sequential stream a panel, no copy a call; MiniLM's 36 linears 10% faster from
// memory). The same bits either way. act (fvec.h's ACT_*): then act(c) as each group of panels is done, the bits of
// rows.c's bias_act on c. 0, -1 where this build has no kernel, or PARALLEL_LOST.
EMBER_EXPORT(ember_sgemm_native)
int ember_sgemm_native(int m, int n, int k, const float *a, long rsa, const float *b, long rsb, const float *bias,
                       const float *row_bias, float *c, long rsc, int act) {
#if GN_NR
    gn_job j = {m, n, k, act, a, b, bias, row_bias, rsa, rsb, rsc, c, NULL};
    return gn_run(&j);
#else
    (void)m, (void)n, (void)k, (void)a, (void)rsa, (void)b, (void)rsb, (void)bias, (void)row_bias, (void)c, (void)rsc,
        (void)act;
    return -1;
#endif
}

// The same product with B's k rows given by address (brows[r]: row r, n floats of unit stride): the rows of several
// arrays, a 1x1 convolution's input channels over a concatenation read where each part lies (no concatenated copy:
// YOLOv8s's C2f blocks each concatenated their parts for the next 1x1, ~57 MB of copies a forward); the same bits
// as ember_sgemm_native on their concatenation (B is copied into the same blocks either way).
EMBER_EXPORT(ember_sgemm_native_rows)
int ember_sgemm_native_rows(int m, int n, int k, const float *a, long rsa, const float *const *brows,
                            const float *row_bias, float *c, long rsc, int act) {
#if GN_NR
    gn_job j = {m, n, k, act, a, NULL, NULL, row_bias, rsa, 0, rsc, c, brows};
    return gn_run(&j);
#else
    (void)m, (void)n, (void)k, (void)a, (void)rsa, (void)brows, (void)row_bias, (void)c, (void)rsc, (void)act;
    return -1;
#endif
}
