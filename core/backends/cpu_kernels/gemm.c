// f32 GEMM for the CPU backend under Pyodide (WebAssembly SIMD128): C = A B (or C += A B).
//
// Freestanding: no libc, no malloc; the caller passes every buffer, the packing scratch included.
// Every operand is addressed by (pointer, row stride, column stride) in elements, so A B, A B^T,
// A^T B, negative strides (flipped views) and unaligned pointers are all the same call; C needs
// unit column stride. The structure is the usual one (Goto / BLIS): cache blocks of KC x NC of B
// and MC x KC of A are packed into contiguous panels (NR columns / MR rows wide, zero-padded at the
// edges), and a 4 x 8 register-blocked micro-kernel (8 f32x4 accumulators) runs over the panels.
// Threads (parallel.h) take blocks of the larger of C's dimensions (and of the batch), and of the other dimension too
// where the first gives few blocks; each element of C is summed in the same order whichever block holds it, so any
// thread count gives the same bits.
#include <wasm_simd128.h>

#include "parallel.h"
#if defined(__wasm__)
#include "fvec.h"  // (the epilogue's activations: rows.c's; the native build of these sources has no epilogue)
#endif

// c + a b, the micro-kernel's inner step. The relaxed-SIMD build (-mrelaxed-simd, cpu_wasm_kernels_relaxed.wasm,
// loaded only where WebAssembly validates a relaxed instruction) lets the engine fuse it into one FMA
// (one rounding instead of two): 1.2-1.5x the GEMM's GFLOP/s in V8. gemv keeps mul then add in both
// builds: its few accumulators make it latency-bound, and an FMA's longer latency made it slower. gemm_exact.c is
// this file with GEMM_EXACT defined: the multiply-add never fused in any build (deterministic mode on the pool).
#if defined(__wasm_relaxed_simd__) && !defined(GEMM_EXACT)
#define MADD(c, a, b) wasm_f32x4_relaxed_madd(a, b, c)
#else
#define MADD(c, a, b) wasm_f32x4_add(c, wasm_f32x4_mul(a, b))
#endif

#define MR 4
#define NR 8
#ifndef KC                  // (overridable with -D for tuning runs)
#define KC 256              // a packed A panel (MR x KC) and a B panel (KC x NR) stay in L1
#endif
#ifndef MC
#define MC 128              // the packed A block (MC x KC, 128 KiB) stays in L2
#endif
#ifndef NC
#define NC 1024             // the packed B block (KC x NC, 1 MiB) stays in L3
#endif

// floats of scratch ember_sgemm needs per thread: the packed A block then the packed B block
#define SCRATCH_FLOATS (MC * KC + KC * NC)
#define UNIT 128  // rows (or columns) of C a thread takes at a time: its packing of the other operand is ~5% of it
// A product of fewer than MIN_UNITS such blocks (MiniLM's linear layers: 32 sentences x 19 tokens = 608 rows, 5 blocks
// of 128, 3 of them on one of 2 threads) has its other dimension cut too, into parts of at least MIN_PART (a
// multiple of the micro-kernel's width): 608 x 384 in 10 blocks of 128 x 192
#define MIN_UNITS 8
#define MIN_PART 128

#ifndef GEMM_EXACT
__attribute__((export_name("ember_sgemm_scratch_floats")))
int ember_sgemm_scratch_floats(void) { return SCRATCH_FLOATS; }
#endif

// ---------------------------------------------------------------------------- packing

// A[i0:i0+mc, k0:k0+kc] -> panels of MR rows, each stored k-major: dst[p][k][r]; missing rows are 0
static void pack_a(int mc, int kc, const float *a, int rsa, int csa, float *dst) {
    for (int i = 0; i < mc; i += MR) {
        int rows = mc - i < MR ? mc - i : MR;
        const float *src = a + (long)i * rsa;
        if (rows == MR && csa == 1) {
            const float *r0 = src, *r1 = src + rsa, *r2 = src + 2 * (long)rsa, *r3 = src + 3 * (long)rsa;
            for (int k = 0; k < kc; k++) {
                dst[0] = r0[k]; dst[1] = r1[k]; dst[2] = r2[k]; dst[3] = r3[k];
                dst += MR;
            }
        } else {
            for (int k = 0; k < kc; k++) {
                for (int r = 0; r < MR; r++)
                    dst[r] = r < rows ? src[(long)r * rsa + (long)k * csa] : 0.0f;
                dst += MR;
            }
        }
    }
}

