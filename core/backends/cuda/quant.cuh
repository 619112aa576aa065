// GGML block decoders: element k of one block -> float32, for Q4_0, Q8_0, Q4_K and Q6_K.
// Layouts as GGML's (and ember.quant's numpy kernels); the arithmetic order matches ember's
// dequantize (scale products first), so host builds reproduce it bit for bit. __host__ too: the
// CPU test compiles these with nvcc and compares them with ember.quant on random blocks.
#pragma once
#include "common.cuh"

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define Q4_0_BYTES 18   // f16 d | 16 bytes of nibbles (element j low, j + 16 high)
#define Q8_0_BYTES 34   // f16 d | 32 int8
#define Q4_K_BYTES 144  // f16 d | f16 dmin | 12 bytes of 6-bit scales/mins | 128 bytes of nibbles
#define Q6_K_BYTES 210  // 128 bytes low nibbles | 64 bytes high 2-bit pairs | 16 int8 scales | f16 d

__host__ __device__ inline float ld_f16(const u8* p) { return f16_bits_to_f32((u16)(p[0] | (p[1] << 8))); }

__host__ __device__ inline float q4_0_elem(const u8* b, int k) {
    const u8 q = b[2 + (k & 15)];
    const int v = k < 16 ? (q & 0xF) : (q >> 4);
    return (float)(v - 8) * ld_f16(b);
}

__host__ __device__ inline float q8_0_elem(const u8* b, int k) {
    return (float)(signed char)b[2 + k] * ld_f16(b);
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block (GGML's get_scale_min_k4)
__host__ __device__ inline void scale_min_k4(int j, const u8* q, int* sc, int* mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

__host__ __device__ inline float q4_k_elem(const u8* b, int k) {
    const int j = k >> 5, pair = k >> 6, l = k & 31;  // sub-block j = 2 * pair + (high nibble ? 1 : 0)
    int sc, mn;
    scale_min_k4(j, b + 4, &sc, &mn);
    const u8 q = b[16 + 32 * pair + l];
    const int v = (j & 1) ? (q >> 4) : (q & 0xF);
    const float dl = ld_f16(b) * (float)sc, ml = ld_f16(b + 2) * (float)mn;
    return dl * (float)v - ml;
}

__host__ __device__ inline float q6_k_elem(const u8* b, int k) {
    const int n = k >> 7, r = k & 127, quarter = r >> 5, l = r & 31;  // 2 halves of 4 x 32 elements
    const u8* ql = b + 64 * n;
    const u8 qh = b[128 + 32 * n + l];
    const signed char* sc = (const signed char*)(b + 192) + 8 * n;
    const int lo = (quarter & 1) ? ql[l + 32] : ql[l];
    const int nib = (quarter & 2) ? (lo >> 4) : (lo & 0xF);
    const int q = (nib | (((qh >> (2 * quarter)) & 3) << 4)) - 32;
    const float dl = ld_f16(b + 208) * (float)sc[(l >> 4) + 2 * quarter];
    return dl * (float)q;
}

// Dispatch by GGML type id (Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14).
template <int TYPE> struct qtype;
template <> struct qtype<2>  { enum { BLOCK = QK4_0, BYTES = Q4_0_BYTES }; static __host__ __device__ float elem(const u8* b, int k) { return q4_0_elem(b, k); } };
template <> struct qtype<8>  { enum { BLOCK = QK8_0, BYTES = Q8_0_BYTES }; static __host__ __device__ float elem(const u8* b, int k) { return q8_0_elem(b, k); } };
template <> struct qtype<12> { enum { BLOCK = QK_K, BYTES = Q4_K_BYTES }; static __host__ __device__ float elem(const u8* b, int k) { return q4_k_elem(b, k); } };
template <> struct qtype<14> { enum { BLOCK = QK_K, BYTES = Q6_K_BYTES }; static __host__ __device__ float elem(const u8* b, int k) { return q6_k_elem(b, k); } };

// Element c of row r of a (rows, cols) weight stored as consecutive blocks per row.
template <int TYPE>
__host__ __device__ inline float q_at(const u8* raw, i64 r, int c, i64 row_bytes) {
    typedef qtype<TYPE> Q;
    return Q::elem(raw + r * row_bytes + (i64)(c / Q::BLOCK) * Q::BYTES, c % Q::BLOCK);
}
