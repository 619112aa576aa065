"""K-quants: 256-element super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (ggml-quants.c, llama.cpp 2025).

quantize_* ports `quantize_row_q*_K_ref` (what llama-quantize uses without an importance matrix),
bit-exact; dequantize_* ports `dequantize_row_q*_K`. Blocks are (n_blocks, 256) float32 <->
(n_blocks, type_size) uint8. Layouts (ggml-common.h), sub-blocks of 16 or 32 elements:
    Q2_K: scales[16] (lo 4 bits scale, hi 4 bits min) | qs[64] 2-bit | f16 d | f16 dmin
    Q3_K: hmask[32] (3rd bit) | qs[64] 2-bit | scales[12] 6-bit signed | f16 d
    Q4_K: f16 d | f16 dmin | scales[12] (8 x 6-bit scale + 8 x 6-bit min) | qs[128] 4-bit
    Q5_K: f16 d | f16 dmin | scales[12] | qh[32] (5th bit) | qs[128] 4-bit
    Q6_K: ql[128] 4-bit | qh[64] 2-bit | scales[16] i8 | f16 d
    Q8_K: f32 d | qs[256] i8 | bsums[16] i16 (sums of 16 quants, used by GGML's dot products)
"""
from __future__ import annotations

import numpy as np

from . import types as T
from .kquant_search import F, GROUP_MAX_EPS, make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, \
    seqsum, signed_absmax
from .legacy import f16_at, f16_bytes

SHIFT2 = np.array([0, 2, 4, 6], np.uint8)


def _f16_round(v):  # what GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(v)) gives back
    return v.astype(np.float16).astype(F)


def _groups(blocks, n):  # (nb, 256) -> (n, nb * 256 / n): one column per sub-block
    return np.ascontiguousarray(blocks.reshape(-1, n).T)


