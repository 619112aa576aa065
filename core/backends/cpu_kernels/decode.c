// One decoded token through a stack of transformer layers on the CPU, in one call: what models/common's decoder
// blocks compute for T = 1, without a Python call (and a numpy pass over a few hundred floats) per step of it.
// In Python a decoded token of Gemma 3 270M is ~700 small ops (~20 ms natively, ~30 ms in the page) around its
// ~130 matmuls; here it is one call per token.
//
// Per layer (a pre-norm block; with post norms, Gemma's sandwich):
//   h = rms(x) w_attn;  q, k, v = W_q h, W_k h, W_v h;  q, k = rms per head (Gemma 3's q/k norms), then rope;
//   k, v written into the cache at `slot`;  o = softmax(q K^T scale) V over the cache's first `length` rows;
//   a = W_o o (then rms(a) w_attn_post);  x += a;  h = rms(x) w_ffn;  m = act(W_gate h) * W_up h;
//   a = W_down m (then rms(a) w_ffn_post);  x += a
// The matmuls are q8dot.c's (llama.cpp's 8-bit activations; one quantization of h serves q, k and v, one gate
// and up) or float32 rows. Sums run in 8 fixed lanes, exp and tanh are written here with plain float operations:
// the native and wasm builds give the same bits (and differ from the Python path by float rounding only).
// Every matvec's output rows and attention's heads are split between threads (parallel.h: the native workers,
// the page's kernel pool); each row and head is computed alike on any thread, so any thread count gives the same bits.
// Freestanding: no libc; the caller passes every buffer (ember_decode_scratch_bytes).
#include <stdint.h>

#include "matvec_f32.h"
#include "parallel.h"
#include "simd.h"

long ember_q8_act_bytes(int type, int m, int k);
int ember_q8_act_kind(int type);
int ember_q8_quantize(int type, int m, int k, const float *x, int ldx, void *act);
int ember_q8_dot(int type, int m, int n, int k, const uint8_t *w, const void *act, float *y, int ldy);

// ---------------------------------------------------------------------------------------------- the plan
// intptr_t fields, filled by the caller (core/backends/cpu_decode.py): a header, then one record per layer.
enum { H_LAYERS, H_DIM, H_HEADS, H_KV_HEADS, H_HEAD_DIM, H_HIDDEN, H_ACT, H_UNUSED,
       H_FINAL_NORM,  // float32 (dim,) of the model's final RMSNorm, applied after the last layer, or 0
       H_FIELDS };
enum { H_ACT_GELU_TANH, H_ACT_SILU };  // H_ACT: the feed-forward's activation
// a weight (rows = outputs, columns = inputs): data, its GGML type (0: float32 (rows, columns); -1: float32 stored
// input-major, (columns, rows), the CPU backend's layout for a float nn.Linear; -2: float32 in blocks of 16 outputs,
// matvec_f32.h's (ceil(rows / 16), columns, 16)), rows, columns, and bytes a row of blocks (-1: the floats from one
// input's row to the next, the rows of q, k, v stacked in one matrix; -2: unused)
enum { W_DATA, W_TYPE, W_ROWS, W_COLS, W_ROW_BYTES, W_FIELDS };
enum {
    L_NORM_ATTN, L_NORM_ATTN_POST, L_NORM_FFN, L_NORM_FFN_POST, L_NORM_Q, L_NORM_K,  // float32 (n,) or 0
    L_Q, L_K = L_Q + W_FIELDS, L_V = L_K + W_FIELDS, L_O = L_V + W_FIELDS, L_GATE = L_O + W_FIELDS,
    L_UP = L_GATE + W_FIELDS, L_DOWN = L_UP + W_FIELDS,
    L_ROPE = L_DOWN + W_FIELDS,  // which (cos, sin) table of the call the layer rotates with
    L_KCACHE, L_VCACHE,          // float32 (n_kv_heads, capacity, head_dim), written at row L_SLOT
    L_CAPACITY, L_SLOT, L_LENGTH,  // attention reads rows [0, L_LENGTH)
    L_FIELDS
};
enum { F_EPS, F_SCALE, F_FIELDS };  // float parameters: the norms' epsilon, the attention scale
#define F32_TYPE 0
#define F32_INPUT_MAJOR (-1)
#define F32_BLOCKED (-2)

