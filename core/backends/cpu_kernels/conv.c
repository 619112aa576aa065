// Direct float32 convolution (conv2d; conv1d as one row), NCHW in and out, any stride, padding, dilation and
// groups, the bias and an activation (ReLU, SiLU, GELU) applied as each block of output leaves the cache: the CPU
// backend's kernel for the registry's `conv_bias_act` op (cpu_float_kernels.py), natively and in the page.
//
// No im2col: the padded input is split once into stride-phase planes (plane (a, b) holds the padded pixels whose
// row is a and column b modulo the stride; for stride 1 it is the padded image), rows `wq` floats apart, so every
// kernel tap reads a contiguous run of a plane for consecutive "flat" output pixels f = oh wq + ow (the columns
// ow >= wo of each flat row are computed and dropped: a register tile never stops at a row's end; natively with
// AVX-512 a 3-wide stride-1 conv as wide as its input instead reads planes without padding columns, its outer taps'
// loads masked at the rows' ends: the same zeros, no dropped columns). A tile of
// CV_MR output channels x CV_NV pixel vectors (16 lanes with AVX-512: 8 x 3 of them, 48 pixels; fvec.h's f8
// elsewhere) accumulates over input channels and taps (weights broadcast, pixels loaded) in blocks of channels
// whose weights stay in L1 while a block of units streams through; the sums of every block but the last go to a
// flat accumulator, and the last block's tile, from those sums, leaves with the bias and the activation straight
// into y where its pixels lie in one row, else through a tile-sized buffer into y's rows (no second pass over the
// accumulator). The vector width changes only how many pixels a
// multiply-add covers: every lane's chain is the same, so AVX-512 gives the AVX2 build's bits.
//
// Work is cut into units of SEG flat pixels of one image, ranges of units split between threads (parallel.h:
// threads.c natively, the page's kernel pool), and every output is one multiply-add chain over (channel, tap) in
// the same order whatever the tiling, the range or the thread: results do not depend on the split. Outputs of a
// few pixels are dot products instead (narrow_rows). Freestanding: the caller passes every buffer
// (ember_conv2d_scratch_floats).
#include <stdint.h>

#include "conv.h"
#include "parallel.h"

// A tile accumulates in fvec.h's fw (AVX-512's 16 lanes natively where the target has them, f8 elsewhere): its
// rows x vectors 8 x 3 of 32 registers with AVX-512, fvec.h's f8 tile elsewhere
#if FW == 16
#define CV_MR 8
#define CV_NV 3
#else
#define CV_MR F8_MR
#define CV_NV F8_NV
#endif
// masked tiles (setup's k->masked): with AVX-512's masked loads, whose lanes left out read nothing and give zeros
#if FW == 16
#define MASKED_TILES 1
typedef __mmask16 lanes_t;
#define LOAD_MASKED(p, m) _mm512_maskz_loadu_ps(m, p)
#else
#define MASKED_TILES 0
typedef int lanes_t;
#define LOAD_MASKED(p, m) ((void)(m), fw_load(p))  // (never taken: no masked tiles there)
#endif

#define SEG 192        // output pixels a unit at most (a multiple of every target's FW * CV_NV)
// channels x taps of a weight block: natively its CV_MR rows are 72 KiB (256 channels of a 3x3: most convs' sums
// in one pass, not in blocks of 32 that each read and write the tiles' accumulators; YOLOv8s's and ResNet's 3x3
// convs 1-2% faster on one thread, 3-6% on two, than with 9 KiB blocks in L1); in the page a block of 2304 / 4
// taps a tile's rows together, whose 8-pixel tiles make fewer multiply-adds of each input line they load (YOLOv8s's
// 3x3 convs there: 5-35% faster than with a larger block)
#if defined(__wasm__)
#define KC_TAPS (2304 / CV_MR / 4)
#else
#define KC_TAPS (18432 / CV_MR)
#endif
// the tile-major order of conv_rows: each tile's lines of a block of KC_TILE / taps channels kept in L1 while every
// block of output channels reads them, rather than streamed again from L2 for each. Natively for strided convs,
// whose tiles read twice the lines a stride-1 conv's do (their taps spread over four phase planes): YOLOv8s's
// 32 -> 64 stride-2 conv at 320 x 320 1.09x faster on one thread, its others 1.01-1.05x (stride 1: slower so). In
// the page for those (1.07x) and for pointwise convs (and Winograd's products), whose tiles reuse each line least
// (1.15x)
#if defined(__wasm__)
#define PAGE 1
#define TILE_MAJOR(k) ((k)->taps == 1 || (k)->sh > 1 || (k)->sw > 1)
#else
#define PAGE 0
#define TILE_MAJOR(k) ((k)->sh > 1 || (k)->sw > 1)
#endif
#define KC_TILE 288
#define PAD 48         // zeros after each plane: a tile's last vector reads up to FW - 1 floats past its pixels
#define PANEL 65536    // floats of input planes a block of units reads for a block of channels (in L2)
#define MAX_TAPS 1024
#define MASK_UB 8      // units that share a pass over the weights at most (k->ub)
#define NARROW 8       // output pixels an image up to which each output is a dot product (narrow_rows)
#define FEW_UNITS 32   // units below which the work is also cut by blocks of OBLOCK output channels (groups 1)
#define OBLOCK (CV_MR == 6 ? 48 : 32)  // (a multiple of the target's CV_MR)

typedef struct {
    const float *x, *w, *b;
    float *y, *planes;
    int n, c, h, wd, o, kh, kw, sh, sw, ph, pw, dh, dw, groups, act;
    int ho, wo, hq, wq, taps, cg, og, kc, ub, narrow, nob;  // nob: blocks of output channels (OBLOCK each)
    int gsplit;      // 1: jobs of one group each (a grouped conv of few units)
    int tile_major;  // 1: each tile's block of channels read by every block of output channels in turn
    int own_planes;  // 0: x is its own plane (a 1x1 stride-1 unpadded conv whose pixels fill whole vectors)
    int masked;      // 1: planes without padding columns, the taps' loads masked at rows' ends (MASKED_TILES)
    int ppw;         // the planes' padding columns each side: pw, or 0 where masked
    int flat_y;      // 1: flat pixels are y's pixels (wq == wo: kernels one column wide), sums kept in y itself
    long flat, units, cs, phase, image;  // flat pixels of an image, units; floats from one plane channel, phase,
    float *acc;                          // image to the next; the accumulator: (n, o, flat + 32), or y
    const float **brows;  // GEMM_PATH's B: the (channel, tap) rows of one image's and group's planes, or 0
    float *gemm;          // the page's gemm.c scratch (C_GEMM: GEMM_PATH), or 0
} conv_t;