def _requant(x, L, d, dm, lo, hi):
    """Second pass of every K-quant: re-round x against the final (f16-rounded) scale d and offset dm.

    x, L: (n, G); d, dm: (G,). Sub-blocks whose scale rounded to 0 keep the search's levels (`if (!d) continue`).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.clip(nearest_int((x + dm) / d), lo, hi)
    return np.where(d != 0, q, L)


def _pack_2bit(L):  # (nb, 256) levels 0..3 -> (nb, 64): byte j/4 + l of each 128 holds l, l+32, l+64, l+96
    L = L.reshape(-1, 2, 4, 32) << SHIFT2[None, None, :, None]
    return np.bitwise_or.reduce(L, axis=2).reshape(-1, 64).astype(np.uint8)


def _unpack_2bit(qs):  # (nb, 64) -> (nb, 256) levels 0..3, element order of _pack_2bit
    return ((qs.reshape(-1, 2, 1, 32) >> SHIFT2[None, None, :, None]) & np.uint8(3)).reshape(-1, 256)


def _to_blocks(cols, nb):  # (n, G) per-sub-block columns -> (nb, 256) element order
    return cols.T.reshape(nb, 256)


def _max0(v, nb):  # C's `if (s > max) max = s` from 0 over each block's sub-block values
    return np.maximum(v.reshape(nb, -1).max(axis=1), F(0))


# ----------------------------------------------------------------------------- Q2_K

def quantize_q2_k(blocks):
    nb = blocks.shape[0]
    x = _groups(blocks, 16)  # (16, nb * 16)
    L, scales, mins = make_qkx2_quants(x, np.abs(x), 3, -0.5, 0.1, 15, use_mad=True)
    max_scale, max_min = _max0(scales, nb), _max0(mins, nb)  # (nb,)
    with np.errstate(divide="ignore"):
        iscale = np.where(max_scale > 0, F(15) / max_scale, F(0))[:, None]
        imin = np.where(max_min > 0, F(15) / max_min, F(0))[:, None]
    sc = nearest_int(iscale * scales.reshape(nb, 16)) & 0xFF  # (nb, 16) uint8 stores wrap as in C
    sc |= (nearest_int(imin * mins.reshape(nb, 16)) << 4) & 0xFF
    sc = sc.astype(np.uint8)
    d = np.where(max_scale > 0, max_scale / F(15), F(0))[:, None].astype(F)
    dmin = np.where(max_min > 0, max_min / F(15), F(0))[:, None].astype(F)
    dd = (_f16_round(d) * (sc & np.uint8(0xF)).astype(F)).reshape(-1)
    dm = (_f16_round(dmin) * (sc >> np.uint8(4)).astype(F)).reshape(-1)
    L = _to_blocks(_requant(x, L, dd, dm, 0, 3), nb)
    return np.concatenate([sc, _pack_2bit(L), f16_bytes(d), f16_bytes(dmin)], axis=-1)


def dequantize_q2_k(blocks):
    sc = blocks[:, :16]
    d, dmin = f16_at(blocks, 80), f16_at(blocks, 82)  # (nb, 1)
    dl = (d * (sc & np.uint8(0xF)).astype(F))[:, :, None]  # (nb, 16, 1)
    ml = (dmin * (sc >> np.uint8(4)).astype(F))[:, :, None]
    q = _unpack_2bit(blocks[:, 16:80]).reshape(-1, 16, 16).astype(F)
    return (dl * q - ml).reshape(-1, 256)


# ----------------------------------------------------------------------------- Q3_K

def _pack_scales_q3(l):  # (nb, 16) 6-bit values -> (nb, 12): low nibbles, then 2-bit tops
    low = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    top = l >> 4  # (nb, 16), 0..3; byte 8 + j%4 gets bits 2*(j/4)
    top = np.bitwise_or.reduce(top.reshape(-1, 4, 4) << (2 * np.arange(4))[None, :, None], axis=1)
    return np.concatenate([low, top], axis=-1).astype(np.uint8)


def _unpack_scales_q3(s):  # (nb, 12) -> (nb, 16) signed scales
    low = np.concatenate([s[:, :8] & np.uint8(0xF), s[:, :8] >> np.uint8(4)], axis=-1)
    top = (s[:, None, 8:12] >> (2 * np.arange(4, dtype=np.uint8))[None, :, None]) & np.uint8(3)  # (nb, 4, 4)
    return (low | (top.reshape(-1, 16) << np.uint8(4))).astype(np.int8) - np.int8(32)


def quantize_q3_k(blocks):
    nb = blocks.shape[0]
    x = _groups(blocks, 16)
    L, scales = make_q3_quants(x, 4)
    max_scale, _ = signed_absmax(scales.reshape(nb, 16).T)  # (nb,)
    has = max_scale != 0
    with np.errstate(divide="ignore"):
        iscale = np.where(has, F(-32) / max_scale, F(0))[:, None]
    l = nearest_int(iscale * scales.reshape(nb, 16))
    l = ((l + 128) & 0xFF) - 128  # int8_t l = nearest_int(...)
    packed = _pack_scales_q3(np.clip(l, -32, 31) + 32)
    packed[~has] = 0  # C memsets the scales and leaves them so when max_scale == 0
    with np.errstate(divide="ignore"):
        d = np.where(has, F(1) / iscale[:, 0], F(0))[:, None].astype(F)
    sc = _unpack_scales_q3(packed).astype(F)  # (nb, 16)
    dd = (_f16_round(d) * sc).reshape(-1)
    L = _to_blocks(_requant(x, L.astype(np.int32) - 4, dd, F(0), -4, 3) + 4, nb).astype(np.uint8)
    # bit 2 of each level goes to hmask: element j -> byte j % 32, bit j // 32
    hmask = np.bitwise_or.reduce((L >> 2).reshape(nb, 8, 32) << np.arange(8, dtype=np.uint8)[None, :, None], axis=1)
    return np.concatenate([hmask.astype(np.uint8), _pack_2bit(L & np.uint8(3)), packed, f16_bytes(d)], axis=-1)


def dequantize_q3_k(blocks):
    hmask, qs, s = blocks[:, :32], blocks[:, 32:96], blocks[:, 96:108]
    d = f16_at(blocks, 108)
    dl = (d * _unpack_scales_q3(s).astype(F))[:, :, None]  # (nb, 16, 1)
    hi = (hmask[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & np.uint8(1)  # (nb, 8, 32)
    q = _unpack_2bit(qs).astype(np.int8) - ((hi ^ np.uint8(1)) << np.uint8(2)).reshape(-1, 256).astype(np.int8)
    return (dl * q.reshape(-1, 16, 16).astype(F)).reshape(-1, 256)


# ----------------------------------------------------------------------------- Q4_K / Q5_K

def _pack_scales_k4(ls, lm):  # (nb, 8) 6-bit scales and mins -> (nb, 12)
    b0 = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    b4 = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    b8 = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return np.concatenate([b0, b4, b8], axis=-1).astype(np.uint8)


def unpack_scales_k4(s):  # (nb, 12) -> scales (nb, 8), mins (nb, 8) as uint8 (get_scale_min_k4)
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & np.uint8(63), (md & np.uint8(0xF)) | ((d >> np.uint8(6)) << np.uint8(4))], axis=-1)
    mn = np.concatenate([m & np.uint8(63), (md >> np.uint8(4)) | ((m >> np.uint8(6)) << np.uint8(4))], axis=-1)
    return sc, mn


def _quantize_qkx(blocks, nmax, rmin, nstep):
    """The part Q4_K and Q5_K share: search, 6-bit scales and mins, requantized levels (nb, 256)."""
    nb = blocks.shape[0]
    x = _groups(blocks, 32)  # (32, nb * 8)
    av_x = np.sqrt(seqsum(x * x) / F(32))
    L, scales, mins = make_qkx2_quants(x, av_x + np.abs(x), nmax, rmin, 0.1, nstep, use_mad=False)
    max_scale, max_min = _max0(scales, nb), _max0(mins, nb)
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, F(63) / max_scale, F(0))[:, None]
        inv_m = np.where(max_min > 0, F(63) / max_min, F(0))[:, None]
    ls = np.minimum(nearest_int(inv_s * scales.reshape(nb, 8)) & 0xFF, 63)  # uint8_t ls = ...; MIN(63, ls)
    lm = np.minimum(nearest_int(inv_m * mins.reshape(nb, 8)) & 0xFF, 63)
    d = (max_scale / F(63))[:, None].astype(F)
    dmin = (max_min / F(63))[:, None].astype(F)
    dd = (_f16_round(d) * ls.astype(F)).reshape(-1)
    dm = (_f16_round(dmin) * lm.astype(F)).reshape(-1)
    L = _to_blocks(_requant(x, L, dd, dm, 0, nmax), nb).astype(np.uint8)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), _pack_scales_k4(ls, lm)], axis=-1), L


def quantize_q4_k(blocks):
    head, L = _quantize_qkx(blocks, 15, -1.0, 20)
    L = L.reshape(-1, 4, 2, 32)  # (nb, pair, lo/hi nibble, 32)
    qs = (L[:, :, 0] | (L[:, :, 1] << np.uint8(4))).reshape(-1, 128)
    return np.concatenate([head, qs], axis=-1)


def kq_scale_min(blocks):  # -> per-sub-block scale and offset, (nb, 8, 1) each
    d, dmin = f16_at(blocks, 0), f16_at(blocks, 2)
    sc, mn = unpack_scales_k4(blocks[:, 4:16])
    return (d * sc.astype(F))[:, :, None], (dmin * mn.astype(F))[:, :, None]


def unpack_nibble_pairs(qs):  # (nb, 128) -> (nb, 8, 32): sub-block 2k = low nibbles of qs[32k:32k+32], 2k+1 = high
    qs = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8)[None, None, :, None]
    return (qs & np.uint8(0xF)).reshape(-1, 8, 32)


def dequantize_q4_k(blocks):
    dl, ml = kq_scale_min(blocks)
    qs = blocks[:, 16:].reshape(-1, 4, 1, 32)
    out = np.empty((blocks.shape[0], 4, 2, 32), F)  # (nb, pair, nibble, 32) = sub-block 2*pair + nibble
    out[:, :, :1] = qs & np.uint8(0xF)
    out[:, :, 1:] = qs >> np.uint8(4)
    out = out.reshape(-1, 8, 32)
    out *= dl
    out -= ml
    return out.reshape(-1, 256)


def quantize_q5_k(blocks):
    head, L = _quantize_qkx(blocks, 31, -0.5, 15)
    L = L.reshape(-1, 8, 32)  # (nb, sub-block, 32)
    qh = np.bitwise_or.reduce((L >> np.uint8(4)) << np.arange(8, dtype=np.uint8)[None, :, None], axis=1)
    lo = (L & np.uint8(0xF)).reshape(-1, 4, 2, 32)
    ql = (lo[:, :, 0] | (lo[:, :, 1] << np.uint8(4))).reshape(-1, 128)
    return np.concatenate([head, qh.astype(np.uint8), ql], axis=-1)


def dequantize_q5_k(blocks):
    dl, ml = kq_scale_min(blocks)
    hi = (blocks[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[None, :, None]) & np.uint8(1)  # (nb, 8, 32)
    q = unpack_nibble_pairs(blocks[:, 48:]) | (hi << np.uint8(4))
    return (dl * q.astype(F) - ml).reshape(-1, 256)


# ----------------------------------------------------------------------------- Q6_K

def quantize_q6_k(blocks):
    nb = blocks.shape[0]
    x = _groups(blocks, 16)
    L, scales = make_qx_quants(x, 32)
    max_scale, max_abs = signed_absmax(scales.reshape(nb, 16).T)
    zero = max_abs < GROUP_MAX_EPS  # the whole block is written as zeros
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, F(0), F(-128) / max_scale)[:, None]
        d = np.where(zero, F(0), F(1) / iscale[:, 0])[:, None].astype(F)
    sc = np.minimum(nearest_int(iscale * scales.reshape(nb, 16)), 127)
    sc = (((sc + 128) & 0xFF) - 128).astype(np.int8)  # int8_t store
    sc[zero] = 0
    dd = (_f16_round(d) * sc.astype(F)).reshape(-1)
    L = _to_blocks(_requant(x, L.astype(np.int32) - 32, dd, F(0), -32, 31) + 32, nb).astype(np.uint8)
    L[zero] = 0
    L = L.reshape(nb, 2, 4, 32)  # (nb, half, quarter, 32)
    lo = L & np.uint8(0xF)
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << np.uint8(4)), lo[:, :, 1] | (lo[:, :, 3] << np.uint8(4))],
                        axis=-1).reshape(nb, 128)
    qh = np.bitwise_or.reduce((L >> np.uint8(4)) << SHIFT2[None, None, :, None], axis=2).reshape(nb, 64)
    return np.concatenate([ql, qh.astype(np.uint8), sc.view(np.uint8), f16_bytes(d)], axis=-1)


def dequantize_q6_k(blocks):
    ql, qh, sc = blocks[:, :128], blocks[:, 128:192], blocks[:, 192:208]
    d = f16_at(blocks, 208)
    dl = (d * sc.view(np.int8).astype(F))[:, :, None]  # (nb, 16, 1)
    lo = (ql.reshape(-1, 2, 1, 2, 32) >> np.array([0, 4], np.uint8)[None, None, :, None, None]) & np.uint8(0xF)
    hi = (qh.reshape(-1, 2, 1, 32) >> SHIFT2[None, None, :, None]) & np.uint8(3)  # (nb, half, quarter, 32)
    q = (lo.reshape(-1, 2, 4, 32) | (hi << np.uint8(4))).astype(np.int8) - np.int8(32)
    return (dl * q.reshape(-1, 16, 16).astype(F)).reshape(-1, 256)


# ----------------------------------------------------------------------------- Q8_K

def quantize_q8_k(blocks):
    mx, amax = signed_absmax(blocks.T)  # (nb,)
    has = amax != 0
    with np.errstate(divide="ignore"):
        iscale = np.where(has, F(-127) / mx, F(0))[:, None]
    q = np.minimum(nearest_int(iscale * blocks), 127)
    q = (((q + 128) & 0xFF) - 128).astype(np.int8)  # (nb, 256)
    bsums = q.reshape(-1, 16, 16).astype(np.int16).sum(axis=-1, dtype=np.int16)
    with np.errstate(divide="ignore"):
        d = np.where(has, F(1) / iscale[:, 0], F(0)).astype(F)[:, None]
    return np.concatenate([d.view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)], axis=-1)


def dequantize_q8_k(blocks):
    d = np.ascontiguousarray(blocks[:, :4]).view(F)  # (nb, 1)
    return d * blocks[:, 4:260].view(np.int8).astype(F)


for _name in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k"):
    _t = T.get(_name)
    _t.quantize_blocks, _t.dequantize_blocks = globals()["quantize_" + _name], globals()["dequantize_" + _name]