// ---------------------------------------------------------------------------------------------- float helpers

static float sum_lanes(const float *p) { return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])); }

// sum of a[i] b[i]: 8 lanes (i % 8), then added as sum_lanes; n a multiple of 8
static float dot(const float *a, const float *b, int n) {
    f8 acc = f8_zero();
    for (int i = 0; i < n; i += 8)
        acc = f8_add(acc, f8_mul(f8_load(a + i), f8_load(b + i)));
    float lanes[8];
    f8_store(lanes, acc);
    return sum_lanes(lanes);
}

// y = x / sqrt(mean(x^2) + eps) * w (ember's rms_norm: the same steps, float32); y may be x
static void rms_norm(const float *x, const float *w, float eps, int n, float *y) {
    float ms = dot(x, x, n) * (1.0f / (float)n) + eps, r = __builtin_sqrtf(ms);
    for (int i = 0; i < n; i++)
        y[i] = x[i] / r * w[i];
}

// exp(x) (Cephes expf, elementwise.c's): x = m ln2 + r, a degree-7 polynomial for e^r, 2^m in the exponent bits.
// ~2 ulp; below -87.3 exp(-87.3), above 88.7 inf, NaN stays NaN.
static float expf_(float x) {
    if (x > 88.7228390f)
        return __builtin_inff();
    x = x < -87.3365448f ? -87.3365448f : x;
    float m = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - m * 0.693359375f;
    r = r - m * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)m + 127) << 23;
    float e;
    __builtin_memcpy(&e, &bits, 4);
    return p * e;
}

static float tanhf_(float x) {  // Cephes tanhf: a polynomial near 0, 1 - 2 / (e^2|x| + 1) beyond, ~2 ulp
    float a = x < 0 ? -x : x;
    if (a > 0.625f) {
        float t = 1.0f - 2.0f / (expf_(2.0f * a) + 1.0f);
        return x < 0 ? -t : t;
    }
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    return p * z * x + x;
}

// g = gelu_tanh(g) * u (ember's _gelu_tanh steps), 8 at a time with fvec.h's f8_gelu_tanh: tanhf_'s and expf_'s
// steps lane for lane, both of tanhf_'s branches computed and one kept (the same bits; scalar, its data-dependent
// branch and division took Gemma 3's 2048 outputs a layer ~20 us a thread in the page)
static void gelu_tanh_mul(float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        f8_store(g + i, f8_mul(f8_gelu_tanh(f8_load(g + i)), f8_load(u + i)));
    for (; i < n; i++) {
        float x = g[i];
        float t = tanhf_((x + 0.044715f * x * x * x) * 0.7978845608028654f);
        g[i] = (t + 1.0f) * x * 0.5f * u[i];
    }
}

static void silu_mul(float *g, const float *u, int n) {  // g = g / (1 + exp(-g)) * u (8 at a time: f8_silu)
    int i = 0;
    for (; i + 8 <= n; i += 8)
        f8_store(g + i, f8_mul(f8_silu(f8_load(g + i)), f8_load(u + i)));
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf_(-g[i])) * u[i];
}

// ---------------------------------------------------------------------------------------------- matmuls

// A float32 weight's rows are split between threads in blocks of F32_UNIT outputs. Not 8: two threads then shared
// cache lines of y (and of an input-major weight's rows) at every cut, and the stories15M shape's step ran 3x
// slower on two threads than on one.
#define F32_UNIT 64
// The step's input-major float32 weights are split by inputs instead (matvec_f32.h's MATVEC_SEG_INPUTS: 1.2-1.4x on
// two threads for the stories15M shape). An LM head, ember_matvec_f32, is split by outputs: its bands are hundreds
// of outputs wide.
#define SEG_INPUTS MATVEC_SEG_INPUTS

typedef struct {
    int type, rows, cols;
    long lead;  // bytes of a row of blocks, or (input-major float32) floats from one input's row to the next
    const uint8_t *data;
    const float *x;
    const void *act;
    float *y;
    float *part;  // split by inputs: (units, rows) partial sums; 0: split by outputs
    int seg;      // a blocked weight's segments of inputs (SEG_INPUTS in a step, as the input-major split sums)
} matvec_job;

