// A detector's input from an 8-bit image in one pass: the image resized as OpenCV's cv2.resize does on uint8
// (INTER_LINEAR, or INTER_AREA for an exact 2x downscale), placed at (top, left) on a canvas of `pad`, channels
// first, each value over 255 in float32. The CPU backend's kernel for the registry's `letterbox` op
// (cpu_image.py), natively and in the page; the composed reference is ember.data.resize's numpy.
//
// Integer arithmetic as OpenCV's (and the reference's): the caller passes each output column's and row's source
// indices and 11-bit weights; the horizontal pass (p0 a0 + p1 a1) >> 4, the vertical ((h0 b0) >> 16) +
// ((h1 b1) >> 16), then (v + 2) >> 2, clamped to [0, 255]; the float is v / 255.0f, one IEEE division. Every output
// is exact, so any build, split of rows or thread gives the same values.
#include <stdint.h>

#include "fvec.h"  // (EMBER_EXPORT)

#include "parallel.h"

// intptr_t parameters: src (H, W, C) uint8 (rows `src_stride` bytes apart), the int32 tables x0, x1, a0, a1
// (new_w) and y0, y1, b0, b1 (new_h), out (C, out_h, out_w) float32
enum { L_SRC, L_H, L_W, L_C, L_STRIDE, L_X0, L_X1, L_A0, L_A1, L_Y0, L_Y1, L_B0, L_B1, L_NH, L_NW, L_OUT, L_OH,
       L_OW, L_TOP, L_LEFT, L_PAD, L_AREA, L_FIELDS };

typedef struct {
    const uint8_t *src;
    const int32_t *x0, *x1, *a0, *a1, *y0, *y1, *b0, *b1;
    float *out;
    long stride;
    int h, w, c, nh, nw, oh, ow, top, left, area;
    float pad;
} lb_t;

static inline int clamp255(int v) { return v < 0 ? 0 : v > 255 ? 255 : v; }

// v / 255.0f for v in [0, 255]: the division's bits (folded by the compiler, correctly rounded as at run time), read
// from a table: a division an output cost more than the rest of its arithmetic
#define D1(v) (float)(v) / 255.0f,
#define D4(v) D1(v) D1(v + 1) D1(v + 2) D1(v + 3)
#define D16(v) D4(v) D4(v + 4) D4(v + 8) D4(v + 12)
#define D64(v) D16(v) D16(v + 16) D16(v + 32) D16(v + 48)
static const float over255[256] = {D64(0) D64(64) D64(128) D64(192)};

// An output row's channels: the canvas's padding left and right of [left, left + nw), the resized
// pixels between. Each output column's tables are read once for all its channels (the source's are interleaved).
static void lb_rows(const void *arg, int r0, int r1, int thread) {  // (parallel.h) output rows [r0, r1)
    const lb_t *k = (const lb_t *)arg;
    long plane = (long)k->oh * k->ow;
    int c = k->c;
    (void)thread;
    for (int r = r0; r < r1; r++) {
        int yr = r - k->top, inside = yr >= 0 && yr < k->nh;
        float *row = k->out + (long)r * k->ow;  // channel 0's row; channel ch's at + ch plane
        for (int ch = 0; ch < c; ch++) {
            float *o = row + ch * plane;
            int q0 = inside ? k->left : k->ow, q1 = inside ? k->left + k->nw : k->ow;
            for (int q = 0; q < q0; q++) o[q] = k->pad;
            for (int q = q1; q < k->ow; q++) o[q] = k->pad;
        }
        if (!inside)
            continue;
        float *o = row + k->left;
        if (k->area) {  // the rounded mean of each 2 x 2 block
            const uint8_t *s0 = k->src + 2L * yr * k->stride, *s1 = s0 + k->stride;
            for (int q = 0; q < k->nw; q++) {
                long i = 2L * q * c;
                for (int ch = 0; ch < c; ch++)
                    o[ch * plane + q] = over255[(s0[i + ch] + s0[i + c + ch] + s1[i + ch] + s1[i + c + ch] + 2) >> 2];
            }
            continue;
        }
        const uint8_t *s0 = k->src + k->y0[yr] * k->stride, *s1 = k->src + k->y1[yr] * k->stride;
        int b0 = k->b0[yr], b1 = k->b1[yr];
        for (int q = 0; q < k->nw; q++) {
            long i0 = (long)k->x0[q] * c, i1 = (long)k->x1[q] * c;
            int a0 = k->a0[q], a1 = k->a1[q];
            for (int ch = 0; ch < c; ch++) {
                int h0 = (s0[i0 + ch] * a0 + s0[i1 + ch] * a1) >> 4, h1 = (s1[i0 + ch] * a0 + s1[i1 + ch] * a1) >> 4;
                o[ch * plane + q] = over255[clamp255((((h0 * b0) >> 16) + ((h1 * b1) >> 16) + 2) >> 2)];
            }
        }
    }
}

// 0, -1 for parameters it does not take (the placement off the canvas, a table index outside the image), or
// PARALLEL_LOST
EMBER_EXPORT(ember_letterbox)
int ember_letterbox(const intptr_t *p) {
    lb_t k = {(const uint8_t *)p[L_SRC], (const int32_t *)p[L_X0], (const int32_t *)p[L_X1], (const int32_t *)p[L_A0],
              (const int32_t *)p[L_A1], (const int32_t *)p[L_Y0], (const int32_t *)p[L_Y1], (const int32_t *)p[L_B0],
              (const int32_t *)p[L_B1], (float *)p[L_OUT], (long)p[L_STRIDE], (int)p[L_H], (int)p[L_W], (int)p[L_C],
              (int)p[L_NH], (int)p[L_NW], (int)p[L_OH], (int)p[L_OW], (int)p[L_TOP], (int)p[L_LEFT], (int)p[L_AREA],
              (float)p[L_PAD] / 255.0f};
    if (k.h < 1 || k.w < 1 || k.c < 1 || k.nh < 1 || k.nw < 1 || k.top < 0 || k.left < 0 || k.top + k.nh > k.oh ||
        k.left + k.nw > k.ow || k.stride < (long)k.w * k.c || (k.area && (2 * k.nh > k.h || 2 * k.nw > k.w)))
        return -1;
    if (!k.area) {
        for (int q = 0; q < k.nw; q++)
            if (k.x0[q] < 0 || k.x0[q] >= k.w || k.x1[q] < 0 || k.x1[q] >= k.w)
                return -1;
        for (int r = 0; r < k.nh; r++)
            if (k.y0[r] < 0 || k.y0[r] >= k.h || k.y1[r] < 0 || k.y1[r] >= k.h)
                return -1;
    }
    return ember_parallel(lb_rows, &k, k.oh, ember_chunks(k.oh, (long)k.ow * k.c * 4));
}
