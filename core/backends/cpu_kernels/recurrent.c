// One time step of an LSTM (gates i f g o) or a GRU (gates r z n) in float32, torch's semantics: the recurrent
// product h W_hh^T and the gate nonlinearities in one pass, no (N, gates H) buffer written. The CPU backend's
// kernels for the registry's `lstm_cell` and `gru_cell` ops (cpu_recurrent.py), natively and in the page.
//
// W_hh is read as it lies, (gates H, H) row-major: each gate pre-activation is a dot product of a row of h with a
// row of W_hh, summed in 8 lanes along H and the lanes added in one fixed order. A unit of work is 8 hidden units
// (their gates' rows of W_hh, read once per block of batch rows while in cache) for every batch row; the
// nonlinearities run on the 8 units at once (fvec.h's exp / tanh). Every output is computed alike in any range of
// units, so the result does not depend on how units are split between threads (parallel.h).
//
//   LSTM: a = xg + (h W_hh^T + b_hh); c' = sigmoid(f) c + sigmoid(i) tanh(g); h' = sigmoid(o) tanh(c'); out = h' | c'
//   GRU:  a = h W_hh^T + b_hh; r, z = sigmoid(xg_rz + a_rz); n = tanh(xg_n + r a_n); out = h' = n + z (h - n)
#include <stdint.h>

#include "fvec.h"

#include "parallel.h"

// intptr_t parameters: xg, h, c (LSTM; 0 for GRU), w_hh, b_hh (or 0), out, batch rows N, hidden size H, the row
// strides (floats) of xg, h, c and out; columns have unit stride. A sequence (ember_*_sequence) adds its steps L,
// the step strides (floats) of xg and out, and 1 to run it from its last step: step t reads xg[t] and the state
// the previous step wrote into out (h0 / c0 for the first), and writes out[t]
enum { P_XG, P_H, P_C, P_W, P_B, P_OUT, P_N, P_HID, P_XGS, P_HS, P_CS, P_OS, P_STEPS, P_XGT, P_OT, P_REVERSE,
       P_FIELDS };

#define UNIT 8        // hidden units of a unit of work (one f8 of each gate)
#define ROW_BLOCK 16  // batch rows whose dot products are taken while a unit's rows of W_hh stay in L1
#if F8_MR >= 8
#define RT 4  // batch rows of a dot-product tile: gates x RT accumulators, the gates' W and a row of h in registers
#elif F8_NV >= 3
#define RT 2
#else
#define RT 1
#endif

typedef struct {
    const float *xg, *h, *c, *w, *b;
    float *out;
    int n, hid, gates;
    long xgs, hs, cs, os;
} cell_t;

static void setup(const intptr_t *p, cell_t *a, int gates) {
    a->xg = (const float *)p[P_XG], a->h = (const float *)p[P_H], a->c = (const float *)p[P_C];
    a->w = (const float *)p[P_W], a->b = (const float *)p[P_B], a->out = (float *)p[P_OUT];
    a->n = (int)p[P_N], a->hid = (int)p[P_HID], a->gates = gates;
    a->xgs = p[P_XGS], a->hs = p[P_HS], a->cs = p[P_CS], a->os = p[P_OS];
}