// y[o0:o1] of a float32 weight: rows (a dot each) or input-major (y = sum_i x[i] W^T[i, :], inputs in order: no
// reduction across lanes); each output computed alike whichever range holds it
static void f32_rows(const matvec_job *j, int o0, int o1) {
    if (j->type == F32_BLOCKED) {
        matvec_f32_blocked((const float *)j->data, j->cols, j->seg, j->x, j->y, o0, o1, j->rows);
    } else if (j->type == F32_TYPE) {
        for (int o = o0; o < o1; o++)
            j->y[o] = dot((const float *)j->data + (long)o * j->cols, j->x, j->cols);
    } else if (j->cols % 8 == 0) {
        matvec_f32_input_major((const float *)j->data, j->lead, j->x, j->cols, j->y, o0, o1);
    } else {
        const float *wt = (const float *)j->data;
        for (int o = o0; o < o1; o++)
            j->y[o] = 0.0f;
        for (int i = 0; i < j->cols; i++) {
            float xi = j->x[i];
            const float *wi = wt + (long)i * j->lead;
            for (int o = o0; o < o1; o++)
                j->y[o] += xi * wi[o];
        }
    }
}

// y[r0:r1] (parallel.h): a float32 weight's rows in blocks of F32_UNIT outputs, a quantized one's rows
static void matvec_rows(const void *p, int r0, int r1, int thread) {
    const matvec_job *j = (const matvec_job *)p;
    (void)thread;
    if (j->part) {
        for (int s = r0; s < r1; s++) {
            int i0 = s * SEG_INPUTS, n = j->cols - i0 < SEG_INPUTS ? j->cols - i0 : SEG_INPUTS;
            matvec_f32_input_major((const float *)j->data + (long)i0 * j->lead, j->lead, j->x + i0, n,
                                   j->part + (long)s * j->rows, 0, j->rows);
        }
    } else if (j->type <= F32_TYPE) {
        int o1 = F32_UNIT * r1 < j->rows ? F32_UNIT * r1 : j->rows;
        f32_rows(j, F32_UNIT * r0, o1);
    } else {
        ember_q8_dot(j->type, 1, r1 - r0, j->cols, j->data + (long)r0 * j->lead, j->act, j->y + r0, j->rows);
    }
}

// Chunks of ~128k multiply-adds, from PARALLEL_STEP_MIN_WORK in all (parallel.h): on a host whose core streams
// SmolLM2's Q4_1 step in ~4 ms, chunks of 32k (~100 a layer, two claims of a shared cache line each) made two threads
// slower than one (4.7 against 4.2 ms); 64k took 3.1 ms, 128k 2.6, 512k 3.3. A function of the job alone, as
// ember_chunks.
#define DECODE_CHUNK_WORK (1L << 17)

#define MAX_MATVECS 3
// Up to 3 weights' products with one input as one job: units (a quantized weight's rows, a float32 weight's
// blocks of F32_UNIT rows) of the first weight, then the second's, ... Paired (gate and up, alike in rows and units):
// unit i is row (block) i of both, and the chunk then computes g = act(g) * u over its rows.
typedef struct {
    int n, pair;            // pair: 1 + H_ACT_* of a gate-up pair, 0: none
    int first[MAX_MATVECS + 1];  // the unit where weight i starts; first[n]: the job's units
    matvec_job w[MAX_MATVECS];
} matvecs_job;

static void matvecs_rows(const void *p, int r0, int r1, int thread) {
    const matvecs_job *m = (const matvecs_job *)p;
    if (m->pair) {
        matvec_rows(&m->w[0], r0, r1, thread);
        matvec_rows(&m->w[1], r0, r1, thread);
        int o0 = r0, o1 = r1;
        if (m->w[0].type <= F32_TYPE) {
            o0 = F32_UNIT * r0;
            o1 = F32_UNIT * r1 < m->w[0].rows ? F32_UNIT * r1 : m->w[0].rows;
        }
        if (m->pair - 1 == H_ACT_SILU)
            silu_mul(m->w[0].y + o0, m->w[1].y + o0, o1 - o0);
        else
            gelu_tanh_mul(m->w[0].y + o0, m->w[1].y + o0, o1 - o0);
        return;
    }
    for (int i = 0; i < m->n; i++) {
        int a = r0 > m->first[i] ? r0 : m->first[i], b = r1 < m->first[i + 1] ? r1 : m->first[i + 1];
        if (a < b)
            matvec_rows(&m->w[i], a - m->first[i], b - m->first[i], thread);
    }
}

