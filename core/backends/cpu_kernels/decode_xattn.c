// One decoded token through an encoder-decoder's decoder (Whisper's) in one call, where the Python path makes ~40
// small tensor ops a layer: the CPU backend's kernel for the registry's `xattn_decoder_plan` op
// (cpu_decode_xattn.py), natively and in the page.
//
// Per layer (pre-norm, LayerNorm with bias, every projection with an optional bias):
//   h = ln1(x);  q, k, v = W_q h + b_q, W_k h + b_k, W_v h + b_v;  k, v written into the cache at `slot`;
//   o = softmax(q K^T scale) V over the cache's first `length` rows;  x += W_o o + b_o
//   h = ln2(x);  q = W_xq h + b_xq;  o = softmax(q X_k^T scale) X_v over the encoder's keys;  x += W_xo o + b_xo
//   h = ln3(x);  x += W_2 act(W_1 h + b_1) + b_2
// then the final LayerNorm. Weights are float32 rows (out, in) or input-major (in, out) with a leading dimension
// (the CPU backend's layout for nn.Linear). Sums run in 8 lanes added in one order, no fused multiply-add, exp is
// fvec.h's: the native and wasm builds give the same bits. The larger matvecs and the attention's heads are
// split between threads by output rows (parallel.h: natively and on the page's pool; the same bits for any split).
#include <stdint.h>

#include "fvec.h"
#include "matvec_f32.h"

#include "parallel.h"

// ---------------------------------------------------------------------------------------------- the plan
enum { X_LAYERS, X_DIM, X_HEADS, X_HEAD_DIM, X_HIDDEN, X_ACT, X_UNUSED, X_NORM_W, X_NORM_B, X_FIELDS };
// a weight: data, layout (0: rows (out, in); -1: input-major, (in, out) rows `lead` floats apart; -2: the same in
// IEEE halves, `lead` halves apart, for weights whose values are all halves), out, in, lead, bias (out,) or 0
enum { W_DATA, W_TYPE, W_ROWS, W_COLS, W_LEAD, W_BIAS, W_FIELDS };
enum {
    L_LN1_W, L_LN1_B, L_LN2_W, L_LN2_B, L_LN3_W, L_LN3_B,
    L_Q, L_K = L_Q + W_FIELDS, L_V = L_K + W_FIELDS, L_O = L_V + W_FIELDS, L_XQ = L_O + W_FIELDS,
    L_XO = L_XQ + W_FIELDS, L_FC1 = L_XO + W_FIELDS, L_FC2 = L_FC1 + W_FIELDS,
    L_KCACHE = L_FC2 + W_FIELDS, L_VCACHE, L_CAPACITY, L_SLOT, L_LENGTH,  // (heads, capacity, head_dim) float32
    L_XK, L_XV, L_XLEN,                                                 // (heads, keys, head_dim) float32
    L_FIELDS
};
enum { F_EPS, F_SCALE, F_FIELDS };
#define INPUT_MAJOR (-1)
#define INPUT_MAJOR_F16 (-2)

// ---------------------------------------------------------------------------------------------- helpers