// B[k0:k0+kc, j0:j0+nc] -> panels of NR columns, each stored k-major: dst[p][k][c]; missing columns are 0
static void pack_b(int kc, int nc, const float *b, int rsb, int csb, float *dst) {
    for (int j = 0; j < nc; j += NR) {
        int cols = nc - j < NR ? nc - j : NR;
        const float *src = b + (long)j * csb;
        if (cols == NR && csb == 1) {
            for (int k = 0; k < kc; k++) {
                const float *row = src + (long)k * rsb;
                wasm_v128_store(dst, wasm_v128_load(row));
                wasm_v128_store(dst + 4, wasm_v128_load(row + 4));
                dst += NR;
            }
        } else if (cols == NR && rsb == 1) {  // B is a transposed row-major matrix: gather NR rows of it
            const float *c0 = src;
            for (int k = 0; k < kc; k++) {
                for (int c = 0; c < NR; c++) dst[c] = c0[(long)c * csb + k];
                dst += NR;
            }
        } else {
            for (int k = 0; k < kc; k++) {
                for (int c = 0; c < NR; c++)
                    dst[c] = c < cols ? src[(long)k * rsb + (long)c * csb] : 0.0f;
                dst += NR;
            }
        }
    }
}

// B's rows given as pointers (row i at rows[i] + col, its columns contiguous: a convolution's (channel, tap) rows of
// its input planes, conv.c) -> panels of NR columns as pack_b's; missing columns are 0
static void pack_b_rows(int kc, int nc, const float *const *rows, long col, float *dst) {
    for (int j = 0; j < nc; j += NR) {
        int cols = nc - j < NR ? nc - j : NR;
        for (int k = 0; k < kc; k++) {
            const float *src = rows[k] + col + j;
            if (cols == NR) {
                wasm_v128_store(dst, wasm_v128_load(src));
                wasm_v128_store(dst + 4, wasm_v128_load(src + 4));
            } else {
                for (int c = 0; c < NR; c++) dst[c] = c < cols ? src[c] : 0.0f;
            }
            dst += NR;
        }
    }
}

// ---------------------------------------------------------------------------- micro-kernel

// C[0:rows, 0:cols] = (C if accumulate, else 0) + sum over k of pa[k][:] (outer) pb[k][:], each element one
// multiply-add chain from C's value on: a product's blocks of k continue the chain where the last one left it (the
// order of conv.c's tiles and of gemm_native.c: a whole K in one chain, whatever the blocking)
static void micro_4x8(int kc, const float *pa, const float *pb, float *c, int rsc, int rows, int cols,
                      int accumulate) {
    v128_t c00 = wasm_f32x4_splat(0), c01 = c00, c10 = c00, c11 = c00;
    v128_t c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    float tile[MR * NR];
    int whole = rows == MR && cols == NR;
    if (accumulate) {
        const float *src = c;
        long rs = rsc;
        if (!whole) {  // (a partial tile through a zero-padded copy)
            for (int r = 0; r < MR; r++)
                for (int j = 0; j < NR; j++) tile[r * NR + j] = r < rows && j < cols ? c[(long)r * rsc + j] : 0.0f;
            src = tile, rs = NR;
        }
        c00 = wasm_v128_load(src), c01 = wasm_v128_load(src + 4);
        c10 = wasm_v128_load(src + rs), c11 = wasm_v128_load(src + rs + 4);
        c20 = wasm_v128_load(src + 2 * rs), c21 = wasm_v128_load(src + 2 * rs + 4);
        c30 = wasm_v128_load(src + 3 * rs), c31 = wasm_v128_load(src + 3 * rs + 4);
    }
    for (int k = 0; k < kc; k++) {
        v128_t b0 = wasm_v128_load(pb), b1 = wasm_v128_load(pb + 4);
        v128_t a0 = wasm_v128_load32_splat(pa), a1 = wasm_v128_load32_splat(pa + 1);
        v128_t a2 = wasm_v128_load32_splat(pa + 2), a3 = wasm_v128_load32_splat(pa + 3);
        c00 = MADD(c00, a0, b0); c01 = MADD(c01, a0, b1);
        c10 = MADD(c10, a1, b0); c11 = MADD(c11, a1, b1);
        c20 = MADD(c20, a2, b0); c21 = MADD(c21, a2, b1);
        c30 = MADD(c30, a3, b0); c31 = MADD(c31, a3, b1);
        pa += MR;
        pb += NR;
    }
    v128_t acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    if (whole) {
        for (int r = 0; r < MR; r++) {
            wasm_v128_store(c + (long)r * rsc, acc[r][0]);
            wasm_v128_store(c + (long)r * rsc + 4, acc[r][1]);
        }
        return;
    }
    for (int r = 0; r < MR; r++) {
        wasm_v128_store(tile + r * NR, acc[r][0]);
        wasm_v128_store(tile + r * NR + 4, acc[r][1]);
    }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) c[(long)r * rsc + j] = tile[r * NR + j];
}

