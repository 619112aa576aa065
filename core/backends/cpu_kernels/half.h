// IEEE half <-> float, exact and the same on every target (no F16C, no wasm f16): the kernels read GGML's f16
// scales and write llama.cpp's f16-rounded activation scales with these.
#pragma once
#include <stdint.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

// half at p (little-endian) -> f32, branch-free: the 15 bits shifted into an f32's exponent and mantissa are the
// value times 2^-112 (subnormal halves become normal f32s), so one exact multiply rebiases them; an all-ones
// exponent (inf, NaN) lands on 143 and is or-ed up to 255, mantissa (the NaN payload) kept.
static inline float f16_to_f32(const uint8_t *p) {
#if defined(__F16C__)  // one instruction, the same value (every half is exact as a float)
    return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8)));
#endif
    uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8), mag = (h & 0x7FFFu) << 13, bits;
    float f;
    __builtin_memcpy(&f, &mag, 4);
    f *= 0x1p112f;
    __builtin_memcpy(&bits, &f, 4);
    bits |= (0u - (uint32_t)((h & 0x7C00u) == 0x7C00u)) & 0x7F800000u;
    bits |= (h & 0x8000u) << 16;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

// f32 -> half bits, rounded to nearest even as F16C's vcvtps2ph and numpy's astype(float16) round (GGML's
// GGML_FP32_TO_FP16 on x86): subnormal results by one float addition whose rounding is the half's, normal ones
// by adding the rounding bias to the bits (a carry into the exponent is the correct rounding up, to inf too).
static inline uint16_t f32_to_f16(float f) {
    uint32_t x, sign;
    __builtin_memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    x &= 0x7FFFFFFFu;
    if (x >= 0x47800000u)  // >= 2^16: inf; NaN stays a (quiet) NaN
        return (uint16_t)(sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u));
    if (x < 0x38800000u) {  // below 2^-14: a subnormal half or zero, its 10 bits aligned at the bottom of 0.5 + f
        float v, half = 0.5f;
        uint32_t u, hb;
        __builtin_memcpy(&v, &x, 4);
        v += half;
        __builtin_memcpy(&u, &v, 4);
        __builtin_memcpy(&hb, &half, 4);
        return (uint16_t)(sign | (u - hb));
    }
    x += ((uint32_t)(15 - 127) << 23) + 0xFFFu + ((x >> 13) & 1u);
    return (uint16_t)(sign | (x >> 13));
}

static inline float f16_round(float f) {  // f rounded to a half and back
    uint16_t h = f32_to_f16(f);
    uint8_t b[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
    return f16_to_f32(b);
}
