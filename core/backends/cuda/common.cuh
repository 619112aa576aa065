// Shared helpers for ember's CUDA kernels: storage <-> float32 for each dtype, block reductions.
// Header-free on purpose (no cuda_fp16.h): NVRTC through CuPy and nvcc both compile it as is.
// float16 and bfloat16 arrive as raw 16-bit patterns (ember stores bfloat16 as uint16 bits).
#pragma once

typedef unsigned short u16;
typedef unsigned char u8;
typedef long long i64;  // 64-bit on every host (long is 32-bit on Windows)

// ---------------------------------------------------------------- bit casts, float16 / bfloat16 bits
__host__ __device__ inline float bits_as_float(unsigned u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { unsigned u; float f; } v;
    v.u = u;
    return v.f;
#endif
}

__host__ __device__ inline unsigned float_as_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    union { float f; unsigned u; } v;
    v.f = f;
    return v.u;
#endif
}

__host__ __device__ inline float f16_bits_to_f32(u16 h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else  // host build (tests decode blocks on the CPU): exact, by bit construction
    unsigned sign = (unsigned)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    union { unsigned u; float f; } v;
    if (e == 0) {  // zero or subnormal: m * 2^-24 is exact in float32
        v.f = (float)m * 5.9604644775390625e-8f;
        v.u |= sign;
    } else if (e == 31) {
        v.u = sign | 0x7F800000u | (m << 13);
    } else {
        v.u = sign | ((e + 112) << 23) | (m << 13);
    }
    return v.f;
#endif
}

__host__ __device__ inline u16 f32_to_f16_bits(float f) {
#ifdef __CUDA_ARCH__
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else  // host build (tests run the kernels on the CPU): round to nearest even, as cvt.rn
    union { float f; unsigned u; } v;
    v.f = f;
    const unsigned sign = (v.u >> 16) & 0x8000u, m = v.u & 0x7FFFFFu;
    const int e = (int)((v.u >> 23) & 0xFF), he = e - 112;  // float16 exponent field
    if (e == 255) return (u16)(sign | 0x7C00u | (m ? 0x200u : 0u));
    if (he >= 31) return (u16)(sign | 0x7C00u);
    if (he <= 0) {  // float16 subnormal (or zero): mantissa with its implicit bit, shifted into place
        if (he < -10) return (u16)sign;
        const unsigned full = m | 0x800000u, shift = (unsigned)(14 - he), half = 1u << (shift - 1);
        unsigned hm = full >> shift;
        const unsigned rem = full & ((1u << shift) - 1);
        if (rem > half || (rem == half && (hm & 1))) ++hm;
        return (u16)(sign | hm);
    }
    unsigned h = sign | ((unsigned)he << 10) | (m >> 13);
    const unsigned rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry rolls into the exponent, as it should
    return (u16)h;
#endif
}

__host__ __device__ inline float bf16_bits_to_f32(u16 b) { return bits_as_float(((unsigned)b) << 16); }

__host__ __device__ inline u16 f32_to_bf16_bits(float f) {  // round to nearest even; NaN stays quiet NaN
    const unsigned u = float_as_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u16)((u >> 16) | 0x40);
    return (u16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One policy per storage dtype: T is the element type, ld/st convert to and from float32.
struct io_f32 {
    typedef float T;
    static __device__ float ld(T v) { return v; }
    static __device__ T st(float f) { return f; }
};
struct io_f16 {
    typedef u16 T;
    static __device__ float ld(T v) { return f16_bits_to_f32(v); }
    static __device__ T st(float f) { return f32_to_f16_bits(f); }
};
struct io_bf16 {
    typedef u16 T;
    static __device__ float ld(T v) { return bf16_bits_to_f32(v); }
    static __device__ T st(float f) { return f32_to_bf16_bits(f); }
};

#define EMBER_NEG_INF bits_as_float(0xFF800000u)

// ---------------------------------------------------------------- reductions
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

// Sum (or max) over the whole block; blockDim.x must be a multiple of 32 (<= 1024).
// `sh` is 32 floats of shared memory; the leading barrier lets calls reuse it back to back.
template <bool MAX>
__device__ float block_reduce(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? sh[lane] : (MAX ? EMBER_NEG_INF : 0.0f);
        w = MAX ? warp_max(w) : warp_sum(w);
        if (lane == 0) sh[0] = w;
    }
    __syncthreads();
    return sh[0];
}