// ---------------------------------------------------------------------------- row vector x matrix

// c[0:n] (+)= a[0:k] B (decode steps: M = 1). Memory-bound, so B is streamed once, unpacked.
static void gemv(int n, int k, const float *a, int csa, const float *b, int rsb, int csb, float *c,
                 int accumulate) {
    if (csb == 1) {  // B row-major: c += a[k] * B[k, :], vectorised along n, 16 columns at a time
        int j = 0;
        for (; j + 16 <= n; j += 16) {
            v128_t s0 = wasm_f32x4_splat(0), s1 = s0, s2 = s0, s3 = s0;
            for (int p = 0; p < k; p++) {
                const float *row = b + (long)p * rsb + j;
                v128_t av = wasm_f32x4_splat(a[(long)p * csa]);
                s0 = wasm_f32x4_add(s0, wasm_f32x4_mul(av, wasm_v128_load(row)));
                s1 = wasm_f32x4_add(s1, wasm_f32x4_mul(av, wasm_v128_load(row + 4)));
                s2 = wasm_f32x4_add(s2, wasm_f32x4_mul(av, wasm_v128_load(row + 8)));
                s3 = wasm_f32x4_add(s3, wasm_f32x4_mul(av, wasm_v128_load(row + 12)));
            }
            v128_t s[4] = {s0, s1, s2, s3};
            for (int q = 0; q < 4; q++) {
                v128_t v = accumulate ? wasm_f32x4_add(s[q], wasm_v128_load(c + j + 4 * q)) : s[q];
                wasm_v128_store(c + j + 4 * q, v);
            }
        }
        for (; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++) s += a[(long)p * csa] * b[(long)p * rsb + j];
            c[j] = accumulate ? c[j] + s : s;
        }
        return;
    }
    // B column-major (an (out, in) weight's transpose): c[j] = dot(a, B[:, j]), vectorised along k
    for (int j = 0; j < n; j++) {
        const float *col = b + (long)j * csb;
        float s = 0;
        int p = 0;
        if (rsb == 1 && csa == 1) {
            v128_t s0 = wasm_f32x4_splat(0), s1 = s0;
            for (; p + 8 <= k; p += 8) {
                s0 = wasm_f32x4_add(s0, wasm_f32x4_mul(wasm_v128_load(a + p), wasm_v128_load(col + p)));
                s1 = wasm_f32x4_add(s1, wasm_f32x4_mul(wasm_v128_load(a + p + 4), wasm_v128_load(col + p + 4)));
            }
            s0 = wasm_f32x4_add(s0, s1);
            s = wasm_f32x4_extract_lane(s0, 0) + wasm_f32x4_extract_lane(s0, 1)
              + wasm_f32x4_extract_lane(s0, 2) + wasm_f32x4_extract_lane(s0, 3);
        }
        for (; p < k; p++) s += a[(long)p * csa] * col[(long)p * rsb];
        c[j] = accumulate ? c[j] + s : s;
    }
}