// In the page a strided conv (more than one tap and at least 64 (channel, tap) steps an output: YOLO's, Whisper's
// 1-D stem) runs as gemm.c's product: w's rows (O, C taps) times B, whose rows are the (channel, tap) rows of the
// stride-phase planes (gemm.c gathers each panel of pixels as it packs it: no im2col copy), into the accumulator,
// then y's rows with the bias and activation. Each output is one multiply-add chain over (channel, tap), as a tile's
// (gemm.c continues it across its blocks of K): the tile's bits. Chromium 156, one thread: YOLOv8s's stride-2 convs
// 1.04-1.10x faster than on packed panels of a pair of tiles (gemm.c's blocks of 256 x 1024 pixels), those
// 1.08-1.22x faster than the tiles. Needs gemm.c's scratch (C_GEMM; else the tiles) and more than one output
// channel and flat pixel (gemm.c's row-vector paths read no row pointers). Pointwise convs and Winograd's products
// (without gemm.c's scratch) run gemm.c's micro-kernel loop on w's rows and the pixels where they lie, nothing
// packed (packing their pixels cost what the faster loop saved: 1x1 convs 0.93-0.95x; unpacked 1.02-1.04x,
// Winograd's convs of 64-256 channels 1.05-1.09x, in Node). Not a stem of 27 steps a tile (packed: 15.1 -> 15.8 ms).
#define GEMM_PATH(k) (PAGE && (k)->tile_major && (k)->taps > 1 && (long)(k)->cg * (k)->taps >= 64 && !(k)->narrow && \
                      !(k)->masked && !(k)->flat_y && (k)->og > 1 && (k)->flat > 1)
#define PAGE_POINTWISE(k) (PAGE && (k)->taps == 1 && !(k)->narrow && !(k)->masked)  // (micro_pair_rows)

static long rows_at(const conv_t *k) {  // (the scratch's floats before GEMM_PATH's row pointers)
    return (k->own_planes ? k->image * k->n : 0) + 8 + (k->flat_y ? 0 : (long)k->n * k->o * (k->flat + 32));
}

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
    k->narrow = (long)k->ho * k->wo <= NARROW;
    // a stride-1 conv as wide as its input (padding (kw - 1) dw / 2 each side) reads planes without padding columns
    // where masked loads zero the lanes past a row's ends: no output columns computed only to be dropped (2 of
    // every 58 at 56 x 56, of every 22 at 20 x 20) and y is the flat accumulator (no buffer, no scatter)
    k->masked = MASKED_TILES && !k->narrow && k->kw == 3 && k->sh == 1 && k->sw == 1 && k->pw == k->dw;
    k->ppw = k->masked ? 0 : k->pw;
    k->hq = k->ho + (k->kh - 1) * k->dh / k->sh;
    k->wq = k->masked ? k->wo : k->wo + (k->kw - 1) * k->dw / k->sw;
    k->flat = (long)k->ho * k->wq;
    k->units = (k->flat + SEG - 1) / SEG;
    k->taps = k->kh * k->kw;
    k->cg = k->c / k->groups, k->og = k->o / k->groups;
    k->kc = KC_TAPS / k->taps > 0 ? KC_TAPS / k->taps : 1;
    k->tile_major = TILE_MAJOR(k);
    if (k->tile_major)
        k->kc = KC_TILE / k->taps > 0 ? KC_TILE / k->taps : 1;
    k->kc = k->kc < k->cg ? k->kc : k->cg;
    // units that share a pass over the weights: their new input rows of every phase fill about PANEL floats
    long per_unit = (long)k->kc * k->sh * k->sw * SEG;
    k->ub = PANEL / per_unit < 1 ? 1 : PANEL / per_unit > MASK_UB ? MASK_UB : (int)(PANEL / per_unit);
    // a pointwise conv reads x in place (no copy: YOLO's 1x1 convs are a third of its multiply-adds, over maps of up
    // to 6.5 MB) where no tile's vector reaches past an image's pixels: they are a whole number of vectors
    k->own_planes = k->narrow || !(k->kh == 1 && k->kw == 1 && k->sh == 1 && k->sw == 1 && k->ph == 0 && k->pw == 0 &&
                      k->flat % FW == 0);
    k->flat_y = k->wq == k->wo;
    k->cs = (long)k->hq * k->wq + (k->own_planes ? PAD : 0);  // a tile's last vector reads past the plane: zeros there
    k->phase = k->cs * k->c;
    k->image = k->phase * k->sh * k->sw;
    if (!k->own_planes)
        k->planes = (float *)k->x;  // (read only)
    k->acc = k->flat_y ? k->y : (float *)p[C_SCRATCH] + (k->own_planes ? k->image * k->n : 0) + 8;
    k->gemm = (float *)p[C_GEMM];
    k->brows = GEMM_PATH(k) && k->gemm ? (const float **)((float *)p[C_SCRATCH] + rows_at(k)) : 0;
    // a small image's few units would leave threads idle (YOLO's 20 x 20 maps: 3 units of 512 channels, 2 of them
    // on one thread): its output channels are cut into blocks too, every output still summed alike
    k->nob = k->groups == 1 && k->n * k->units < FEW_UNITS ? (k->o + OBLOCK - 1) / OBLOCK : 1;
    // and a grouped conv's few units into one group's each (Winograd's 36 products over an image's few tiles)
    k->gsplit = k->groups > 1 && k->n * k->units < FEW_UNITS;
    return 0;
}

// floats of scratch ember_conv2d needs (the planes), or -1 for parameters it does not take
EMBER_EXPORT(ember_conv2d_scratch_floats)
long ember_conv2d_scratch_floats(const intptr_t *p) {
    conv_t k;
    if (setup(p, &k))
        return -1;
    if (k.narrow)  // the columns, (n, pixels, groups, cg taps rounded up to 8)
        return (long)k.n * k.ho * k.wo * k.groups * ((k.cg * k.taps + 7) & ~7L) + 8;
    return rows_at(&k) + (GEMM_PATH(&k) ? (long)k.cg * k.taps * (long)(sizeof(float *) / sizeof(float)) : 0);
}

// ---------------------------------------------------------------------------------------------- the planes

// Both column phases of stride-2 planes' row r of row phase a, in one pass over the input row (a deinterleave the
// compiler vectorizes; a row at a time per phase read each input row twice, a float at a time: 10% of YOLOv8s's
// stride-2 convs). dst0, dst1: the rows of phases (a, 0) and (a, 1).
static void deinterleave_row(const conv_t *k, const float *src, int ih, float *dst0, float *dst1) {
    if (ih < 0 || ih >= k->h) {
        for (int q = 0; q < k->wq; q++) dst0[q] = dst1[q] = 0.0f;
        return;
    }
    const float *row = src + (long)ih * k->wd;
    // plane column q of phase b holds input column 2 q + b - pw: both inside the row for q in [qa, qb)
    int qa = (k->pw + 1) / 2, qb = (k->wd + k->pw) / 2;
    qb = qb < k->wq ? qb : k->wq;
    qa = qa < qb ? qa : qb;
    for (int q = 0; q < k->wq; q++) {  // the columns of either phase past the row's ends: zeros there
        if (q == qa)
            q = qb;  // (the loop below fills [qa, qb))
        if (q >= k->wq)
            break;
        int c0 = 2 * q - k->pw, c1 = c0 + 1;
        dst0[q] = c0 >= 0 && c0 < k->wd ? row[c0] : 0.0f;
        dst1[q] = c1 >= 0 && c1 < k->wd ? row[c1] : 0.0f;
    }
    const float *pair = row + 2 * qa - k->pw;
    for (int i = 0; i < qb - qa; i++) {
        dst0[qa + i] = pair[2 * i];
        dst1[qa + i] = pair[2 * i + 1];
    }
}

