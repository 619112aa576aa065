"""Weights repacked once for the native host's quantized matmul: int8 levels, a float32 scale per group of 16 or
32 and an optional float32 offset, so that  w = scale * q - offset  (exactly the products GGML's dequantize
forms, see legacy.py / kquants.py).

Why: numpy decodes 4/5/6-bit blocks with several full-size passes (unpack, shift, or, cast) for every token;
from int8 levels a slab is one cast into a reused float32 buffer and one in-place multiply, then BLAS. The
offsets never touch the slab: their contribution is sum_g offset[n, g] * sum(x over group g), a small matmul.
Memory: 1 byte per weight plus 4 bytes per group (~1.13-1.25 B/weight) beside the GGML blocks, never a float32
copy; for Q8_0 the levels are a view of the blocks themselves (only the scales are new).
"""
from __future__ import annotations

import numpy as np

from ..ggml import types as T
from ..ggml.kquants import SHIFT2, kq_scale_min, unpack_nibble_pairs
from ..ggml.legacy import f16_at, unpack_high_bits, unpack_nibbles

CHUNK_BLOCKS = 1 << 14  # blocks repacked per step: bounds the temporaries on the 262k-row embedding


class Levels:
    """q (rows, k / group, group) int8, scale (rows, k / group) float32, offset like scale or None."""

    __slots__ = ("q", "scale", "offset", "q_is_view")

    def __init__(self, q, scale, offset, q_is_view=False):
        self.q, self.scale, self.offset, self.q_is_view = q, scale, offset, q_is_view

    @property
    def nbytes(self):  # what the repack added (levels that are a view of the blocks cost nothing)
        return (0 if self.q_is_view else self.q.nbytes) + self.scale.nbytes + \
            (0 if self.offset is None else self.offset.nbytes)


# per type: blocks (nb, type_size) uint8 -> (q (nb, block) int8, scale (nb, groups), offset (nb, groups) | None)

def _q4_0(b):
    return unpack_nibbles(b[:, 2:]).view(np.int8) - np.int8(8), f16_at(b, 0), None


def _q4_1(b):
    return unpack_nibbles(b[:, 4:]).view(np.int8), f16_at(b, 0), -f16_at(b, 2)


def _q5_0(b):
    q = unpack_nibbles(b[:, 6:]) | (unpack_high_bits(b[:, 2:6]) << np.uint8(4))
    return q.view(np.int8) - np.int8(16), f16_at(b, 0), None


def _q5_1(b):
    q = unpack_nibbles(b[:, 8:]) | (unpack_high_bits(b[:, 4:8]) << np.uint8(4))
    return q.view(np.int8), f16_at(b, 0), -f16_at(b, 2)


def _q8_0(b):
    return b[:, 2:].view(np.int8), f16_at(b, 0), None


def _q4_k(b):
    dl, ml = kq_scale_min(b)  # (nb, 8, 1) each
    return unpack_nibble_pairs(b[:, 16:]).reshape(-1, 256).view(np.int8), dl[:, :, 0], ml[:, :, 0]


def _q5_k(b):
    dl, ml = kq_scale_min(b)
    hi = (b[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[None, :, None]) & np.uint8(1)  # (nb, 8, 32)
    q = unpack_nibble_pairs(b[:, 48:]) | (hi << np.uint8(4))
    return q.reshape(-1, 256).view(np.int8), dl[:, :, 0], ml[:, :, 0]


def _q6_k(b):
    ql, qh, sc = b[:, :128], b[:, 128:192], b[:, 192:208]
    lo = (ql.reshape(-1, 2, 1, 2, 32) >> np.array([0, 4], np.uint8)[None, None, :, None, None]) & np.uint8(0xF)
    hi = (qh.reshape(-1, 2, 1, 32) >> SHIFT2[None, None, :, None]) & np.uint8(3)
    q = (lo.reshape(-1, 2, 4, 32) | (hi << np.uint8(4))).view(np.int8) - np.int8(32)
    return q.reshape(-1, 256), f16_at(b, 208) * sc.view(np.int8).astype(np.float32), None


LEVELS = {"Q4_0": (_q4_0, 32), "Q4_1": (_q4_1, 32), "Q5_0": (_q5_0, 32), "Q5_1": (_q5_1, 32),
            "Q8_0": (_q8_0, 32), "Q4_K": (_q4_k, 32), "Q5_K": (_q5_k, 32), "Q6_K": (_q6_k, 16)}


def supports(t) -> bool:
    return T.get(t).name in LEVELS


def repack(rows: np.ndarray, t) -> Levels:
    """uint8 GGML rows (r, row_bytes) of type t -> Levels of r rows of k elements."""
    t = T.get(t)
    fn, group = LEVELS[t.name]
    r, k = rows.shape[0], rows.shape[1] // t.type_size * t.block_size
    blocks = rows.reshape(-1, t.type_size)
    g = k // group
    if t.name == "Q8_0":  # the levels are in the blocks already: a strided view (r, g, 32), no copy
        q = rows.reshape(r, g, t.type_size)[:, :, 2:].view(np.int8)
        return Levels(q, np.ascontiguousarray(f16_at(blocks, 0).reshape(r, g)), None, q_is_view=True)
    q = np.empty((blocks.shape[0], t.block_size), np.int8)
    per = t.block_size // group
    scale = np.empty((blocks.shape[0], per), np.float32)
    offset = None
    for s in range(0, blocks.shape[0], CHUNK_BLOCKS):
        qs, sc, off = fn(blocks[s:s + CHUNK_BLOCKS])
        q[s:s + CHUNK_BLOCKS], scale[s:s + CHUNK_BLOCKS] = qs, sc
        if off is not None:
            if offset is None:
                offset = np.empty_like(scale)
            offset[s:s + CHUNK_BLOCKS] = off
    return Levels(q.reshape(r, g, group), scale.reshape(r, g), None if offset is None else offset.reshape(r, g))
