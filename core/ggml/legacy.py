"""The 32-element GGML block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.

Bit-exact with ggml-quants.c `quantize_row_q*_ref` / `dequantize_row_q*` (and so with gguf-py's
numpy port). Every function maps (n_blocks, 32) float32 <-> (n_blocks, type_size) uint8 and is
vectorized over blocks. Block layouts (ggml-common.h):
    Q4_0: f16 d | 16 B nibbles                 x = d * (q - 8)
    Q4_1: f16 d | f16 m | 16 B nibbles         x = d * q + m
    Q5_0: f16 d | u32 high bits | 16 B nibbles x = d * (q - 16)
    Q5_1: f16 d | f16 m | u32 high bits | 16 B x = d * q + m
    Q8_0: f16 d | 32 x i8                      x = d * q
Nibble order: byte j holds element j (low nibble) and element j + 16 (high nibble).
"""
from __future__ import annotations

import numpy as np

from . import types as T


def f16_bytes(d):  # (n, k) float32 -> (n, 2k) uint8, round-to-nearest-even like GGML_FP32_TO_FP16
    return d.astype(np.float16).view(np.uint8)


def f16_at(blocks, start):  # the f16 at byte `start` of every block -> (n_blocks, 1) float32
    return blocks[:, start:start + 2].view(np.float16).astype(np.float32)


def _inv(d):
    # id = d ? 1/d : 0, without a divide-by-zero warning
    with np.errstate(divide="ignore"):
        return np.where(d == 0, np.float32(0), np.float32(1) / d)


def _first_equal(blocks, v):
    # the first element equal to v, with its own sign: C's strict-compare loops keep the first of
    # several equal candidates, which decides the sign of a zero scale (-0.0 vs 0.0) on zero blocks
    i = np.argmax(blocks == v, axis=-1)[:, None]
    return np.take_along_axis(blocks, i, axis=-1)  # (n_blocks, 1)


def _absmax_signed(blocks):
    # the element of largest magnitude, sign kept; an all-zero block gives +0.0 (C starts from max = 0.0f)
    a = np.abs(blocks)
    amax = a.max(axis=-1, keepdims=True)
    i = np.argmax(a == amax, axis=-1)[:, None]
    return np.where(amax > 0, np.take_along_axis(blocks, i, axis=-1), np.float32(0))


def _pack_nibbles(q):  # (n, 32) uint8 in 0..15 -> (n, 16)
    return q[:, :16] | (q[:, 16:] << np.uint8(4))


def unpack_nibbles(qs):  # (n, 16) uint8 -> (n, 32) uint8
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)


def _high_bits(q):  # bit 4 of each of 32 values -> (n, 4) uint8 (a little-endian u32, bit j = element j)
    return np.packbits((q >> np.uint8(4)).astype(np.uint8), axis=-1, bitorder="little")


def unpack_high_bits(qh):  # (n, 4) uint8 -> (n, 32) uint8 of 0/1
    return np.unpackbits(qh, axis=-1, bitorder="little")


def _trunc_u8(v, hi):
    # C: MIN(hi, (int8_t)(v)) on values already >= 0
    return np.minimum(np.trunc(v).astype(np.uint8), np.uint8(hi))


# ----------------------------------------------------------------------------- Q4_0 / Q5_0

def quantize_q4_0(blocks):
    d = _absmax_signed(blocks) / np.float32(-8)
    q = _trunc_u8(blocks * _inv(d) + np.float32(8.5), 15)
    return np.concatenate([f16_bytes(d), _pack_nibbles(q)], axis=-1)


def _nibbles_f32(qs):
    # (n, 16) uint8 -> (n, 32) float32 levels, written straight into one output (the hot path of
    # quantized matmul: fewer full-size temporaries than unpack + cast + arithmetic)
    out = np.empty((qs.shape[0], 32), np.float32)
    out[:, :16] = qs & np.uint8(0x0F)
    out[:, 16:] = qs >> np.uint8(4)
    return out


def dequantize_q4_0(blocks):
    out = _nibbles_f32(blocks[:, 2:])
    out -= np.float32(8)
    out *= f16_at(blocks, 0)
    return out


def quantize_q5_0(blocks):
    d = _absmax_signed(blocks) / np.float32(-16)
    q = _trunc_u8(blocks * _inv(d) + np.float32(16.5), 31)
    return np.concatenate([f16_bytes(d), _high_bits(q), _pack_nibbles(q & np.uint8(0x0F))], axis=-1)


def dequantize_q5_0(blocks):
    q = unpack_nibbles(blocks[:, 6:]) | (unpack_high_bits(blocks[:, 2:6]) << np.uint8(4))
    return f16_at(blocks, 0) * (q.astype(np.int8) - np.int8(16)).astype(np.float32)


# ----------------------------------------------------------------------------- Q4_1 / Q5_1

def _min_max_scale(blocks, levels):
    lo = _first_equal(blocks, blocks.min(axis=-1, keepdims=True))
    hi = _first_equal(blocks, blocks.max(axis=-1, keepdims=True))
    d = (hi - lo) / np.float32(levels)
    return d, lo


def quantize_q4_1(blocks):
    d, m = _min_max_scale(blocks, 15)
    q = _trunc_u8((blocks - m) * _inv(d) + np.float32(0.5), 15)
    return np.concatenate([f16_bytes(d), f16_bytes(m), _pack_nibbles(q)], axis=-1)


def dequantize_q4_1(blocks):
    out = _nibbles_f32(blocks[:, 4:])
    out *= f16_at(blocks, 0)
    out += f16_at(blocks, 2)
    return out


def quantize_q5_1(blocks):
    d, m = _min_max_scale(blocks, 31)
    q = _trunc_u8((blocks - m) * _inv(d) + np.float32(0.5), 31)
    return np.concatenate([f16_bytes(d), f16_bytes(m), _high_bits(q), _pack_nibbles(q & np.uint8(0x0F))], axis=-1)


def dequantize_q5_1(blocks):
    q = unpack_nibbles(blocks[:, 8:]) | (unpack_high_bits(blocks[:, 4:8]) << np.uint8(4))
    return f16_at(blocks, 0) * q.astype(np.float32) + f16_at(blocks, 2)


# ----------------------------------------------------------------------------- Q8_0

def round_half_away(v):
    # C roundf: halves go away from zero (np.round goes to even). floor(|v| + 0.5) would round
    # 0.49999997 up in float32, so add the rounded-off fraction (0 or 1) to floor(|v|) instead.
    a = np.abs(v)
    f = np.floor(a)
    return np.copysign(f + np.floor(np.float32(2) * (a - f)), v)


def quantize_q8_0(blocks):
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)
    q = round_half_away(blocks * _inv(d)).astype(np.int8)
    return np.concatenate([f16_bytes(d), q.view(np.uint8)], axis=-1)


def dequantize_q8_0(blocks):
    out = blocks[:, 2:].view(np.int8).astype(np.float32)
    out *= f16_at(blocks, 0)
    return out


for _name in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0"):
    _t = T.get(_name)
    _t.quantize_blocks, _t.dequantize_blocks = globals()["quantize_" + _name], globals()["dequantize_" + _name]