// ---------------------------------------------------------------------------- epilogue

// What ember_sgemm_ep applies to C's elements as their last block of k leaves the micro-kernel (a panel of C in L1),
// with the bits of rows.c's bias_act pass over the finished product: a bias per row of C (a 1x1 convolution's
// channels: act(c + b[row])), per column (a linear layer's: act((c + b[col]) + 0)), or none (act(c + 0)).
enum { EP_NONE, EP_ROWS, EP_COLS, EP_ACT };
typedef struct {
    int mode, act;
    const float *bias;  // b[0] is C's row (EP_ROWS) or column (EP_COLS) 0
} gemm_ep;

#if defined(__wasm__)
// v through the epilogue as row r's at column j
#define EP_V(v, r, j, ACT)                                                                              \
    do {                                                                                                \
        if (mode == EP_ROWS)                                                                            \
            v = fw_add(v, fw_splat(b[r]));                                                              \
        else if (mode == EP_COLS)                                                                       \
            v = fw_add(v, fw_load_part(b + (j), cols - (j)));                                           \
        if (ACT != ACT_NONE && mode != EP_ROWS)                                                         \
            v = fw_add(v, fw_zero());                                                                   \
        v = fw_act(v, ACT);                                                                             \
    } while (0)
// (a panel is NR = FW columns wide: four of its rows at a time, as fvec.h's ACT_ROW_LOOP runs four vectors)
#define EP_LOOP(ACT)                                                                                    \
    {                                                                                                   \
        int r = 0;                                                                                      \
        if (cols <= FW)                                                                                 \
            for (; r + 4 <= rows; r += 4) {                                                             \
                float *a0 = c + (long)r * rsc, *a1 = a0 + rsc, *a2 = a1 + rsc, *a3 = a2 + rsc;          \
                fw v0 = fw_load_part(a0, cols), v1 = fw_load_part(a1, cols);                            \
                fw v2 = fw_load_part(a2, cols), v3 = fw_load_part(a3, cols);                            \
                EP_V(v0, r, 0, ACT); EP_V(v1, r + 1, 0, ACT); EP_V(v2, r + 2, 0, ACT); EP_V(v3, r + 3, 0, ACT); \
                fw_store_part(a0, v0, cols), fw_store_part(a1, v1, cols);                               \
                fw_store_part(a2, v2, cols), fw_store_part(a3, v3, cols);                               \
            }                                                                                           \
        for (; r < rows; r++)                                                                           \
            for (int j = 0; j < cols; j += FW) {                                                        \
                float *at = c + (long)r * rsc + j;                                                      \
                fw v = fw_load_part(at, cols - j);                                                      \
                EP_V(v, r, j, ACT);                                                                     \
                fw_store_part(at, v, cols - j);                                                         \
            }                                                                                           \
    }

// C[0:rows, 0:cols] (row stride rsc) through the epilogue; b: the bias at C's row 0 or column 0 here
static __attribute__((noinline)) void ep_apply(float *c, long rsc, int rows, int cols, int mode, const float *b,
                                               int act) {
    switch (act) {  // (a loop per activation: its constants outside the loop)
    case ACT_SILU: EP_LOOP(ACT_SILU) break;
    case ACT_GELU: EP_LOOP(ACT_GELU) break;
    case ACT_GELU_TANH: EP_LOOP(ACT_GELU_TANH) break;
    case ACT_RELU: EP_LOOP(ACT_RELU) break;
    default: EP_LOOP(ACT_NONE) break;
    }
}
#endif

