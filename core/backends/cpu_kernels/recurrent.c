// One time step of an LSTM (gates i f g o) or a GRU (gates r z n) in float32, torch's semantics: the recurrent
// product h W_hh^T and the gate nonlinearities in one pass, no (N, gates H) buffer written. The CPU backend's
// kernels for the registry's `lstm_cell` and `gru_cell` ops (cpu_recurrent.py), natively and in the page.
//
// W_hh is read input-major, from the copy cpu_recurrent.py makes once per weight: blocks of 32 hidden units, each
// (H, gates, 32) (k-th row: the 32 units' columns k of every gate), the units past H zeros; a block is one
// sequential stream. A gate pre-activation is its row of h times a column of W_hh^T, accumulated over k = 0 .. H-1
// in that order in one lane (the vectors run along the units: no horizontal sums), so neither the vector width nor
// the tile nor the split between threads changes a bit. A unit of work is UNIT hidden units (their columns, read
// once per block of batch rows while in cache) for every batch row; the nonlinearities run on 8 units at once
// (fvec.h's exp / tanh).
//
//   LSTM: a = xg + (h W_hh^T + b_hh); c' = sigmoid(f) c + sigmoid(i) tanh(g); h' = sigmoid(o) tanh(c'); out = h' | c'
//   GRU:  a = h W_hh^T + b_hh; r, z = sigmoid(xg_rz + a_rz); n = tanh(xg_n + r a_n); out = h' = n + z (h - n)
#include <stdint.h>

#include "fvec.h"

#include "parallel.h"

// intptr_t parameters: xg, h, c (LSTM; 0 for GRU), W_hh's blocked copy, b_hh (or 0), out, batch rows N, hidden
// size H, the row strides (floats) of xg, h, c and out; columns have unit stride. A sequence (ember_*_sequence)
// adds its steps L, the step strides (floats) of xg and out, and 1 to run it from its last step: step t reads xg[t]
// and the state the previous step wrote into out (h0 / c0 for the first), and writes out[t].
enum { P_XG, P_H, P_C, P_W, P_B, P_OUT, P_N, P_HID, P_XGS, P_HS, P_CS, P_OS, P_STEPS, P_XGT, P_OT, P_REVERSE,
       P_FIELDS };

#define WB 32         // hidden units of a block of the weight's copy
#define ROW_BLOCK 16  // batch rows whose products are taken while a unit's columns stay in L1
// the register tile: RT batch rows x the gates x VT vectors of FW units, accumulated at once (each a chain of H
// multiply-adds; 8 or more chains keep the multiply-add units busy)
#if FW == 16  // AVX-512's 32 registers: 2 x 4 x 2 accumulators
#define RT 2
#define VT 2
#elif F8_NV >= 2  // AVX2's 16: 1 x 4 x 2
#define RT 1
#define VT 2
#else  // 128-bit vectors (a f8 is two): 1 x 4 x 1
#define RT 1
#define VT 1
#endif
#define UNIT (FW * VT)  // hidden units of a unit of work (a divisor of WB)

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

// ---------------------------------------------------------------------------------------------- products
// pre[g][r][v FW + lane] = sum over k of h[r][k] w[k][g][v FW + lane] (w: the unit's first column in its block),
// for G gates, R batch rows and V vectors (constants where inlined), in named accumulators (GCC keeps arrays of
// vectors in memory)
#define T_EACH(M) M(0, 0, 0) M(0, 0, 1) M(0, 1, 0) M(0, 1, 1) M(1, 0, 0) M(1, 0, 1) M(1, 1, 0) M(1, 1, 1) \
                  M(2, 0, 0) M(2, 0, 1) M(2, 1, 0) M(2, 1, 1) M(3, 0, 0) M(3, 0, 1) M(3, 1, 0) M(3, 1, 1)
#define T_DECL(g, r, v) fw a##g##r##v = fw_zero();
#define T_MADD(g, r, v) if (g < G && r < R && v < V) a##g##r##v = fw_madd(a##g##r##v, w##g##v, x##r);
#define T_STORE(g, r, v) if (g < G && r < R && v < V) fw_store(pre[g][r] + v * FW, a##g##r##v);
#define W_EACH(M) M(0, 0) M(0, 1) M(1, 0) M(1, 1) M(2, 0) M(2, 1) M(3, 0) M(3, 1)
#define W_LOAD(g, v) fw w##g##v = g < G && v < V ? fw_load(wk + g * WB + v * FW) : fw_zero();

static inline __attribute__((always_inline)) void tile(const int G, const int R, const int V, int hid,
                                                       const float *h, long hs, const float *w,
                                                       float (*pre)[ROW_BLOCK][UNIT]) {
    T_EACH(T_DECL)
    for (int k = 0; k < hid; k++) {
        const float *wk = w + k * G * WB;
        W_EACH(W_LOAD)
        fw x0 = fw_bcast(h + k), x1 = R > 1 ? fw_bcast(h + hs + k) : x0;
        T_EACH(T_MADD)
        (void)x1;
    }
    T_EACH(T_STORE)
}

