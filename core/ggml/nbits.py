"""The other block-quantized layout ember multiplies without widening: onnxruntime's MatMulNBits (its
MatMulNBitsQuantizer, transformers.js q4 and onnxruntime-genai int4 files). Beside GGML's codecs because every
layer that touches such a weight (the backends' kernels, the tensor layer's BlockWeight) reads it with these.

A weight W (N, K) is quantized along K in blocks of `block` values (a power of two, at least 16); each block of
row n holds `bits`-bit levels packed little-endian into bytes (bits 2, 4 or 8: the first value in the low bits),
with a float scale and a zero point:

    W[n, k] = (level[n, k] - zero[n, k // block]) * scale[n, k // block]

K need not fill the last block (its tail levels are padding).
"""
from __future__ import annotations

import numpy as np

BITS = (2, 4, 8)


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes (..., n) -> uint8 levels (..., n * 8 / bits), the low bits first."""
    if bits == 8:
        return packed
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    out = np.empty(packed.shape + (per,), np.uint8)
    for i in range(per):
        np.right_shift(packed, np.uint8(i * bits), out=out[..., i])
        out[..., i] &= mask
    return out.reshape(*packed.shape[:-1], -1)


def dequantize(packed, scales, zeros, bits, block, shape) -> np.ndarray:
    """float32 (N, K) from packed (N, blocks * block * bits / 8), scales and zeros (N, blocks)."""
    n, k = shape
    levels = unpack(np.asarray(packed).reshape(n, -1), bits).reshape(n, -1, block).astype(np.float32)
    w = (levels - zeros[:, :, None]) * scales[:, :, None]                       # (N, blocks, block)
    return np.ascontiguousarray(w.reshape(n, -1)[:, :k])