// the epilogue of C's rows [r0, r0 + rows) and columns [c0, c0 + cols) at c
static inline void ep_at(const gemm_ep *ep, float *c, long rsc, int r0, int c0, int rows, int cols) {
#if defined(__wasm__)
    if (ep && ep->mode != EP_NONE)
        ep_apply(c, rsc, rows, cols, ep->mode,
                 ep->mode == EP_ROWS ? ep->bias + r0 : ep->mode == EP_COLS ? ep->bias + c0 : 0, ep->act);
#else
    (void)ep, (void)c, (void)rsc, (void)r0, (void)c0, (void)rows, (void)cols;
#endif
}

// ---------------------------------------------------------------------------- blocks and threads

// C (m x n) (+)= A (m x k) B (k x n) through the packed panels and the micro-kernel, then each panel of C's final
// sums through the epilogue (ep: C's element [0, 0] is the product's [r0, c0]); k > 0
static void blocked(int m, int n, int k, const float *a, int rsa, int csa, const float *b, int rsb, int csb,
                    const float *const *brows, long bcol, float *c, int rsc, float *scratch, int accumulate,
                    const gemm_ep *ep, int r0, int c0) {
    float *pa = scratch, *pb = scratch + MC * KC;
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nc = n - j0 < NC ? n - j0 : NC;
        for (int k0 = 0; k0 < k; k0 += KC) {
            int kc = k - k0 < KC ? k - k0 : KC;
            int acc = accumulate || k0 > 0;
            if (brows)  // (B's rows by pointer, from column bcol: b unused)
                pack_b_rows(kc, nc, brows + k0, bcol + j0, pb);
            else
                pack_b(kc, nc, b + (long)k0 * rsb + (long)j0 * csb, rsb, csb, pb);
            for (int i0 = 0; i0 < m; i0 += MC) {
                int mc = m - i0 < MC ? m - i0 : MC;
                pack_a(mc, kc, a + (long)i0 * rsa + (long)k0 * csa, rsa, csa, pa);
                for (int j = 0; j < nc; j += NR) {
                    int cols = nc - j < NR ? nc - j : NR;
                    for (int i = 0; i < mc; i += MR) {
                        int rows = mc - i < MR ? mc - i : MR;
                        micro_4x8(kc, pa + i * kc, pb + j * kc, c + (long)(i0 + i) * rsc + j0 + j, rsc,
                                  rows, cols, acc);
                    }
                    if (k0 + kc >= k)  // (the panel's mc x NR sums are final, and in L1)
                        ep_at(ep, c + (long)i0 * rsc + j0 + j, rsc, r0 + i0, c0 + j0 + j, mc, cols);
                }
            }
        }
    }
}

typedef struct {
    int m, n, k, rsa, csa, rsb, csb, rsc, bsa, bsb, bsc, accumulate;
    int split_m, units;  // the dimension cut into UNIT blocks, and the blocks of one product (UNIT blocks x parts)
    int parts, part;     // the other dimension in `parts` ranges of `part` (1 and all of it, mostly)
    const float *a, *b;
    float *c, *scratch;  // SCRATCH_FLOATS per thread
    const gemm_ep *ep;   // (0: none)
    const float *const *brows;  // (0: B at b; else B's row i at brows[i], its columns contiguous)
} gemm_job;

// C's rows or columns [s, e) of `len` (split_m: rows) and [os, oe) of the other dimension, of product t
static void gemm_block(const gemm_job *j, int t, int s, int e, int os, int oe, int thread) {
    const float *a = j->a + (long)t * j->bsa, *b = j->b + (long)t * j->bsb;
    float *c = j->c + (long)t * j->bsc, *scratch = j->scratch + (long)thread * SCRATCH_FLOATS;
    if (j->m == 1) {  // a row vector times B (decode steps): B streamed once, unpacked
        gemv(e - s, j->k, a, j->csa, b + (long)s * j->csb, j->rsb, j->csb, c + s, j->accumulate);
        ep_at(j->ep, c + s, j->rsc, 0, s, 1, e - s);
    } else if (j->n == 1 && j->rsc == 1) {  // a matrix times a column (the quantized matmul's slabs when decoding)
        gemv(e - s, j->k, b, j->rsb, a + (long)s * j->rsa, j->csa, j->rsa, c + s, j->accumulate);
        ep_at(j->ep, c + s, 1, s, 0, e - s, 1);
    } else if (j->split_m) {  // rows [s, e), columns [os, oe)
        blocked(e - s, oe - os, j->k, a + (long)s * j->rsa, j->rsa, j->csa, b + (long)os * j->csb, j->rsb, j->csb,
                j->brows, os, c + (long)s * j->rsc + os, j->rsc, scratch, j->accumulate, j->ep, s, os);
    } else {  // rows [os, oe), columns [s, e)
        blocked(oe - os, e - s, j->k, a + (long)os * j->rsa, j->rsa, j->csa, b + (long)s * j->csb, j->rsb, j->csb,
                j->brows, s, c + (long)os * j->rsc + s, j->rsc, scratch, j->accumulate, j->ep, os, s);
    }
}