static int split_by_inputs(const intptr_t *w) {  // an input-major float32 weight's units (SEG_INPUTS), else 0
    return w[W_TYPE] == F32_INPUT_MAJOR && w[W_COLS] % 8 == 0 ? (int)((w[W_COLS] + SEG_INPUTS - 1) / SEG_INPUTS) : 0;
}

// ys[i] (rows) = W_i x for n <= 3 weights (W_FIELDS records at ws[i]), one job; x quantized once per activation kind
// (q8dot.c's kinds: q, k and v of one type share one), into act's slots of act_bytes; input-major float32 weights
// split by inputs into `part` (0: by outputs). pair: 1 + H_ACT_* to compute ys[0] = act(W_0 x) * W_1 x (gate and up),
// in the job's chunks where the two weights allow it (else after the job); ~chunk_work multiply-adds a chunk. 0, or
// PARALLEL_LOST.
static int matvecs(const intptr_t *const *ws, int n, int pair, const float *x, float *const *ys, uint8_t *act,
                   long act_bytes, float *part, long chunk_work) {
    matvecs_job m = {n, 0, {0}, {{0}}};
    int kinds[MAX_MATVECS], units = 0;
    long work = 0;
    for (int i = 0; i < n; i++) {
        const intptr_t *w = ws[i];
        int type = (int)w[W_TYPE], rows = (int)w[W_ROWS], cols = (int)w[W_COLS];
        const void *a = 0;
        kinds[i] = type > F32_TYPE ? ember_q8_act_kind(type) : -1;
        if (kinds[i] >= 0) {
            int slot = 0;
            while (slot < i && kinds[slot] != kinds[i])
                slot++;
            a = act + slot * act_bytes;
            if (slot == i)
                ember_q8_quantize(type, 1, cols, x, cols, act + slot * act_bytes);
        }
        int segs = part ? split_by_inputs(w) : 0;
        m.w[i] = (matvec_job){type, rows, cols, (long)w[W_ROW_BYTES], (const uint8_t *)w[W_DATA], x, a, ys[i],
                              segs ? part : 0, part ? SEG_INPUTS : cols};
        part += (long)segs * rows;
        // a float32 row is 4x a q8 row's bytes: threads pay off sooner
        int u = segs ? segs : type <= F32_TYPE ? (rows + F32_UNIT - 1) / F32_UNIT : rows;
        work += segs ? 4L * SEG_INPUTS * rows * u : type <= F32_TYPE ? 4L * F32_UNIT * cols * u : (long)cols * u;
        m.first[i] = units;
        units += u;
    }
    m.first[n] = units;
    int paired = pair && n == 2 && m.w[0].rows == m.w[1].rows && (m.w[0].type <= F32_TYPE) == (m.w[1].type <= F32_TYPE)
                 && !m.w[0].part && !m.w[1].part;
    if (paired) {
        m.pair = pair;
        units = m.first[1];
    }
    int chunks = ember_chunks_sized(units, (work + units - 1) / units, PARALLEL_STEP_MIN_WORK, chunk_work);
    if (chunks > 1 && chunks % 2 && chunks < units)
        chunks++;
    int rc = ember_parallel(matvecs_rows, &m, units, chunks);
    for (int i = 0; i < n; i++) {  // y = the partial sums of a weight split by inputs
        const matvec_job *j = &m.w[i];
        if (!j->part)
            continue;
        matvec_sum_partials(j->part, m.first[i + 1] - m.first[i], j->rows, 0, j->y);
    }
    if (pair && !paired) {
        if (pair - 1 == H_ACT_SILU)
            silu_mul(ys[0], ys[1], m.w[0].rows);
        else
            gelu_tanh_mul(ys[0], ys[1], m.w[0].rows);
    }
    return rc;
}

