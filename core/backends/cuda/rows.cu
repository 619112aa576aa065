// Row-wise fused kernels: softmax, log_softmax, layer_norm, rms_norm (one block per row of the
// contiguous last axis; float32 math whatever the storage dtype), and rotary embeddings.
#include "common.cuh"

// ---------------------------------------------------------------- softmax / log_softmax
// x, y: (rows, n). Three passes over the row (max, sum of exp, write) keep registers free of n.
template <class IO, bool LOG>
__device__ void softmax_row(const typename IO::T* x, typename IO::T* y, int n) {
    __shared__ float sh[32];
    const i64 base = (i64)blockIdx.x * n;
    float m = EMBER_NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, IO::ld(x[base + i]));
    m = block_reduce<true>(m, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(IO::ld(x[base + i]) - m);
    s = block_reduce<false>(s, sh);
    if (LOG) {
        const float ls = logf(s);
        for (int i = threadIdx.x; i < n; i += blockDim.x) y[base + i] = IO::st(IO::ld(x[base + i]) - m - ls);
    } else {
        const float inv = 1.0f / s;
        for (int i = threadIdx.x; i < n; i += blockDim.x) y[base + i] = IO::st(expf(IO::ld(x[base + i]) - m) * inv);
    }
}

// ---------------------------------------------------------------- layer_norm / rms_norm
// w, b: (n,) or null. Two-pass variance (mean first), as the reference, not E[x^2] - E[x]^2.
template <class IO>
__device__ void layer_norm_row(const typename IO::T* x, const typename IO::T* w, const typename IO::T* b,
                               typename IO::T* y, int n, float eps) {
    __shared__ float sh[32];
    const i64 base = (i64)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += IO::ld(x[base + i]);
    const float mu = block_reduce<false>(s, sh) / n;
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float c = IO::ld(x[base + i]) - mu;
        v += c * c;
    }
    const float r = 1.0f / sqrtf(block_reduce<false>(v, sh) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = (IO::ld(x[base + i]) - mu) * r;
        if (w) o *= IO::ld(w[i]);
        if (b) o += IO::ld(b[i]);
        y[base + i] = IO::st(o);
    }
}

template <class IO>
__device__ void rms_norm_row(const typename IO::T* x, const typename IO::T* w, typename IO::T* y, int n, float eps) {
    __shared__ float sh[32];
    const i64 base = (i64)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = IO::ld(x[base + i]);
        s += v * v;
    }
    const float r = 1.0f / sqrtf(block_reduce<false>(s, sh) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float o = IO::ld(x[base + i]) * r;
        if (w) o *= IO::ld(w[i]);
        y[base + i] = IO::st(o);
    }
}

// ---------------------------------------------------------------- rotary embedding (rotate-half)
// x, y: (batch, T, heads, D); cos, sin: (T, D/2) float32. For i < D/2 (HF Llama's rotate_half):
//   y[i] = x[i] cos - x[i + D/2] sin,   y[i + D/2] = x[i + D/2] cos + x[i] sin
template <class IO>
__device__ void rope_elem(const typename IO::T* x, const float* cos_t, const float* sin_t, typename IO::T* y,
                          i64 total, int T, int heads, int D) {
    const int half = D / 2;
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per (row, i < D/2)
    if (j >= total) return;
    const i64 row = j / half;
    const int i = (int)(j % half);
    const int t = (int)((row / heads) % T);
    const float c = cos_t[(i64)t * half + i], s = sin_t[(i64)t * half + i];
    const float a = IO::ld(x[row * D + i]), b = IO::ld(x[row * D + i + half]);
    y[row * D + i] = IO::st(a * c - b * s);
    y[row * D + i + half] = IO::st(b * c + a * s);
}

// ---------------------------------------------------------------- entry points, one per dtype
#define EMBER_ROWS(SUF, IO)                                                                              \
    extern "C" __global__ void softmax_##SUF(const IO::T* x, IO::T* y, int n) {                          \
        softmax_row<IO, false>(x, y, n);                                                                 \
    }                                                                                                    \
    extern "C" __global__ void log_softmax_##SUF(const IO::T* x, IO::T* y, int n) {                      \
        softmax_row<IO, true>(x, y, n);                                                                  \
    }                                                                                                    \
    extern "C" __global__ void layer_norm_##SUF(const IO::T* x, const IO::T* w, const IO::T* b, IO::T* y, \
                                                int n, float eps) {                                      \
        layer_norm_row<IO>(x, w, b, y, n, eps);                                                          \
    }                                                                                                    \
    extern "C" __global__ void rms_norm_##SUF(const IO::T* x, const IO::T* w, IO::T* y, int n, float eps) { \
        rms_norm_row<IO>(x, w, y, n, eps);                                                               \
    }                                                                                                    \
    extern "C" __global__ void rope_##SUF(const IO::T* x, const float* c, const float* s, IO::T* y,      \
                                          i64 total, int T, int heads, int D) {                         \
        rope_elem<IO>(x, c, s, y, total, T, heads, D);                                                   \
    }

EMBER_ROWS(f32, io_f32)
EMBER_ROWS(f16, io_f16)
EMBER_ROWS(bf16, io_bf16)