// units [u0, u1): block u % units of product u / units, by the path the whole product takes (parallel.h). Consecutive
// UNIT blocks with all their parts go as one block (one thread, or a large chunk: the other operand packed once)
static void gemm_units(const void *p, int u0, int u1, int thread) {
    const gemm_job *j = (const gemm_job *)p;
    int len = j->split_m ? j->m : j->n, other = j->split_m ? j->n : j->m;
    for (int u = u0; u < u1;) {
        int t = u / j->units, r = u % j->units, here = (t + 1) * j->units - u;
        here = u1 - u < here ? u1 - u : here;  // units of product t in the range
        int s = r / j->parts * UNIT, whole = r % j->parts == 0 ? here / j->parts : 0;
        if (whole) {
            int e = s + whole * UNIT < len ? s + whole * UNIT : len;
            gemm_block(j, t, s, e, 0, other, thread);
            u += whole * j->parts;
        } else {
            int os = r % j->parts * j->part, oe = os + j->part < other ? os + j->part : other;
            gemm_block(j, t, s, s + UNIT < len ? s + UNIT : len, os, oe, thread);
            u++;
        }
    }
}

// ---------------------------------------------------------------------------- entry points

// batch products; strides: 8 element strides {batch, row, column of A; of B; batch, row of C} (a batch
// stride of 0 broadcasts). Passed as an array because Pyodide's ctypes calls a function of more than
// 13 arguments ~20x slower (29 us against 1.5 us). scratch: ember_sgemm_scratch_floats() floats per thread.
// 0, or PARALLEL_LOST (the page's pool lost a worker: C is not the answer).
static int sgemm_run(int batch, int m, int n, int k, const float *a, const float *b, float *c, const int *strides,
                     float *scratch, int accumulate, const gemm_ep *ep, const float *const *brows) {
    if (m <= 0 || n <= 0 || batch <= 0)
        return 0;
    int rsc = strides[7];
    if (k <= 0) {  // an empty sum
        for (int t = 0; t < batch; t++) {
            float *ct = c + (long)t * strides[6];
            if (!accumulate)
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) ct[(long)i * rsc + j] = 0.0f;
            ep_at(ep, ct, rsc, 0, 0, m, n);
        }
        return 0;
    }
    int split_m = n == 1 && rsc == 1 ? 1 : m == 1 ? 0 : m >= n;
    int len = split_m ? m : n, other = split_m ? n : m, units = (len + UNIT - 1) / UNIT, parts = 1;
    if (m > 1 && n > 1 && (long)batch * units < MIN_UNITS) {  // (the row-vector paths keep whole rows)
        parts = (MIN_UNITS + batch * units - 1) / (batch * units);
        parts = parts < other / MIN_PART ? parts : other / MIN_PART > 1 ? other / MIN_PART : 1;
    }
    int part = parts > 1 ? ((other + parts - 1) / parts + NR - 1) / NR * NR : other;
    parts = (other + part - 1) / part;
    gemm_job j = {m, n, k, strides[1], strides[2], strides[4], strides[5], rsc, strides[0], strides[3], strides[6],
                  accumulate, split_m, units * parts, parts, part, a, b, c, scratch, ep, brows};
    long per_unit = (long)(len < UNIT ? len : UNIT) * (part < other ? part : other) * k;
    units *= parts;
    return ember_parallel(gemm_units, &j, batch * units, ember_chunks((long)batch * units, per_unit));
}