// pre[g][r][u]: the products of batch rows [r0, r0 + rows) with the gates' columns of units [j, j + UNIT) (those
// past H read the copy's zeros, computed and never stored)
static void unit_products(const cell_t *a, int r0, int rows, int j, float pre[4][ROW_BLOCK][UNIT]) {
    const float *w = a->w + (long)(j / WB) * a->hid * a->gates * WB + j % WB;
    for (int r = 0; r < rows;) {
        const float *h = a->h + (long)(r0 + r) * a->hs;
        float (*p)[ROW_BLOCK][UNIT] = (float (*)[ROW_BLOCK][UNIT])&pre[0][r][0];
        if (rows - r >= RT) {
            if (a->gates == 4) tile(4, RT, VT, a->hid, h, a->hs, w, p);
            else tile(3, RT, VT, a->hid, h, a->hs, w, p);
            r += RT;
        } else {
            if (a->gates == 4) tile(4, 1, VT, a->hid, h, a->hs, w, p);
            else tile(3, 1, VT, a->hid, h, a->hs, w, p);
            r += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------------- the gates

static inline f8 f8_sigmoid(f8 x) { return f8_div(f8_c(1.0f), f8_add(f8_c(1.0f), f8_exp(f8_sub(f8_zero(), x)))); }

// the gate's hidden part, h W^T + b_hh, for n (<= 8) units from j (q: their products in pre)
static inline f8 hidden_part(const cell_t *a, const float *q, int g, int j, int n) {
    f8 v = f8_load(q);
    return a->b ? f8_add(v, f8_load_part(a->b + g * a->hid + j, n)) : v;
}

static void lstm_units(const cell_t *a, int u0, int u1) {
    float pre[4][ROW_BLOCK][UNIT];
    int H = a->hid;
    for (int u = u0; u < u1; u++) {
        int j0 = u * UNIT, width = H - j0 < UNIT ? H - j0 : UNIT;
        for (int r0 = 0; r0 < a->n; r0 += ROW_BLOCK) {
            int rows = a->n - r0 < ROW_BLOCK ? a->n - r0 : ROW_BLOCK;
            unit_products(a, r0, rows, j0, pre);
            for (int r = 0; r < rows; r++)
                for (int q = 0; q < width; q += 8) {
                    int j = j0 + q, n = width - q < 8 ? width - q : 8;
                    const float *xg = a->xg + (long)(r0 + r) * a->xgs + j;
                    f8 gi = f8_add(f8_load_part(xg, n), hidden_part(a, pre[0][r] + q, 0, j, n));
                    f8 gf = f8_add(f8_load_part(xg + H, n), hidden_part(a, pre[1][r] + q, 1, j, n));
                    f8 gg = f8_add(f8_load_part(xg + 2 * H, n), hidden_part(a, pre[2][r] + q, 2, j, n));
                    f8 go = f8_add(f8_load_part(xg + 3 * H, n), hidden_part(a, pre[3][r] + q, 3, j, n));
                    f8 c = f8_load_part(a->c + (long)(r0 + r) * a->cs + j, n);
                    c = f8_add(f8_mul(f8_sigmoid(gf), c), f8_mul(f8_sigmoid(gi), f8_tanh(gg)));
                    float *o = a->out + (long)(r0 + r) * a->os + j;
                    f8_store_part(o, f8_mul(f8_sigmoid(go), f8_tanh(c)), n);
                    f8_store_part(o + H, c, n);
                }
        }
    }
}

static void gru_units(const cell_t *a, int u0, int u1) {
    float pre[4][ROW_BLOCK][UNIT];
    int H = a->hid;
    for (int u = u0; u < u1; u++) {
        int j0 = u * UNIT, width = H - j0 < UNIT ? H - j0 : UNIT;
        for (int r0 = 0; r0 < a->n; r0 += ROW_BLOCK) {
            int rows = a->n - r0 < ROW_BLOCK ? a->n - r0 : ROW_BLOCK;
            unit_products(a, r0, rows, j0, pre);
            for (int r = 0; r < rows; r++)
                for (int q = 0; q < width; q += 8) {
                    int j = j0 + q, n = width - q < 8 ? width - q : 8;
                    const float *xg = a->xg + (long)(r0 + r) * a->xgs + j;
                    f8 rg = f8_sigmoid(f8_add(f8_load_part(xg, n), hidden_part(a, pre[0][r] + q, 0, j, n)));
                    f8 zg = f8_sigmoid(f8_add(f8_load_part(xg + H, n), hidden_part(a, pre[1][r] + q, 1, j, n)));
                    f8 hn = hidden_part(a, pre[2][r] + q, 2, j, n);
                    f8 nn = f8_tanh(f8_add(f8_load_part(xg + 2 * H, n), f8_mul(rg, hn)));
                    f8 h = f8_load_part(a->h + (long)(r0 + r) * a->hs + j, n);
                    f8_store_part(a->out + (long)(r0 + r) * a->os + j, f8_add(nn, f8_mul(zg, f8_sub(h, nn))), n);
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