// ---------------------------------------------------------------------------------------------- attention

// rotate-half rope of one head: x1, x2 = halves; x1 c - x2 s, x2 c + x1 s
static void rope(float *x, const float *cs, int hd) {
    int half = hd / 2;
    const float *c = cs, *s = cs + half;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}

typedef struct {
    const float *q, *kc, *vc;
    int group, hd, cap, length;
    float scale;
    float *work;  // per thread: qs (hd floats) then scores (length), `stride` floats apart
    long stride;
    float *o;
} attend_job;

// o[h] = softmax(q_h K^T scale) V for heads [h0, h1), over the first `length` rows of each one's kv head's cache
// (`group` query heads share one) (parallel.h)
static void attend_heads(const void *p, int h0, int h1, int thread) {
    const attend_job *j = (const attend_job *)p;
    int hd = j->hd;
    float *qs = j->work + thread * j->stride, *scores = qs + hd;
    for (int h = h0; h < h1; h++) {
        const float *K = j->kc + (long)(h / j->group) * j->cap * hd, *V = j->vc + (long)(h / j->group) * j->cap * hd;
        for (int i = 0; i < hd; i++)
            qs[i] = j->q[(long)h * hd + i] * j->scale;
        float m = -__builtin_inff();
        for (int r = 0; r < j->length; r++) {
            scores[r] = dot(qs, K + (long)r * hd, hd);
            m = scores[r] > m ? scores[r] : m;
        }
        float *oh = j->o + (long)h * hd, total = 0.0f;
        for (int i = 0; i < hd; i++)
            oh[i] = 0.0f;
        int r = 0;  // the exponentials first, 8 at a time (f8_exp: expf_'s steps lane for lane), in place
        for (; r + 8 <= j->length; r += 8)
            f8_store(scores + r, f8_exp(f8_sub(f8_load(scores + r), f8_splat(m))));
        for (; r < j->length; r++)
            scores[r] = expf_(scores[r] - m);
        for (int r = 0; r < j->length; r++) {
            float e = scores[r];
            total += e;
            const float *vr = V + (long)r * hd;
            for (int i = 0; i < hd; i++)
                oh[i] += e * vr[i];
        }
        for (int i = 0; i < hd; i++)
            oh[i] /= total;
    }
}

// ---------------------------------------------------------------------------------------------- the step

static long max_act_bytes(const intptr_t *plan) {
    long most = 0;
    const intptr_t *layer = plan + H_FIELDS;
    for (long l = 0; l < plan[H_LAYERS]; l++, layer += L_FIELDS)
        for (int w = L_Q; w <= L_DOWN; w += W_FIELDS) {
            int type = (int)layer[w + W_TYPE];
            long b = type <= F32_TYPE ? 0 : ember_q8_act_bytes(type, 1, (int)layer[w + W_COLS]);
            most = b > most ? b : most;
        }
    return (most + 63) & ~63L;  // one slot of the activations (matvecs), 64-byte aligned
}

static long partial_floats(const intptr_t *plan) {  // the partial sums of the step's largest job (matvecs)
    static const int jobs[][3] = {{L_Q, L_K, L_V}, {L_O, 0, 0}, {L_GATE, L_UP, 0}, {L_DOWN, 0, 0}};
    long most = 0;
    const intptr_t *layer = plan + H_FIELDS;
    for (long l = 0; l < plan[H_LAYERS]; l++, layer += L_FIELDS)
        for (int j = 0; j < 4; j++) {
            long floats = 0;
            for (int i = 0; i < 3 && (i == 0 || jobs[j][i]); i++)
                floats += (long)split_by_inputs(layer + jobs[j][i]) * layer[jobs[j][i] + W_ROWS];
            most = floats > most ? floats : most;
        }
    return (most + 15) & ~15L;
}

static long per_thread_floats(const intptr_t *plan, long max_length) {  // attention's qs and scores, 64-byte aligned
    return (plan[H_HEAD_DIM] + max_length + 15) & ~15L;
}