// batch products; strides: 8 element strides {batch, row, column of A; of B; batch, row of C} (a batch
// stride of 0 broadcasts). Passed as an array because Pyodide's ctypes calls a function of more than
// 13 arguments ~20x slower (29 us against 1.5 us). scratch: ember_sgemm_scratch_floats() floats per thread.
// 0, or PARALLEL_LOST (the page's pool lost a worker: C is not the answer).
#ifdef GEMM_EXACT
#define BATCHED_EXPORT(name) __attribute__((export_name(#name "_exact"))) int name##_exact
#else
#define BATCHED_EXPORT(name) __attribute__((export_name(#name))) int name
#endif
BATCHED_EXPORT(ember_sgemm_batched)(int batch, int m, int n, int k, const float *a, const float *b, float *c,
                                    const int *strides, float *scratch, int accumulate) {
    return sgemm_run(batch, m, n, k, a, b, c, strides, scratch, accumulate, 0, 0);
}

#if defined(__wasm__)
// ember_sgemm_batched's C = A B (never +=), each product's elements then through the epilogue: mode EP_ROWS (bias
// b[i] on row i: a 1x1 convolution's channels), EP_COLS (b[j] on column j: a linear layer's), EP_ACT (no bias) or
// EP_NONE, then the activation act (fvec.h's ACT_*): rows.c's bias_act over C, the same bits, with C's panels
// still in L1 where that pass read them back from memory. -1: a mode or activation it does not know.
BATCHED_EXPORT(ember_sgemm_ep)(int batch, int m, int n, int k, const float *a, const float *b, float *c,
                               const int *strides, float *scratch, const float *bias, int mode, int act) {
    if (mode < EP_NONE || mode > EP_ACT || act < ACT_NONE || act > ACT_GELU_TANH ||
        ((mode == EP_ROWS || mode == EP_COLS) && !bias))
        return -1;
    gemm_ep ep = {mode, act, bias};
    return sgemm_run(batch, m, n, k, a, b, c, strides, scratch, 0, &ep, 0);
}
#endif

#ifndef GEMM_EXACT
// C (m x n, row stride rsc) = A (m x k, row stride rsa, unit columns) B, B's row i at rows[i] with its n columns
// contiguous from there: conv.c's strided convs in the page, whose B is the (channel, tap) rows of their input planes
// (no im2col copy: each panel gathered as it is packed). On the product's threads; scratch SCRATCH_FLOATS per
// thread. 0, -1 (a row vector or a column: gemv's paths read no row pointers) or PARALLEL_LOST.
__attribute__((visibility("hidden"))) int ember_sgemm_rows(int m, int n, int k, const float *a, int rsa,
                                                           const float *const *rows, float *c, int rsc,
                                                           float *scratch) {
    if (m < 2 || n < 2)
        return -1;
    int strides[8] = {0, rsa, 1, 0, 0, 1, 0, rsc};
    return sgemm_run(1, m, n, k, a, rows[0], c, strides, scratch, 0, 0, rows);  // (b: B's row 0, not read as b)
}
#endif

#ifndef GEMM_EXACT
// C (m x n, row stride rsc, unit column stride) = A (m x k) B (k x n), or += when accumulate.
// scratch: ember_sgemm_scratch_floats() floats per thread, any alignment. 0, or PARALLEL_LOST.
__attribute__((export_name("ember_sgemm")))
int ember_sgemm(int m, int n, int k, const float *a, int rsa, int csa, const float *b, int rsb, int csb,
                float *c, int rsc, float *scratch, int accumulate) {
    int strides[8] = {0, rsa, csa, 0, rsb, csb, 0, rsc};
    return ember_sgemm_batched(1, m, n, k, a, b, c, strides, scratch, accumulate);
}
#endif