static void planes_rows(const conv_t *k, int u0, int u1) {
    for (int u = u0; u < u1; u++) {
        int n = u / k->c, c = u % k->c;
        const float *src = k->x + ((long)n * k->c + c) * k->h * k->wd;
        if (k->sw == 2) {
            for (int a = 0; a < k->sh; a++) {
                float *dst0 = k->planes + n * k->image + (a * 2) * k->phase + c * k->cs, *dst1 = dst0 + k->phase;
                for (int r = 0; r < k->hq; r++)
                    deinterleave_row(k, src, r * k->sh + a - k->ph, dst0 + (long)r * k->wq, dst1 + (long)r * k->wq);
                for (int q = 0; q < PAD; q++)  // (the planes' ends)
                    dst0[(long)k->hq * k->wq + q] = dst1[(long)k->hq * k->wq + q] = 0.0f;
            }
            continue;
        }
        for (int a = 0; a < k->sh; a++)
            for (int b = 0; b < k->sw; b++) {
                float *dst = k->planes + n * k->image + (a * k->sw + b) * k->phase + c * k->cs;
                // plane columns q whose input column q sw + b - ppw lies in [0, wd): [q0, q1)
                int q0 = k->ppw - b > 0 ? (k->ppw - b + k->sw - 1) / k->sw : 0;
                int q1 = (k->wd + k->ppw - b + k->sw - 1) / k->sw;
                q1 = q1 < k->wq ? q1 : k->wq;
                q0 = q0 < q1 ? q0 : q1;
                for (int r = 0; r < k->hq; r++, dst += k->wq) {
                    int ih = r * k->sh + a - k->ph;
                    if (ih < 0 || ih >= k->h) {
                        for (int q = 0; q < k->wq; q++) dst[q] = 0.0f;
                        continue;
                    }
                    const float *row = src + (long)ih * k->wd + b - k->ppw;
                    for (int q = 0; q < q0; q++) dst[q] = 0.0f;
                    if (k->sw == 1)
                        for (int q = q0; q < q1; q++) dst[q] = row[q];
                    else
                        for (int q = q0; q < q1; q++) dst[q] = row[(long)q * k->sw];
                    for (int q = q1; q < k->wq; q++) dst[q] = 0.0f;
                }
                for (int q = 0; q < PAD; q++) dst[q] = 0.0f;  // (dst: the plane's end)
            }
    }
}

// ---------------------------------------------------------------------------------------------- the tile

#if PAGE
// In the page a tile's last block leaves its sums in y, then this pass applies the bias (b[r bs] to row r) and the
// activation to its rows (and Winograd's to its output rows' phases): one call a tile, whose loop keeps the
// activation's constants in registers, where the epilogue applied to each vector in the tile's registers was a call
// a vector that built its ~13 constants anew (three instructions each in V8), and took registers from the tile's
// loop. act(v + b) of the same stored sums: the same bits.
// (four vectors at a time, as fvec.h's ACT_ROW_LOOP: a tile's rows, or a row's four vectors)
#define EPI_V(v, r, ACT) (v = fw_act(b ? fw_add(v, fw_splat(b[(r) * bs])) : v, ACT))
#define EPILOGUE_ROWS(ACT)                                                                              \
    {                                                                                                   \
        int r = 0;                                                                                      \
        if (width <= FW)                                                                                \
            for (; r + 4 <= mr; r += 4) {                                                               \
                float *a0 = y + r * yos, *a1 = a0 + yos, *a2 = a1 + yos, *a3 = a2 + yos;                \
                fw v0 = fw_load_part(a0, width), v1 = fw_load_part(a1, width);                          \
                fw v2 = fw_load_part(a2, width), v3 = fw_load_part(a3, width);                          \
                EPI_V(v0, r, ACT), EPI_V(v1, r + 1, ACT), EPI_V(v2, r + 2, ACT), EPI_V(v3, r + 3, ACT); \
                fw_store_part(a0, v0, width), fw_store_part(a1, v1, width);                             \
                fw_store_part(a2, v2, width), fw_store_part(a3, v3, width);                             \
            }                                                                                           \
        for (; r < mr; r++) {                                                                           \
            int j = 0;                                                                                  \
            for (; j + 4 * FW <= width; j += 4 * FW) {                                                  \
                float *at = y + r * yos + j;                                                            \
                fw v0 = fw_load(at), v1 = fw_load(at + FW), v2 = fw_load(at + 2 * FW);                  \
                fw v3 = fw_load(at + 3 * FW);                                                           \
                EPI_V(v0, r, ACT), EPI_V(v1, r, ACT), EPI_V(v2, r, ACT), EPI_V(v3, r, ACT);             \
                fw_store(at, v0), fw_store(at + FW, v1), fw_store(at + 2 * FW, v2);                     \
                fw_store(at + 3 * FW, v3);                                                              \
            }                                                                                           \
            for (; j < width; j += FW) {                                                                \
                float *at = y + r * yos + j;                                                            \
                fw v = fw_load_part(at, width - j);                                                     \
                fw_store_part(at, EPI_V(v, r, ACT), width - j);                                         \
            }                                                                                           \
        }                                                                                               \
    }
__attribute__((noinline, visibility("hidden"))) void ember_conv_epilogue(float *y, long yos, int mr, int width,
                                                                       const float *b, int bs, int act) {
    switch (act) {  // (a loop per activation: its constants outside the loop)
    case ACT_SILU: EPILOGUE_ROWS(ACT_SILU) break;
    case ACT_GELU: EPILOGUE_ROWS(ACT_GELU) break;
    case ACT_GELU_TANH: EPILOGUE_ROWS(ACT_GELU_TANH) break;
    case ACT_RELU: EPILOGUE_ROWS(ACT_RELU) break;
    default: EPILOGUE_ROWS(ACT_NONE) break;
    }
}
#endif


