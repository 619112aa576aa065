// Flash-style attention forward: softmax(q k^T * scale + mask) v without materialising the
// (L, S) score matrix. One warp per query row streams the keys 32 at a time with an online softmax
// (running max m, running sum l, output rescaled by exp(m_old - m_new)), so memory is O(D) per row
// and any sequence length works. float32 math; q, k, v, out in one storage dtype.
//   q (BH, L, D), k (BH, S, D), v (BH, S, Dv), out (BH, L, Dv), all contiguous.
//   mask: additive float32 (read only when has_mask), element (bh, l, s) at (bh / H2) * m1 + (bh % H2) * m2 + l * ml + s * ms
//   (strides in elements, so a broadcast mask is read in place). causal: key s allowed iff s <= l (torch).
// A row whose keys are all masked yields 0/0 = NaN, as the composed path.
#include "common.cuh"

#define ATT_MAX_D 256          // largest D and Dv (registers: ATT_MAX_D / 32 accumulators per lane)
#define ATT_WARPS 4            // query rows per block

template <class IO>
__device__ void attention_row(const typename IO::T* q, const typename IO::T* k, const typename IO::T* v,
                              const float* mask, typename IO::T* out, int L, int S, int D, int Dv, float scale,
                              int causal, int has_mask, int H2, i64 m1, i64 m2, i64 ml, i64 ms) {
    __shared__ float qs[ATT_WARPS][ATT_MAX_D];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int l = blockIdx.x * ATT_WARPS + warp;
    const i64 bh = blockIdx.y;
    if (l >= L) return;  // whole warps leave together: no block barrier follows
    const typename IO::T* qrow = q + (bh * L + l) * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = IO::ld(qrow[d]) * scale;
    __syncwarp();
    const typename IO::T* kb = k + bh * S * D;
    const typename IO::T* vb = v + bh * S * Dv;
    const float* mrow = has_mask ? mask + (bh / H2) * m1 + (bh % H2) * m2 + (i64)l * ml : 0;
    const int n_keys = causal ? min(S, l + 1) : S;

    float acc[ATT_MAX_D / 32];
#pragma unroll
    for (int i = 0; i < ATT_MAX_D / 32; ++i) acc[i] = 0.0f;
    float m = EMBER_NEG_INF, lsum = 0.0f;

    for (int s0 = 0; s0 < n_keys; s0 += 32) {
        const int s = s0 + lane;  // this lane's key
        float score = EMBER_NEG_INF;
        if (s < n_keys) {
            const typename IO::T* krow = kb + (i64)s * D;
            float dot = 0.0f;
            for (int d = 0; d < D; ++d) dot += qs[warp][d] * IO::ld(krow[d]);
            score = mrow ? dot + mrow[(i64)s * ms] : dot;
        }
        const float m_new = fmaxf(m, warp_max(score));
        if (m_new == EMBER_NEG_INF) continue;  // every key so far masked: nothing to add yet
        const float alpha = expf(m - m_new);   // m == -inf -> 0, which clears nothing (acc is 0)
        const float p = expf(score - m_new);   // masked or out-of-range keys -> 0
        lsum = lsum * alpha + warp_sum(p);
#pragma unroll
        for (int i = 0; i < ATT_MAX_D / 32; ++i) acc[i] *= alpha;
        const int nk = min(32, n_keys - s0);
        for (int j = 0; j < nk; ++j) {
            const float pj = __shfl_sync(0xFFFFFFFFu, p, j);
            const typename IO::T* vrow = vb + (i64)(s0 + j) * Dv;
#pragma unroll
            for (int i = 0; i < ATT_MAX_D / 32; ++i) {
                const int d = lane + 32 * i;
                if (d < Dv) acc[i] += pj * IO::ld(vrow[d]);
            }
        }
        m = m_new;
    }
    typename IO::T* orow = out + (bh * L + l) * Dv;
    const float inv = 1.0f / lsum;  // lsum == 0 (all masked) -> inf * 0 = NaN below
#pragma unroll
    for (int i = 0; i < ATT_MAX_D / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < Dv) orow[d] = IO::st(lsum > 0.0f ? acc[i] * inv : bits_as_float(0x7FC00000u));
    }
}

#define EMBER_ATTENTION(SUF, IO)                                                                          \
    extern "C" __global__ void attention_##SUF(const IO::T* q, const IO::T* k, const IO::T* v,            \
                                               const float* mask, IO::T* out, int L, int S, int D, int Dv, \
                                               float scale, int causal, int has_mask, int H2, i64 m1,     \
                                               i64 m2, i64 ml, i64 ms) {                                 \
        attention_row<IO>(q, k, v, mask, out, L, S, D, Dv, scale, causal, has_mask, H2, m1, m2, ml, ms);  \
    }

EMBER_ATTENTION(f32, io_f32)
EMBER_ATTENTION(f16, io_f16)
EMBER_ATTENTION(bf16, io_bf16)