static inline float hsum(f8 v) {  // the 8 lanes added in one order on every target
    float t[8];
    f8_store(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// ---------------------------------------------------------------------------------------------- dot products
// pre[g][r] = h row r . W_hh row (g H + j), for G gates and R batch rows (both constants where inlined), in named
// accumulators (GCC keeps arrays of vectors in memory)
#define D_EACH(M) M(0, 0) M(0, 1) M(0, 2) M(0, 3) M(1, 0) M(1, 1) M(1, 2) M(1, 3) \
                  M(2, 0) M(2, 1) M(2, 2) M(2, 3) M(3, 0) M(3, 1) M(3, 2) M(3, 3)
#define D_DECL(g, r) f8 a##g##r = f8_zero();
#define D_MADD(g, r) if (g < G && r < R) a##g##r = f8_madd(a##g##r, w##g, x##r);
#define D_SUM(g, r) if (g < G && r < R) pre[g][r] = hsum(a##g##r);
#define D_LOAD(load)                                                                      \
    f8 w0 = load(w + k), w1 = load(w + gs + k), w2 = load(w + 2 * gs + k);                \
    f8 w3 = G > 3 ? load(w + 3 * gs + k) : w0;                                            \
    f8 x0 = load(h + k), x1 = R > 1 ? load(h + hs + k) : x0;                              \
    f8 x2 = R > 2 ? load(h + 2 * hs + k) : x0, x3 = R > 3 ? load(h + 3 * hs + k) : x0;

static inline __attribute__((always_inline)) void dots(const int G, const int R, int hid, const float *h, long hs,
                                                       const float *w, long gs, float pre[4][4]) {
    D_EACH(D_DECL)
    int k = 0;
    for (; k + 8 <= hid; k += 8) {
        D_LOAD(f8_load)
        D_EACH(D_MADD)
    }
    if (k < hid) {
#define LOAD_TAIL(p) f8_load_part(p, hid - k)
        D_LOAD(LOAD_TAIL)
#undef LOAD_TAIL
        D_EACH(D_MADD)
    }
    D_EACH(D_SUM)
}

// pre[g][r][u]: the dot products of batch rows [r0, r0 + rows) with the gates' rows of units [j0, j0 + width)
static void unit_dots(const cell_t *a, int r0, int rows, int j0, int width, float pre[4][ROW_BLOCK][UNIT]) {
    long gs = (long)a->hid * a->hid;
    for (int u = 0; u < width; u++) {
        const float *w = a->w + (long)(j0 + u) * a->hid;
        for (int r = 0; r < rows;) {
            float t[4][4];
            const float *h = a->h + (long)(r0 + r) * a->hs;
            int left = rows - r, R = left >= RT ? RT : 1;
            if (a->gates == 4) {
                if (R == RT) dots(4, RT, a->hid, h, a->hs, w, gs, t); else dots(4, 1, a->hid, h, a->hs, w, gs, t);
            } else {
                if (R == RT) dots(3, RT, a->hid, h, a->hs, w, gs, t); else dots(3, 1, a->hid, h, a->hs, w, gs, t);
            }
            for (int g = 0; g < a->gates; g++)
                for (int q = 0; q < R; q++) pre[g][r + q][u] = t[g][q];
            r += R;
        }
    }
    for (int u = width; u < UNIT; u++)  // (lanes past the last unit: computed on zeros, never stored)
        for (int g = 0; g < a->gates; g++)
            for (int r = 0; r < rows; r++) pre[g][r][u] = 0.0f;
}

// ---------------------------------------------------------------------------------------------- the gates

static inline f8 f8_sigmoid(f8 x) { return f8_div(f8_c(1.0f), f8_add(f8_c(1.0f), f8_exp(f8_sub(f8_zero(), x)))); }

// the gate's hidden part, h W^T + b_hh, for 8 units from j
static inline f8 hidden_part(const cell_t *a, const float *pre, int g, int j, int width) {
    f8 v = f8_load(pre);
    return a->b ? f8_add(v, f8_load_part(a->b + g * a->hid + j, width)) : v;
}

static void lstm_units(const cell_t *a, int u0, int u1) {
    float pre[4][ROW_BLOCK][UNIT];
    int H = a->hid;
    for (int u = u0; u < u1; u++) {
        int j = u * UNIT, width = H - j < UNIT ? H - j : UNIT;
        for (int r0 = 0; r0 < a->n; r0 += ROW_BLOCK) {
            int rows = a->n - r0 < ROW_BLOCK ? a->n - r0 : ROW_BLOCK;
            unit_dots(a, r0, rows, j, width, pre);
            for (int r = 0; r < rows; r++) {
                const float *xg = a->xg + (long)(r0 + r) * a->xgs + j;
                f8 gi = f8_add(f8_load_part(xg, width), hidden_part(a, pre[0][r], 0, j, width));
                f8 gf = f8_add(f8_load_part(xg + H, width), hidden_part(a, pre[1][r], 1, j, width));
                f8 gg = f8_add(f8_load_part(xg + 2 * H, width), hidden_part(a, pre[2][r], 2, j, width));
                f8 go = f8_add(f8_load_part(xg + 3 * H, width), hidden_part(a, pre[3][r], 3, j, width));
                f8 c = f8_load_part(a->c + (long)(r0 + r) * a->cs + j, width);
                c = f8_add(f8_mul(f8_sigmoid(gf), c), f8_mul(f8_sigmoid(gi), f8_tanh(gg)));
                float *o = a->out + (long)(r0 + r) * a->os + j;
                f8_store_part(o, f8_mul(f8_sigmoid(go), f8_tanh(c)), width);
                f8_store_part(o + H, c, width);
            }
        }
    }
}

static void gru_units(const cell_t *a, int u0, int u1) {
    float pre[4][ROW_BLOCK][UNIT];
    int H = a->hid;
    for (int u = u0; u < u1; u++) {
        int j = u * UNIT, width = H - j < UNIT ? H - j : UNIT;
        for (int r0 = 0; r0 < a->n; r0 += ROW_BLOCK) {
            int rows = a->n - r0 < ROW_BLOCK ? a->n - r0 : ROW_BLOCK;
            unit_dots(a, r0, rows, j, width, pre);
            for (int r = 0; r < rows; r++) {
                const float *xg = a->xg + (long)(r0 + r) * a->xgs + j;
                f8 rg = f8_sigmoid(f8_add(f8_load_part(xg, width), hidden_part(a, pre[0][r], 0, j, width)));
                f8 zg = f8_sigmoid(f8_add(f8_load_part(xg + H, width), hidden_part(a, pre[1][r], 1, j, width)));
                f8 hn = hidden_part(a, pre[2][r], 2, j, width);
                f8 n = f8_tanh(f8_add(f8_load_part(xg + 2 * H, width), f8_mul(rg, hn)));
                f8 h = f8_load_part(a->h + (long)(r0 + r) * a->hs + j, width);
                f8_store_part(a->out + (long)(r0 + r) * a->os + j, f8_add(n, f8_mul(zg, f8_sub(h, n))), width);
            }
        }
    }
}

static void lstm_job(const void *arg, int u0, int u1, int thread) {  // (parallel.h)
    (void)thread;
    lstm_units((const cell_t *)arg, u0, u1);
}

static void gru_job(const void *arg, int u0, int u1, int thread) {
    (void)thread;
    gru_units((const cell_t *)arg, u0, u1);
}

// steps of a sequence (1 for a cell), each's hidden units split between threads (parallel.h): 0, -1 for
// parameters it does not take, or PARALLEL_LOST (the page's pool lost a worker)
static int run(const intptr_t *p, int gates, int steps) {
    cell_t a;
    setup(p, &a, gates);
    if (a.n < 0 || a.hid < 1 || steps < 0)
        return -1;
    int units = (a.hid + UNIT - 1) / UNIT, reverse = steps > 1 && p[P_REVERSE];
    if (a.n == 0)
        return 0;
    const float *xg0 = a.xg;
    float *out0 = a.out;
    for (int s = 0; s < steps; s++) {
        long t = reverse ? steps - 1 - s : s;
        a.xg = xg0 + t * (steps > 1 ? p[P_XGT] : 0), a.out = out0 + t * (steps > 1 ? p[P_OT] : 0);
        int rc = ember_parallel(gates == 4 ? lstm_job : gru_job, &a, units,
                                ember_chunks(units, (long)a.n * gates * UNIT * a.hid));
        if (rc)
            return rc;
        a.h = a.out, a.hs = a.os;  // the next step's state: this one's output (h' | c' for an LSTM)
        a.c = a.out + a.hid, a.cs = a.os;
    }
    return 0;
}

EMBER_EXPORT(ember_lstm_cell)
int ember_lstm_cell(const intptr_t *p) { return run(p, 4, 1); }

EMBER_EXPORT(ember_gru_cell)
int ember_gru_cell(const intptr_t *p) { return run(p, 3, 1); }

// a whole sequence of one direction in one call (the time loop here, not in Python)
EMBER_EXPORT(ember_lstm_sequence)
int ember_lstm_sequence(const intptr_t *p) { return run(p, 4, (int)p[P_STEPS]); }

EMBER_EXPORT(ember_gru_sequence)
int ember_gru_sequence(const intptr_t *p) { return run(p, 3, (int)p[P_STEPS]); }