// y (rows) = W x for a float32 W stored input-major, W^T (cols, rows) rows `lead` floats apart, cols a multiple of
// 8: the CPU backend's row-vector product with a large re-stored weight (an LM head), by the decode step's matvecs
// (split between threads by blocks of F32_UNIT outputs; the same bits for any count). -1 for cols not a multiple
// of 8, or PARALLEL_LOST.
EMBER_EXPORT(ember_matvec_f32)
int ember_matvec_f32(const float *wt, long lead, int rows, int cols, const float *x, float *y) {
    if (cols % 8 != 0)
        return -1;
    intptr_t w[W_FIELDS] = {(intptr_t)wt, F32_INPUT_MAJOR, rows, cols, lead};
    const intptr_t *ws[1] = {w};
    return matvecs(ws, 1, 0, x, &y, 0, 0, 0, MATVEC_HEAD_CHUNK_WORK);  // (by outputs: a head's bands are thousands wide)
}

// ember_matvec_f32's product from the weight's copy in blocks of 16 outputs (wb (ceil(rows / 16), cols, 16),
// matvec_f32.h): the same bits, each block one stream, and split between threads by blocks of outputs at any size
// (the input-major rows of a short weight are read in pieces too short to split: it stays on one thread)
EMBER_EXPORT(ember_matvec_f32_blocked)
int ember_matvec_f32_blocked(const float *wb, int rows, int cols, const float *x, float *y) {
    if (cols % 8 != 0)
        return -1;
    intptr_t w[W_FIELDS] = {(intptr_t)wb, F32_BLOCKED, rows, cols, 0};
    const intptr_t *ws[1] = {w};
    return matvecs(ws, 1, 0, x, &y, 0, 0, 0, DECODE_CHUNK_WORK);
}

// bytes of scratch ember_decode needs for caches of at most `max_length` rows
EMBER_EXPORT(ember_decode_scratch_bytes)
long ember_decode_scratch_bytes(const intptr_t *plan, int max_length) {
    long dim = plan[H_DIM], qd = plan[H_HEADS] * plan[H_HEAD_DIM], kd = plan[H_KV_HEADS] * plan[H_HEAD_DIM];
    long floats = 2 * dim + 2 * qd + 2 * kd + 2 * plan[H_HIDDEN] + 64;
    floats += PARALLEL_MAX_THREADS * per_thread_floats(plan, max_length) + partial_floats(plan);
    return floats * 4 + MAX_MATVECS * max_act_bytes(plan) + 64;
}