static float sum8(f8 v) {
    float l[8];
    f8_store(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static float dot(const float *a, const float *b, int n) {  // n a multiple of 8
    f8 acc = f8_zero();
    for (int i = 0; i < n; i += 8)
        acc = f8_add(acc, f8_mul(f8_load(a + i), f8_load(b + i)));
    return sum8(acc);
}

static void layer_norm(const float *x, const float *w, const float *b, float eps, int n, float *y) {
    f8 s = f8_zero();
    for (int i = 0; i < n; i += 8) s = f8_add(s, f8_load(x + i));
    float inv_n = 1.0f / (float)n, mu = sum8(s) * inv_n;
    f8 mv = f8_splat(mu), q = f8_zero();
    for (int i = 0; i < n; i += 8) {
        f8 d = f8_sub(f8_load(x + i), mv);
        q = f8_add(q, f8_mul(d, d));
    }
    float sd = __builtin_sqrtf(sum8(q) * inv_n + eps);
    for (int i = 0; i < n; i++) {
        float v = (x[i] - mu) / sd;
        v = w ? v * w[i] : v;
        y[i] = b ? v + b[i] : v;
    }
}

typedef struct {
    const intptr_t *w;
    const float *x;
    float *y;
    float *part;  // (SEG_INPUTS units, rows) partial sums of a weight split by inputs
} matvec_t;

// y[o0:o1] = W x (+ b) for output rows [o0, o1)
static void matvec_rows(const void *arg, int o0, int o1) {
    const matvec_t *m = (const matvec_t *)arg;
    const intptr_t *w = m->w;
    const float *data = (const float *)w[W_DATA], *bias = (const float *)w[W_BIAS], *x = m->x;
    int cols = (int)w[W_COLS];
    float *y = m->y;
    if (w[W_TYPE] == INPUT_MAJOR) {  // y = sum_i x[i] W^T[i, :], inputs in order
        matvec_f32_input_major(data, (long)w[W_LEAD], x, cols, y, o0, o1);
    } else if (w[W_TYPE] == INPUT_MAJOR_F16) {  // the same sums (every half is a float): the same bits
        matvec_f16_input_major((const uint16_t *)w[W_DATA], (long)w[W_LEAD], x, cols, y, o0, o1);
    } else {
        for (int o = o0; o < o1; o++) y[o] = dot(data + (long)o * cols, x, cols);
    }
    if (bias)
        for (int o = o0; o < o1; o++) y[o] += bias[o];
}

static void matvec_blocks(const void *arg, int b0, int b1, int thread) {  // in blocks of 8 outputs (parallel.h)
    int rows = (int)((const matvec_t *)arg)->w[W_ROWS];
    (void)thread;
    matvec_rows(arg, 8 * b0, 8 * b1 < rows ? 8 * b1 : rows);
}

// An input-major weight large enough for threads is split by inputs (matvec_f32.h's MATVEC_SEG_INPUTS)
#define SEG_INPUTS MATVEC_SEG_INPUTS

static void matvec_segments(const void *arg, int s0, int s1, int thread) {  // (parallel.h)
    const matvec_t *m = (const matvec_t *)arg;
    const intptr_t *w = m->w;
    int rows = (int)w[W_ROWS], cols = (int)w[W_COLS];
    (void)thread;
    for (int s = s0; s < s1; s++) {
        int i0 = s * SEG_INPUTS, n = cols - i0 < SEG_INPUTS ? cols - i0 : SEG_INPUTS;
        long at = (long)i0 * w[W_LEAD];
        float *p = m->part + (long)s * rows;
        if (w[W_TYPE] == INPUT_MAJOR)
            matvec_f32_input_major((const float *)w[W_DATA] + at, w[W_LEAD], m->x + i0, n, p, 0, rows);
        else
            matvec_f16_input_major((const uint16_t *)w[W_DATA] + at, w[W_LEAD], m->x + i0, n, p, 0, rows);
    }
}

static long segments(const intptr_t *w) {  // an input-major weight's units split by inputs
    return w[W_TYPE] == INPUT_MAJOR || w[W_TYPE] == INPUT_MAJOR_F16 ? (w[W_COLS] + SEG_INPUTS - 1) / SEG_INPUTS : 0;
}

// A step's jobs are split from PARALLEL_STEP_MIN_WORK multiply-adds (parallel.h), in chunks of ~XATTN_CHUNK_WORK:
// tiny's 384 x 384 projections (q, k, v, o and the cross-attention's q and o, half a step's multiply-adds) in 2
// chunks each. (At PARALLEL_MIN_WORK they stayed on the calling thread, from when a worker slept between jobs and
// ~40 hand-offs a token cost more than they saved; tiny.en's step in the page then took 0.9x the time on two
// threads.) Functions of the job alone.
#define XATTN_CHUNK_WORK (1L << 16)

// 0, or PARALLEL_LOST. A block's work is its multiply-adds.
static int matvec(const intptr_t *w, const float *x, float *y, float *part) {
    matvec_t m = {w, x, y, part};
    int rows = (int)w[W_ROWS], segs = (int)segments(w);
    int chunks = segs ? ember_chunks_sized(segs, (long)SEG_INPUTS * rows, PARALLEL_STEP_MIN_WORK, XATTN_CHUNK_WORK) : 1;
    if (chunks > 1) {
        int rc = ember_parallel(matvec_segments, &m, segs, chunks);
        matvec_sum_partials(part, segs, rows, (const float *)w[W_BIAS], y);
        return rc;
    }
    int blocks = (rows + 7) / 8;
    return ember_parallel(matvec_blocks, &m, blocks,
                          ember_chunks_sized(blocks, 8L * w[W_COLS], PARALLEL_STEP_MIN_WORK, XATTN_CHUNK_WORK));
}

// ---------------------------------------------------------------------------------------------- attention

typedef struct {
    const float *q, *k, *v;
    float *o, *scratch;
    long head_stride;  // floats from one head's keys to the next
    int hd, length, scratch_per_head;
    float scale;
} attend_t;

// o[h] = softmax(q[h] K[h]^T scale) V[h] over `length` keys, for heads [h0, h1)
static void attend_heads(const void *arg, int h0, int h1) {
    const attend_t *a = (const attend_t *)arg;
    int hd = a->hd, n = a->length;
    for (int h = h0; h < h1; h++) {
        const float *q = a->q + (long)h * hd, *K = a->k + h * a->head_stride, *V = a->v + h * a->head_stride;
        float *s = a->scratch + (long)h * a->scratch_per_head, *o = a->o + (long)h * hd;
        float m = -__builtin_inff();
        for (int j = 0; j < n; j++) {
            s[j] = dot(q, K + (long)j * hd, hd) * a->scale;
            m = s[j] > m ? s[j] : m;
        }
        f8 mv = f8_splat(m), total = f8_zero();
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            f8 e = f8_exp(f8_sub(f8_load(s + j), mv));
            f8_store(s + j, e);
            total = f8_add(total, e);
        }
        if (j < n) {
            f8 e = f8_exp(f8_sub(f8_load_part(s + j, n - j), mv));
            float t[8];
            f8_store(t, e);
            for (int l = n - j; l < 8; l++) t[l] = 0.0f;  // lanes past the keys add nothing
            f8_store_part(s + j, e, n - j);
            total = f8_add(total, f8_load(t));
        }
        float sum = sum8(total);
        for (int i = 0; i < hd; i++) o[i] = 0.0f;
        for (int jj = 0; jj < n; jj++) {
            float p = s[jj];
            const float *vj = V + (long)jj * hd;
            for (int i = 0; i < hd; i++) o[i] += p * vj[i];
        }
        for (int i = 0; i < hd; i++) o[i] /= sum;
    }
}

static void attend_job(const void *arg, int h0, int h1, int thread) {  // (parallel.h)
    (void)thread;
    attend_heads(arg, h0, h1);
}

static int attend(attend_t *a, int heads) {  // 0, or PARALLEL_LOST
    return ember_parallel(attend_job, a, heads, ember_step_chunks_each(heads, 4L * a->length * a->hd));
}

// ---------------------------------------------------------------------------------------------- the step

static long partial_floats(const intptr_t *plan) {  // matvec's partial sums for the plan's largest split weight
    long most = 0;
    const intptr_t *layer = plan + X_FIELDS;
    for (long l = 0; l < plan[X_LAYERS]; l++, layer += L_FIELDS)
        for (int w = L_Q; w <= L_FC2; w += W_FIELDS) {
            long floats = segments(layer + w) * layer[w + W_ROWS];
            most = floats > most ? floats : most;
        }
    return most;
}

static int max_keys(const intptr_t *plan) {
    long most = 0;
    const intptr_t *layer = plan + X_FIELDS;
    for (long l = 0; l < plan[X_LAYERS]; l++, layer += L_FIELDS) {
        most = layer[L_LENGTH] > most ? layer[L_LENGTH] : most;
        most = layer[L_XLEN] > most ? layer[L_XLEN] : most;
    }
    return (int)most;
}

// bytes of scratch ember_xattn_decode needs for at most max_keys keys (self or cross) a head
EMBER_EXPORT(ember_xattn_decode_scratch_bytes)
long ember_xattn_decode_scratch_bytes(const intptr_t *plan, int max_keys_) {
    long dim = plan[X_DIM], qd = plan[X_HEADS] * plan[X_HEAD_DIM];
    long floats = 2 * dim + 4 * qd + plan[X_HIDDEN] + plan[X_HEADS] * ((long)max_keys_ + 8) + partial_floats(plan) + 64;
    return floats * 4 + 64;
}

// x (dim) through every layer and the final norm, in place. Returns 0, -1 for a plan it cannot run (sizes
// not multiples of 8, a weight type it does not read), or PARALLEL_LOST (the page's pool lost a worker).
EMBER_EXPORT(ember_xattn_decode)
int ember_xattn_decode(const intptr_t *plan, const float *fparams, float *x, void *scratch) {
    int dim = (int)plan[X_DIM], heads = (int)plan[X_HEADS], hd = (int)plan[X_HEAD_DIM];
    int hidden = (int)plan[X_HIDDEN], act = (int)plan[X_ACT], rc = 0;
    float eps = fparams[F_EPS], scale = fparams[F_SCALE];
    if (dim % 8 || hd % 8 || hidden % 8 || heads * hd != dim)
        return -1;
    for (long l = 0; l < plan[X_LAYERS]; l++)
        for (int w = L_Q; w <= L_FC2; w += W_FIELDS) {
            const intptr_t *f = plan + X_FIELDS + l * L_FIELDS + w;
            if ((f[W_TYPE] != 0 && f[W_TYPE] != INPUT_MAJOR && f[W_TYPE] != INPUT_MAJOR_F16) || f[W_COLS] % 8)
                return -1;
        }
    float *h = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *a = h + dim, *q = a + dim, *k = q + dim, *v = k + dim, *o = v + dim, *g = o + dim;
    float *scores = g + hidden;
    int stride = max_keys(plan) + 8;
    float *part = scores + (long)heads * stride;
    const intptr_t *layer = plan + X_FIELDS;
    for (long l = 0; l < plan[X_LAYERS]; l++, layer += L_FIELDS) {
        // self-attention
        layer_norm(x, (const float *)layer[L_LN1_W], (const float *)layer[L_LN1_B], eps, dim, h);
        rc |= matvec(layer + L_Q, h, q, part);
        rc |= matvec(layer + L_K, h, k, part);
        rc |= matvec(layer + L_V, h, v, part);
        int cap = (int)layer[L_CAPACITY], slot = (int)layer[L_SLOT];
        float *kc = (float *)layer[L_KCACHE], *vc = (float *)layer[L_VCACHE];
        for (int i = 0; i < heads; i++)
            for (int j = 0; j < hd; j++) {
                kc[((long)i * cap + slot) * hd + j] = k[(long)i * hd + j];
                vc[((long)i * cap + slot) * hd + j] = v[(long)i * hd + j];
            }
        attend_t self = {q, kc, vc, o, scores, (long)cap * hd, hd, (int)layer[L_LENGTH], stride, scale};
        rc |= attend(&self, heads);
        rc |= matvec(layer + L_O, o, a, part);
        for (int i = 0; i < dim; i++) x[i] += a[i];
        // cross-attention over the encoder's keys and values
        layer_norm(x, (const float *)layer[L_LN2_W], (const float *)layer[L_LN2_B], eps, dim, h);
        rc |= matvec(layer + L_XQ, h, q, part);
        int keys = (int)layer[L_XLEN];
        attend_t cross = {q, (const float *)layer[L_XK], (const float *)layer[L_XV], o, scores, (long)keys * hd, hd,
                          keys, stride, scale};
        rc |= attend(&cross, heads);
        rc |= matvec(layer + L_XO, o, a, part);
        for (int i = 0; i < dim; i++) x[i] += a[i];
        // MLP
        layer_norm(x, (const float *)layer[L_LN3_W], (const float *)layer[L_LN3_B], eps, dim, h);
        rc |= matvec(layer + L_FC1, h, g, part);
        act_row(g, hidden, 0.0f, act);
        rc |= matvec(layer + L_FC2, g, a, part);
        for (int i = 0; i < dim; i++) x[i] += a[i];
    }
    if (plan[X_NORM_W] || plan[X_NORM_B])
        layer_norm(x, (const float *)plan[X_NORM_W], (const float *)plan[X_NORM_B], eps, dim, x);
    return rc ? PARALLEL_LOST : 0;
}
