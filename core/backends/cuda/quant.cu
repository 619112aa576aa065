// Quantized matmul with the dequantization inside the kernel: y = x @ W.T, W (N, K) in GGML blocks.
//   qmatvec_*: few input rows (decode). One warp per output feature n walks the row's blocks once
//              and dots it with each of the m <= QMV_MAX_M input rows (x float32 (m, K), y (m, N)).
//   dequant_*: many input rows (prefill). Rows [r0, r0 + rows) of W -> float32, then cuBLAS.
#include "quant.cuh"

#define QMV_MAX_M 8
#define QMV_WARPS 4  // output features per block

template <int TYPE>
__device__ void qmatvec(const u8* raw, const float* x, float* y, int N, int K, i64 row_bytes, int m) {
    const int lane = threadIdx.x & 31;
    const i64 n = (i64)blockIdx.x * QMV_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    float acc[QMV_MAX_M];
#pragma unroll
    for (int i = 0; i < QMV_MAX_M; ++i) acc[i] = 0.0f;
    for (int c = lane; c < K; c += 32) {  // consecutive lanes read neighbouring bytes of one block
        const float w = q_at<TYPE>(raw, n, c, row_bytes);
#pragma unroll
        for (int i = 0; i < QMV_MAX_M; ++i)
            if (i < m) acc[i] += w * x[(i64)i * K + c];
    }
#pragma unroll
    for (int i = 0; i < QMV_MAX_M; ++i) {
        if (i < m) {
            const float s = warp_sum(acc[i]);
            if (lane == 0) y[(i64)i * N + n] = s;
        }
    }
}

template <int TYPE>
__device__ void dequant(const u8* raw, float* out, i64 r0, i64 rows, int K, i64 row_bytes) {
    const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per output element
    if (j >= rows * K) return;
    out[j] = q_at<TYPE>(raw, r0 + j / K, (int)(j % K), row_bytes);
}

#define EMBER_QUANT(SUF, TYPE)                                                                          \
    extern "C" __global__ void qmatvec_##SUF(const u8* raw, const float* x, float* y, int N, int K,     \
                                             i64 row_bytes, int m) {                                  \
        qmatvec<TYPE>(raw, x, y, N, K, row_bytes, m);                                                  \
    }                                                                                                  \
    extern "C" __global__ void dequant_##SUF(const u8* raw, float* out, i64 r0, i64 rows, int K,      \
                                             i64 row_bytes) {                                         \
        dequant<TYPE>(raw, out, r0, rows, K, row_bytes);                                               \
    }

EMBER_QUANT(q4_0, 2)
EMBER_QUANT(q8_0, 8)
EMBER_QUANT(q4_k, 12)
EMBER_QUANT(q6_k, 14)