// x (dim) through every layer of the plan (and the final norm where the plan has one), in place. rope: the
// (cos, sin) tables of the token's position, head_dim / 2 floats each, one pair per rope kind (a layer's L_ROPE
// picks its pair). Returns 0, or -1 for a plan this build cannot run (a weight type without a kernel, dims that
// are not whole blocks or lanes of 8), or PARALLEL_LOST (the page's pool lost a worker: x is not the answer).
EMBER_EXPORT(ember_decode)
int ember_decode(const intptr_t *plan, const float *fparams, float *x, const float *rope_tables, void *scratch) {
    int dim = (int)plan[H_DIM], heads = (int)plan[H_HEADS], kvh = (int)plan[H_KV_HEADS], hd = (int)plan[H_HEAD_DIM];
    int hidden = (int)plan[H_HIDDEN], act_kind = (int)plan[H_ACT];
    float eps = fparams[F_EPS], scale = fparams[F_SCALE];
    if (dim % 8 || hd % 8 || hidden % 8 || heads % kvh)
        return -1;
    for (long l = 0; l < plan[H_LAYERS]; l++)  // every weight has a kernel here, before anything is written
        for (int w = L_Q; w <= L_DOWN; w += W_FIELDS) {
            const intptr_t *f = plan + H_FIELDS + l * L_FIELDS + w;
            if (f[W_TYPE] > F32_TYPE ? ember_q8_act_bytes((int)f[W_TYPE], 1, (int)f[W_COLS]) < 0 : f[W_COLS] % 8 != 0)
                return -1;
        }
    float *h = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *a = h + dim, *q = a + dim, *o = q + (long)heads * hd, *k = o + (long)heads * hd, *v = k + (long)kvh * hd;
    float *g = v + (long)kvh * hd, *u = g + hidden;
    float *work = (float *)(((uintptr_t)(u + hidden) + 63) & ~(uintptr_t)63);  // attention's, per thread
    const intptr_t *layer = plan + H_FIELDS;
    long room = 0;
    for (long l = 0; l < plan[H_LAYERS]; l++)
        room = layer[l * L_FIELDS + L_LENGTH] > room ? layer[l * L_FIELDS + L_LENGTH] : room;
    long stride = per_thread_floats(plan, room);
    uint8_t *act = (uint8_t *)(((uintptr_t)(work + PARALLEL_MAX_THREADS * stride) + 63) & ~(uintptr_t)63);
    long act_bytes = max_act_bytes(plan);
    float *part = (float *)(act + MAX_MATVECS * act_bytes);  // (act_bytes: a multiple of 64)
    int rc = 0;
    for (long l = 0; l < plan[H_LAYERS]; l++, layer += L_FIELDS) {
        // attention
        rms_norm(x, (const float *)layer[L_NORM_ATTN], eps, dim, h);
        const intptr_t *qkv[3] = {layer + L_Q, layer + L_K, layer + L_V};
        float *qkv_out[3] = {q, k, v};
        rc |= matvecs(qkv, 3, 0, h, qkv_out, act, act_bytes, part, DECODE_CHUNK_WORK);
        const float *cs = rope_tables + layer[L_ROPE] * hd;
        for (int i = 0; i < heads; i++) {
            if (layer[L_NORM_Q])
                rms_norm(q + (long)i * hd, (const float *)layer[L_NORM_Q], eps, hd, q + (long)i * hd);
            rope(q + (long)i * hd, cs, hd);
        }
        int cap = (int)layer[L_CAPACITY], slot = (int)layer[L_SLOT];
        float *kc = (float *)layer[L_KCACHE], *vc = (float *)layer[L_VCACHE];
        for (int i = 0; i < kvh; i++) {
            float *ki = k + (long)i * hd;
            if (layer[L_NORM_K])
                rms_norm(ki, (const float *)layer[L_NORM_K], eps, hd, ki);
            rope(ki, cs, hd);
            for (int j = 0; j < hd; j++) {
                kc[((long)i * cap + slot) * hd + j] = ki[j];
                vc[((long)i * cap + slot) * hd + j] = v[(long)i * hd + j];
            }
        }
        int length = (int)layer[L_LENGTH];
        attend_job at = {q, kc, vc, heads / kvh, hd, cap, length, scale, work, stride, o};
        // by heads (Gemma 3 270M: 4 of 256 over ~100 cached rows, ~50k multiply-adds each, which at 128k a chunk
        // ran on one thread)
        rc |= ember_parallel(attend_heads, &at, heads, ember_step_chunks_each(heads, 2L * length * hd));
        const intptr_t *wo[1] = {layer + L_O};
        rc |= matvecs(wo, 1, 0, o, &a, act, act_bytes, part, DECODE_CHUNK_WORK);
        if (layer[L_NORM_ATTN_POST])
            rms_norm(a, (const float *)layer[L_NORM_ATTN_POST], eps, dim, a);
        for (int i = 0; i < dim; i++)
            x[i] += a[i];
        // MLP: g = act(W_gate h) * W_up h
        rms_norm(x, (const float *)layer[L_NORM_FFN], eps, dim, h);
        const intptr_t *gu[2] = {layer + L_GATE, layer + L_UP};
        float *gu_out[2] = {g, u};
        rc |= matvecs(gu, 2, 1 + act_kind, h, gu_out, act, act_bytes, part, DECODE_CHUNK_WORK);
        const intptr_t *wd[1] = {layer + L_DOWN};
        rc |= matvecs(wd, 1, 0, g, &a, act, act_bytes, part, DECODE_CHUNK_WORK);
        if (layer[L_NORM_FFN_POST])
            rms_norm(a, (const float *)layer[L_NORM_FFN_POST], eps, dim, a);
        for (int i = 0; i < dim; i++)
            x[i] += a[i];
        if (rc != 0)
            return PARALLEL_LOST;
    }
    if (plan[H_FINAL_NORM])
        rms_norm(x, (const float *)plan[H_FINAL_NORM], eps, dim, x);
    return 0;
}