// y[r][0:width] (+)= sum over kc channels and the taps of w[r][c][t] x_t[c][0:width] for MRc output channels
// (rows of y yos apart, of w wos apart) and width <= FW NVc pixels; src: the planes at this output pixel of the
// block's first channel (off: each tap's offset). last: the block of the last channels, whose sums leave with the
// bias (b[r], or none) added and the activation applied. The accumulators are named variables c<row><vector>,
// never an array (GCC keeps an array of vectors in memory: every multiply-add through the stack).
#define CT_ROW3(M, r) M(r, 0) M(r, 1) M(r, 2)
#define CT_EACH(M) CT_ROW3(M, 0) CT_ROW3(M, 1) CT_ROW3(M, 2) CT_ROW3(M, 3) CT_ROW3(M, 4) CT_ROW3(M, 5) CT_ROW3(M, 6) \
    CT_ROW3(M, 7)
#define CT_DECL(r, j) fw c##r##j = fw_zero();
#define CT_LOAD(r, j) \
    if (r < MRc && j < NVc) c##r##j = fw_load_part(ys + r * yss + FW * j, width - FW * j);
#define CT_STORE(r, j) \
    if (r < MRc && j < NVc) fw_store_part(y + r * yos + FW * j, c##r##j, width - FW * j);
#define CT_ACT(r, j) \
    if (r < MRc && j < NVc) c##r##j = fw_bias_act(c##r##j, b ? b + r : 0, act);
#define CT_MADD_T(r, t)                                                   \
    if (r < MRc) {                                                        \
        fw av = fw_bcast(wc + (r) * wos + (t));                           \
        c##r##0 = fw_madd(c##r##0, av, x0);                               \
        if (NVc > 1) c##r##1 = fw_madd(c##r##1, av, x1);                  \
        if (NVc > 2) c##r##2 = fw_madd(c##r##2, av, x2);                  \
    }

// one tap t: its input vectors (the loads L0-L2 of xs, the tap's pixels) times each row's weight
#define CT_TAP(t, L0, L1, L2)                                                              \
    {                                                                                      \
        const float *xs = xc + off[t];                                                     \
        fw x0 = L0, x1 = NVc > 1 ? L1 : x0, x2 = NVc > 2 ? L2 : x0;                        \
        (void)x1, (void)x2;                                                                \
        CT_MADD_T(0, t) CT_MADD_T(1, t) CT_MADD_T(2, t) CT_MADD_T(3, t) CT_MADD_T(4, t)    \
        CT_MADD_T(5, t) CT_MADD_T(6, t) CT_MADD_T(7, t)                                    \
    }

static inline __attribute__((always_inline)) void tile(const int MRc, const int NVc, const int MASKED,
                                                       const lanes_t *mt, const float *src, long cs,
                                                       const long *off, int taps, const long *pf, int npf,
                                                       const float *w, long wos, int kc, float *y, long yos,
                                                       const float *ys, long yss, int width, int first, int last,
                                                       const float *b, int act) {
    CT_EACH(CT_DECL)
    if (!first) {
        CT_EACH(CT_LOAD)
    }
    // a masked tile's masks: the left and right taps' (every row's alike), CV_NV vectors each
    const lanes_t l0 = MASKED ? mt[0] : 0, l1 = MASKED ? mt[1] : 0, l2 = MASKED ? mt[2] : 0;
    const lanes_t r0 = MASKED ? mt[CV_NV] : 0, r1 = MASKED ? mt[CV_NV + 1] : 0, r2 = MASKED ? mt[CV_NV + 2] : 0;
    (void)l0, (void)l1, (void)l2, (void)r0, (void)r1, (void)r2;
    for (int c = 0; c < kc; c++) {
        const float *xc = src + c * cs, *wc = w + c * taps;
        // the next channel's lines (pf: one tap per plane row read) while this one's multiply-adds run: a tile
        // reads a short run of several rows a channel, more streams than the hardware prefetcher follows (YOLOv8s's
        // 3x3 convs 3-15% faster, its 1x1 convs over 160 x 160 maps 25%)
        for (int i = 0; i < npf; i++) {
            const char *nx = (const char *)(xc + cs + pf[i]);
            for (int l = 0; l < 4 * FW * CV_NV + 64; l += 64) __builtin_prefetch(nx + l);
        }
        if (MASKED) {  // kw 3: each row's outer taps masked (the masks held in registers), its middle one plain
            for (int t = 0; t < taps; t += 3) {
                CT_TAP(t, LOAD_MASKED(xs, l0), LOAD_MASKED(xs + FW, l1), LOAD_MASKED(xs + 2 * FW, l2))
                CT_TAP(t + 1, fw_load(xs), fw_load(xs + FW), fw_load(xs + 2 * FW))
                CT_TAP(t + 2, LOAD_MASKED(xs, r0), LOAD_MASKED(xs + FW, r1), LOAD_MASKED(xs + 2 * FW, r2))
            }
            continue;
        }
        for (int t = 0; t < taps; t++) {
            CT_TAP(t, fw_load(xs), fw_load(xs + FW), fw_load(xs + 2 * FW))
        }
    }
#if PAGE
    CT_EACH(CT_STORE)
    if (last && (b || act))
        ember_conv_epilogue(y, yos, MRc, width, b, 1, act);
#else
    if (last && (b || act)) {
        CT_EACH(CT_ACT)
    }
    CT_EACH(CT_STORE)
#endif
}

#define TILE_ARGS src, k->cs, off, k->taps, pf, npf, w, wos, kc, y, yos, ys, yss, width, first, last, b, k->act
#define TILE_NV_M(MRc, M)                                                          \
    switch (nv) {                                                                  \
    case 1: tile(MRc, 1, M, mt, TILE_ARGS); break;                                  \
    case 2: if (CV_NV >= 2) tile(MRc, CV_NV >= 2 ? 2 : 1, M, mt, TILE_ARGS); break; \
    default: if (CV_NV >= 3) tile(MRc, CV_NV >= 3 ? 3 : 1, M, mt, TILE_ARGS); break; \
    }
#define TILE_NV(MRc)            \
    if (MASKED_TILES && mt) {   \
        TILE_NV_M(MRc, 1)       \
    } else {                    \
        TILE_NV_M(MRc, 0)       \
    }

static void tile_any(const conv_t *k, int mr, int nv, const lanes_t *mt, const float *src, const long *off,
                     const long *pf, int npf,
                     const float *w, long wos, int kc, float *y, long yos, const float *ys, long yss, int width,
                     int first, int last, const float *b) {
    switch (mr) {  // (the cases past CV_MR are never taken: mr <= CV_MR)
    case 1: TILE_NV(1) break;
    case 2: TILE_NV(2) break;
    case 3: TILE_NV(3) break;
    case 4: TILE_NV(4) break;
    case 5: TILE_NV(CV_MR >= 5 ? 5 : 1) break;
    case 6: TILE_NV(CV_MR >= 6 ? 6 : 1) break;
    case 7: TILE_NV(CV_MR >= 7 ? 7 : 1) break;
    default: TILE_NV(CV_MR) break;
    }
}

// ---------------------------------------------------------------------------------------------- the output

// rows r < mr of a tile (flat pixels f .. f + width, rows ts floats apart) into y (rows yos apart): the columns of
// each flat row that are output pixels
static void scatter(const conv_t *k, const float *t, int ts, int mr, long f, int width, float *y, long yos) {
    long oh = f / k->wq, col = f - oh * k->wq;
    for (int i = 0; i < width;) {
        int run = k->wq - (int)col < width - i ? k->wq - (int)col : width - i;
        int keep = col < k->wo ? (k->wo - (int)col < run ? k->wo - (int)col : run) : 0;
        for (int r = 0; r < mr; r++)
            for (int j = 0; j < keep; j++) y[r * yos + oh * k->wo + col + j] = t[r * ts + i + j];
        i += run, oh++, col = 0;
    }
}

// a masked tile's lanes (flat pixels f .. f + width, FW CV_NV at most) that its left and right taps read inside
// their rows, CV_NV masks each (mt: left, then right): lane i (column ow + i of its row, in runs to each row's end)
// reads column ow + i + d of the same row for the tap's column offset d = -dw, +dw, zeros where that is outside
// [0, wo) (the padding); the middle taps read every lane's own column
static void tile_masks(const conv_t *k, long f, int width, lanes_t *mt) {
#if MASKED_TILES
    int ow0 = (int)(f % k->wo);
    for (int side = 0; side < 2; side++) {
        int d = side ? k->dw : -k->dw;
        uint64_t bits = 0;
        for (int l = 0, ow = ow0; l < width; l += k->wo - ow, ow = 0) {  // (a run: lanes l.. of one row)
            int run = k->wo - ow < width - l ? k->wo - ow : width - l;
            int a = -d - ow > 0 ? -d - ow : 0, e = k->wo - d - ow < run ? k->wo - d - ow : run;
            if (e > a)
                bits |= (e - a >= 64 ? ~0ULL : (1ULL << (e - a)) - 1) << (l + a);
        }
        for (int v = 0; v < CV_NV; v++) mt[side * CV_NV + v] = (lanes_t)(bits >> (FW * v));
    }
#else
    (void)k, (void)f, (void)width, (void)mt;
#endif
}

// output channels [o0, o0 + mr) of group g at flat pixels f .. f + width of unit u over channels
// [c0, c0 + kc): into the accumulator, or for the last block with the bias and activation into y (through a
// tile-sized buffer where its pixels run past a row's end)
static inline void tile_at(const conv_t *k, int g, int c0, int kc, int first, int last, int o0, int mr, int u,
                           long f, int nv, int width, const long *off, const long *pf, int npf,
                           const lanes_t *mt) {
    long wos = (long)k->cg * k->taps, yos = (long)k->ho * k->wo, aos = k->flat_y ? yos : k->flat + 32;
    int n = (int)(u / k->units), o = g * k->og + o0;
    const float *w = k->w + (long)o * wos + (long)c0 * k->taps, *b = k->b ? k->b + o : 0;
    const float *base = k->planes + n * k->image + (long)(g * k->cg + c0) * k->cs;
    float *acc = k->acc + ((long)n * k->o + o) * aos;
    long oh = f / k->wq, col = f - oh * k->wq;
    if (last && !k->flat_y && col + width <= k->wo) {  // the last block, inside a row: to y
        float *yr = k->y + ((long)n * k->o + o) * yos + oh * k->wo + col;
        tile_any(k, mr, nv, mt, base + f, off, pf, npf, w, wos, kc, yr, yos, acc + f, aos, width, first, 1, b);
    } else if (last && !k->flat_y) {  // (across a row's end: to y's rows through tmp)
        float tmp[CV_MR * FW * CV_NV];
        tile_any(k, mr, nv, mt, base + f, off, pf, npf, w, wos, kc, tmp, FW * CV_NV, acc + f, aos, width, first, 1,
                 b);
        scatter(k, tmp, FW * CV_NV, mr, f, width, k->y + ((long)n * k->o + o) * yos, yos);
    } else {
        tile_any(k, mr, nv, mt, base + f, off, pf, npf, w, wos, kc, acc + f, aos, acc + f, aos, width, first, last,
                 b);
    }
}

// floats from a pixel's place in its channel's stride-phase planes to what tap (i, j) reads for it
static inline long tap_offset(const conv_t *k, int i, int j) {
    int dy = i * k->dh, dx = j * k->dw;
    return ((dy % k->sh) * k->sw + dx % k->sw) * k->phase + (long)(dy / k->sh) * k->wq + dx / k->sw;
}

// units [u0, u1) of output channels [oa, ob) of groups [g0, g1) (a block of them where nob > 1, else [0, og))
static void conv_rows(const conv_t *k, int u0, int u1, int oa, int ob, int g0, int g1) {
    long off[MAX_TAPS], pf[MAX_TAPS];
    int npf = 0;
    for (int i = 0; i < k->kh; i++)
        for (int j = 0; j < k->kw; j++) {
            // (a masked tap reads from its pixel's column)
            off[i * k->kw + j] = tap_offset(k, i, j) - (k->pw - k->ppw);
            // pf: a tap per plane row the taps read (a phase's first); none where the tile's lines stay in L1
            if (!k->tile_major && (j * k->dw < k->sw || k->dw % k->sw))
                pf[npf++] = off[i * k->kw + j];
        }
#if MASKED_TILES
    lanes_t masks[MASK_UB][SEG / (FW * CV_NV)][2 * CV_NV];
#else
    lanes_t masks[1][1][1];  // (never read)
#endif
    for (int ub = u0; ub < u1; ub += k->ub) {
        int ue = ub + k->ub < u1 ? ub + k->ub : u1;
        if (k->masked)  // every tile's masks of these units, once
            for (int u = ub; u < ue; u++)
                for (long f0 = (u % k->units) * SEG, f = f0; f < f0 + SEG && f < k->flat; f += FW * CV_NV)
                    tile_masks(k, f, k->flat - f < FW * CV_NV ? (int)(k->flat - f) : FW * CV_NV,
                               masks[u - ub][(f - f0) / (FW * CV_NV)]);
        for (int g = g0; g < g1; g++)
            for (int c0 = 0; c0 < k->cg; c0 += k->kc) {
                int kc = k->cg - c0 < k->kc ? k->cg - c0 : k->kc, first = c0 == 0, last = c0 + kc >= k->cg;
                // blocks of CV_MR output channels: each over the units' tiles in turn, or (tile-major) every block
                // at each tile, while its lines are in L1
                int span = k->tile_major ? ob - oa : CV_MR;
                for (int oo = oa; oo < ob; oo += span) {
                    int oe = ob - oo < span ? ob : oo + span;
                    for (int u = ub; u < ue; u++) {
                        long f0 = (u % k->units) * SEG, f1 = f0 + SEG < k->flat ? f0 + SEG : k->flat;
                        for (long f = f0; f < f1;) {
                            long left = f1 - f;
                            int nv = left >= FW * CV_NV ? CV_NV : (int)(left + FW - 1) / FW;
                            int width = left < FW * nv ? (int)left : FW * nv;
                            const lanes_t *mt = k->masked ? masks[u - ub][(f - f0) / (FW * CV_NV)] : 0;
                            for (int o0 = oo; o0 < oe; o0 += CV_MR)
                                tile_at(k, g, c0, kc, first, last, o0, oe - o0 < CV_MR ? oe - o0 : CV_MR, u, f, nv,
                                        width, off, pf, npf, mt);
                            f += width;
                        }
                    }
                }
            }
    }
}

// ---------------------------------------------------------------------------------------------- pointwise (the page)
#if PAGE
// the tile's multiply-adds in gemm.c's micro-kernel loop: rows r < mr of y (yos apart) at width <= FW pixels (+)=
// sum over kk steps i of a_r[i as] pb[i bs][0:FW] (a pointwise conv's w rows and planes: as = 1, bs = cs), chained
// onto ys's rows (yss apart) unless first; the last block's then take the bias (b) and the activation
// (ember_conv_epilogue). Inlined into micro_pair_rows, a small function whose loop over a pair of tiles V8 unrolls
// this one inside.
static inline __attribute__((always_inline)) void micro(int kk, const float *a0, const float *a1, const float *a2,
                                                        const float *a3, long as, const float *pb, long bs, float *y,
                                                        long yos, const float *ys, long yss, int mr, int width,
                                                        int first, int last, const float *b, int act) {
    fw c0 = fw_zero(), c1 = c0, c2 = c0, c3 = c0;
    if (!first) {
        c0 = fw_load_part(ys, width);
        if (mr > 1) c1 = fw_load_part(ys + yss, width);
        if (mr > 2) c2 = fw_load_part(ys + 2 * yss, width);
        if (mr > 3) c3 = fw_load_part(ys + 3 * yss, width);
    }
    // (f8's halves as eight named vectors, the loop gemm.c's micro-kernel has: V8 unrolls that one)
    v128_t c00 = c0.lo, c01 = c0.hi, c10 = c1.lo, c11 = c1.hi, c20 = c2.lo, c21 = c2.hi, c30 = c3.lo, c31 = c3.hi;
    for (int i = 0; i < kk; i++) {
        v128_t b0 = wasm_v128_load(pb), b1 = wasm_v128_load(pb + 4);
        v128_t w0 = wasm_v128_load32_splat(a0), w1 = wasm_v128_load32_splat(a1);
        v128_t w2 = wasm_v128_load32_splat(a2), w3 = wasm_v128_load32_splat(a3);
        c00 = MADD4(c00, w0, b0); c01 = MADD4(c01, w0, b1);
        c10 = MADD4(c10, w1, b0); c11 = MADD4(c11, w1, b1);
        c20 = MADD4(c20, w2, b0); c21 = MADD4(c21, w2, b1);
        c30 = MADD4(c30, w3, b0); c31 = MADD4(c31, w3, b1);
        a0 += as, a1 += as, a2 += as, a3 += as;
        pb += bs;
    }
    c0.lo = c00, c0.hi = c01, c1.lo = c10, c1.hi = c11, c2.lo = c20, c2.hi = c21, c3.lo = c30, c3.hi = c31;
    fw_store_part(y, c0, width);
    if (mr > 1) fw_store_part(y + yos, c1, width);
    if (mr > 2) fw_store_part(y + 2 * yos, c2, width);
    if (mr > 3) fw_store_part(y + 3 * yos, c3, width);
    if (last && (b || act))
        ember_conv_epilogue(y, yos, mr, width, b, 1, act);
}

// the micro-kernel for output channels o0 .. o0 + mr of group g at flat pixels f .. f + width of image n, as tile_at
// places a tile's rows: into the accumulator, or for the last block with the bias and activation into y
static inline __attribute__((always_inline)) void micro_at(const conv_t *k, int steps, const float *pa, long ars,
                                                           long as, const float *pb, long bs, int n, int g, int o0,
                                                           int mr, long f, int width, int first, int last) {
    // (rows past mr read row 0's weights: their sums are not stored)
    const float *a0 = pa, *a1 = mr > 1 ? pa + ars : pa, *a2 = mr > 2 ? pa + 2 * ars : pa, *a3 = mr > 3 ? pa + 3 * ars : pa;
    long yos = (long)k->ho * k->wo, aos = k->flat_y ? yos : k->flat + 32;
    int o = g * k->og + o0;
    const float *b = k->b ? k->b + o : 0;
    float *acc = k->acc + ((long)n * k->o + o) * aos + f;
    long oh = f / k->wq, col = f - oh * k->wq;
    if (last && !k->flat_y && col + width <= k->wo) {  // the last block, inside a row: to y
        float *yr = k->y + ((long)n * k->o + o) * yos + oh * k->wo + col;
        micro(steps, a0, a1, a2, a3, as, pb, bs, yr, yos, acc, aos, mr, width, first, 1, b, k->act);
    } else if (last && !k->flat_y) {  // (across a row's end: to y's rows through tmp)
        float tmp[CV_MR * FW];
        micro(steps, a0, a1, a2, a3, as, pb, bs, tmp, FW, acc, aos, mr, width, first, 1, b, k->act);
        scatter(k, tmp, FW, mr, f, width, k->y + ((long)n * k->o + o) * yos, yos);
    } else {
        micro(steps, a0, a1, a2, a3, as, pb, bs, acc, aos, acc, aos, mr, width, first, last, b, k->act);
    }
}

// both tiles of a pointwise conv's pair (w1 <= 0: the first alone), its weights read from w's rows (wos apart) and
// its pixels from the planes where they lie (channels cs apart), nothing packed. A function of its own whose only
// loops are these (V8 then unrolls the micro-kernel's, and no caller's values compete for its registers)
static __attribute__((noinline)) void micro_pair_rows(const conv_t *k, int kc, const float *w, long wos,
                                                      const float *x, long cs, int n, int g, int o0, int mr, long f,
                                                      int w0, int w1, int first, int last) {
    for (int h = 0; h < 2 && (h == 0 || w1 > 0); h++)
        micro_at(k, kc, w, wos, 1, x + h * FW, cs, n, g, o0, mr, f + h * FW, h ? w1 : w0, first, last);
}

// conv_rows' tile-major order on the micro-kernel for a pointwise conv: for a block of channels, two tiles' pixels
// read where they lie, then every block of CV_MR output channels over both (its weights read from L1 for the second)
static void conv_rows_pointwise(const conv_t *k, int u0, int u1, int oa, int ob, int g0, int g1) {
    const long cs = k->cs;
    for (int ub = u0; ub < u1; ub += k->ub) {
        int ue = ub + k->ub < u1 ? ub + k->ub : u1;
        for (int g = g0; g < g1; g++)
            for (int c0 = 0; c0 < k->cg; c0 += k->kc) {
                int kc = k->cg - c0 < k->kc ? k->cg - c0 : k->kc, first = c0 == 0, last = c0 + kc >= k->cg;
                for (int u = ub; u < ue; u++) {
                    int n = (int)(u / k->units);
                    const float *base = k->planes + n * k->image + (long)(g * k->cg + c0) * k->cs;
                    long f0 = (u % k->units) * SEG, f1 = f0 + SEG < k->flat ? f0 + SEG : k->flat;
                    for (long f = f0; f < f1; f += 2 * FW) {
                        int w0 = f1 - f < FW ? (int)(f1 - f) : FW;
                        int w1 = f1 - f - FW < FW ? (int)(f1 - f - FW) : FW;  // (<= 0: no second tile)
                        for (int o0 = oa; o0 < ob; o0 += CV_MR)
                            micro_pair_rows(k, kc, k->w + ((long)g * k->og + o0) * k->cg + c0, k->cg, base + f, cs,
                                            n, g, o0, ob - o0 < CV_MR ? ob - o0 : CV_MR, f, w0, w1, first, last);
                    }
                }
            }
    }
}
#endif

// ---------------------------------------------------------------------------------------------- narrow outputs
// An output of at most NARROW pixels an image (a streaming model's conv1d over a few frames: Silero VAD's convolve
// 1-4 frames of 64-258 channels) would fill a tile's 16-48 pixel lanes with one to four pixels, and its planes
// would cost more than its multiply-adds. There each output is a dot product: every pixel's receptive field written
// once as a column (zeros where padding), then each output channel's weight row against each column, 8 lanes at a
// time on every target (f8, whatever FW is: the same partial sums at any vector width), the lanes summed in one
// fixed order, then the bias and the activation as the tile's epilogue applies them.

static void narrow_cols(const conv_t *k) {  // scratch (n, pixels, groups, cg taps rounded up to 8: zeros there)
    long px = (long)k->ho * k->wo, ck = (long)k->cg * k->taps, ck8 = (ck + 7) & ~7L;
    float *col = k->planes;
    for (int n = 0; n < k->n; n++)
        for (long q = 0; q < px; q++) {
            int oh = (int)(q / k->wo), ow = (int)(q % k->wo);
            // (the taps inside the input: [j0, j1) of a row, from each row i inside; the rest zeros)
            int w0 = ow * k->sw - k->pw, j0 = 0, j1 = k->kw;
            while (j0 < k->kw && w0 + j0 * k->dw < 0) j0++;
            while (j1 > j0 && w0 + (j1 - 1) * k->dw >= k->wd) j1--;
            for (int c = 0, in_group = 0; c < k->c; c++) {
                const float *src = k->x + ((long)n * k->c + c) * k->h * k->wd + w0;
                for (int i = 0; i < k->kh; i++) {
                    int ih = oh * k->sh - k->ph + i * k->dh, j = 0;
                    if (ih >= 0 && ih < k->h) {
                        const float *row = src + (long)ih * k->wd;
                        for (; j < j0; j++) *col++ = 0.0f;
                        for (; j < j1; j++) *col++ = row[j * k->dw];
                    }
                    for (; j < k->kw; j++) *col++ = 0.0f;
                }
                if (++in_group == k->cg) {  // (a counter: a division a channel was most of this pass)
                    in_group = 0;
                    for (long e = ck; e < ck8; e++) *col++ = 0.0f;
                }
            }
        }
}

static inline float sum8(f8 v) {
    float t[8];
    f8_store(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// s[e][q0 + q] = w[e][0:len] . col[q][0:len] for R rows e and m <= 4 columns col + q cs (zeros past len up to a
// multiple of 8): R rows at once, so that R m multiply-add chains run side by side and each column vector loaded
// serves R of them (one row's chains wait on the multiply-add's latency). R and m are constants where it is
// inlined: the accumulators live in registers.
static inline __attribute__((always_inline)) void dots(const int R, const int m, const float *const *w,
                                                       const float *col, long cs, long len, float (*s)[NARROW],
                                                       int q0) {
    f8 acc[4][4];
    for (int e = 0; e < R; e++)
        for (int q = 0; q < m; q++) acc[e][q] = f8_zero();
    long i = 0;
    for (; i + 8 <= len; i += 8) {
        f8 x[4];
        for (int q = 0; q < m; q++) x[q] = f8_load(col + q * cs + i);
        for (int e = 0; e < R; e++) {
            f8 u = f8_load(w[e] + i);
            for (int q = 0; q < m; q++) acc[e][q] = f8_madd(acc[e][q], u, x[q]);
        }
    }
    if (i < len) {  // (the weights' rows end here: zeros past them, never their next row times a column's zeros)
        f8 x[4];
        for (int q = 0; q < m; q++) x[q] = f8_load(col + q * cs + i);
        for (int e = 0; e < R; e++) {
            f8 u = f8_load_part(w[e] + i, (int)(len - i));
            for (int q = 0; q < m; q++) acc[e][q] = f8_madd(acc[e][q], u, x[q]);
        }
    }
    int e0 = 0;
#if defined(__AVX2__) && !defined(EMBER_SIMD_SCALAR) && !defined(__wasm__)
    // four rows' sums of a column at once: hadd pairs the lanes as sum8 does (commuted pairs, the same bits);
    // sum8's store and seven scalar adds an output were ~40% of a 129-channel conv over 3 frames
    for (; e0 + 4 <= R; e0 += 4)
        for (int q = 0; q < m; q++) {
            __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[e0][q], acc[e0 + 1][q]),
                                      _mm256_hadd_ps(acc[e0 + 2][q], acc[e0 + 3][q]));
            float t[4];
            _mm_storeu_ps(t, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
            for (int e = 0; e < 4; e++) s[e0 + e][q0 + q] = t[e];
        }
#endif
    for (int e = e0; e < R; e++)
        for (int q = 0; q < m; q++) s[e][q0 + q] = sum8(acc[e][q]);
}

// Rows that read the same columns at once: 4 natively (12-16 accumulators: AVX-512's 32 registers hold 4 x 4, AVX2's
// 16 hold 4 x 3, so 4 columns take 2 rows there), 2 in the page (a wasm f8 is two 128-bit registers)
#if defined(__wasm__)
#define NROWS 2
#define NROWS_4COLS 2
#elif FW == 16
#define NROWS 4
#define NROWS_4COLS 4
#else
#define NROWS 4
#define NROWS_4COLS 2
#endif

#define DOTS_M(R, wr, sr)                                            \
    switch (m) {                                                     \
    case 1: dots(R, 1, wr, cq, colw, ck, sr, q); break;              \
    case 2: dots(R, 2, wr, cq, colw, ck, sr, q); break;              \
    case 3: dots(R, 3, wr, cq, colw, ck, sr, q); break;              \
    default: dots(R, 4, wr, cq, colw, ck, sr, q);                    \
    }

// rows [r0, r1) of (images x output channels), up to NROWS at a time where they read the same columns (one image
// and group); each output's sums are the same either way
static void narrow_rows(const conv_t *k, int r0, int r1) {
    int px = k->ho * k->wo;
    long ck = (long)k->cg * k->taps, ck8 = (ck + 7) & ~7L, colw = k->groups * ck8;
    for (int r = r0; r < r1;) {
        float s[4][NARROW];
        const float *w[4], *cols = 0;
        int rows = 0;
        for (; rows < NROWS && r + rows < r1; rows++) {
            int n = (r + rows) / k->o, o = (r + rows) % k->o;
            const float *c = k->planes + (long)n * px * colw + (o / k->og) * ck8;
            if (rows && c != cols)
                break;
            w[rows] = k->w + o * ck, cols = c;
        }
        for (int q = 0; q < px; q += 4) {
            int m = px - q < 4 ? px - q : 4;
            const float *cq = cols + q * colw;
            for (int e = 0; e < rows;) {  // rows e.. : 4, 2 or 1 at a time
                if (rows - e >= 4 && (m < 4 || NROWS_4COLS == 4)) {
                    DOTS_M(4, w + e, s + e)
                    e += 4;
                } else if (rows - e >= 2) {
                    DOTS_M(2, w + e, s + e)
                    e += 2;
                } else {
                    DOTS_M(1, w + e, s + e)
                    e += 1;
                }
            }
        }
        for (int e = 0; e < rows; e++) {
            int o = (r + e) % k->o;
            fw_store_part(k->y + (long)(r + e) * px, fw_bias_act(fw_load_part(s[e], px), k->b ? k->b + o : 0, k->act),
                          px);
        }
        r += rows;
    }
}

static void narrow_job(const void *arg, int r0, int r1, int thread) {
    (void)thread;
    narrow_rows((const conv_t *)arg, r0, r1);
}

static void planes_job(const void *arg, int u0, int u1, int thread) {  // (parallel.h)
    (void)thread;
    planes_rows((const conv_t *)arg, u0, u1);
}

#if PAGE
int ember_sgemm_rows(int m, int n, int k, const float *a, int rsa, const float *const *rows, float *c, int rsc,
                     float *scratch);

// y's rows [r0, r1) of (images x output channels) from the accumulator's flat pixels (each output row's first wo of
// its wq), then act(y + b) over each
static void gemm_out_rows(const void *arg, int r0, int r1, int thread) {
    const conv_t *k = (const conv_t *)arg;
    long yos = (long)k->ho * k->wo, aos = k->flat + 32;
    (void)thread;
    for (int r = r0; r < r1; r++) {
        float *y = k->y + r * yos;
        scatter(k, k->acc + r * aos, 0, 1, 0, (int)k->flat, y, yos);
        if (k->b || k->act)
            ember_conv_epilogue(y, 0, 1, (int)yos, k->b ? k->b + r % k->o : 0, 0, k->act);
    }
}

// the conv as gemm.c's product per image and group (GEMM_PATH); the planes are made. 0 or PARALLEL_LOST
static int conv_gemm(const conv_t *k) {
    const float **rows = k->brows;
    int kk = k->cg * k->taps;
    long aos = k->flat + 32;
    for (int n = 0; n < k->n; n++)
        for (int g = 0; g < k->groups; g++) {
            const float *base = k->planes + n * k->image + (long)g * k->cg * k->cs;
            for (int c = 0; c < k->cg; c++)
                for (int i = 0; i < k->kh; i++)
                    for (int j = 0; j < k->kw; j++)
                        rows[c * k->taps + i * k->kw + j] = base + c * k->cs + tap_offset(k, i, j);
            int rc = ember_sgemm_rows(k->og, (int)k->flat, kk, k->w + (long)g * k->og * kk, kk, rows,
                                      k->acc + ((long)n * k->o + (long)g * k->og) * aos, (int)aos, k->gemm);
            if (rc)
                return rc;
        }
    int rows_out = k->n * k->o;
    return ember_parallel(gemm_out_rows, k, rows_out, ember_chunks(rows_out, (long)k->ho * k->wo * 8));
}
#endif

// jobs [j0, j1) of (blocks x units), units within a block: a block is OBLOCK output channels of one group (nob > 1),
// one group of several (gsplit), or all
static void conv_job(const void *arg, int j0, int j1, int thread) {
    const conv_t *k = (const conv_t *)arg;
    int units = (int)(k->n * k->units);
    (void)thread;
    for (int j = j0; j < j1;) {
        int b = j / units, u1 = (b + 1) * units < j1 ? units : j1 - b * units;
        int oa = k->gsplit ? 0 : b * OBLOCK, ob = k->gsplit || !(k->nob > 1 && oa + OBLOCK < k->og) ? k->og :
                 oa + OBLOCK;  // (nob 1: b is 0)
        int g0 = k->gsplit ? b : 0, g1 = k->gsplit ? b + 1 : k->groups;
#if PAGE
        (PAGE_POINTWISE(k) ? conv_rows_pointwise : conv_rows)(k, j % units, u1, oa, ob, g0, g1);
#else
        conv_rows(k, j % units, u1, oa, ob, g0, g1);
#endif
        j = b * units + u1;
    }
}

// the whole convolution: the planes, then every output unit, each split between threads (parallel.h). Returns 0,
// -1 for parameters it does not take, or PARALLEL_LOST (the page's pool lost a worker).
EMBER_EXPORT(ember_conv2d)
int ember_conv2d(const intptr_t *p) {
    conv_t k;
    if (setup(p, &k))
        return -1;
    if (k.narrow) {
        narrow_cols(&k);
        int rows = k.n * k.o;
        return ember_parallel(narrow_job, &k, rows, ember_chunks(rows, (long)k.cg * k.taps * k.ho * k.wo));
    }
    int prep = k.n * k.c, units = (int)(k.n * k.units);
    // the planes: a copy (floats, not multiply-adds), threaded from 32k floats in chunks of 16k: ResNet's 64 x 58 x 58
    // planes (218k floats) were copied on one thread, 3% of the convolution on two
    int chunks = ember_chunks_sized(prep, k.image / k.c, 1L << 15, 1L << 14);
    int rc = k.own_planes ? ember_parallel(planes_job, &k, prep, chunks) : 0;
#if PAGE
    if (!rc && k.brows)
        return conv_gemm(&k);
#endif
    int blocks = k.gsplit ? k.groups : k.nob, jobs = units * blocks;
    long per_job = (long)SEG * (k.nob > 1 ? OBLOCK : k.gsplit ? k.og : k.o) * k.cg * k.taps;  // multiply-adds
    return rc ? rc : ember_parallel(conv_job, &k, jobs, ember_chunks(jobs, per_job));
}
