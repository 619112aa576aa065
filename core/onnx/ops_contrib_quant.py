"""onnxruntime's contrib quantized operators (domain com.microsoft): MatMulNBits (onnxruntime's
MatMulNBitsQuantizer, transformers.js q4 and onnxruntime-genai int4 files), GatherBlockQuantized (their quantized
embedding tables), MatMulIntegerToFloat and DynamicQuantizeMatMul (its dynamic int8 quantizer's fused forms), and
QuantizeLinear / DequantizeLinear in the contrib domain (per tensor or per axis).

MatMulNBits keeps its weight quantized: it is read once at load into an ember.ops_blockwise.BlockWeight (the
weight's inputs are host initializers: `host=` below) and multiplied by the device's nbits_matmul kernel.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..ops_blockwise import BITS, BlockWeight, unpack
from .guard import node_error, sized
from .ops_quant import _dequantize_linear, _dynamic_quantize, _exact_int_matmul, _centered, _quantize_linear
from .registry import op
from .values import cast, host

MS = "com.microsoft"


def _cached(at, what, inputs, make):
    """A value derived from the node's constant inputs (the same Tensors every run), made on its first run."""
    hit = at._decoded.get(what)
    if hit is None or len(hit[0]) != len(inputs) or any(a is not b for a, b in zip(hit[0], inputs)):
        hit = at._decoded[what] = (tuple(inputs), make())
    return hit[1]


# ====================================================================== MatMulNBits

def _block_weight(at, b, scales, zp, n, k, bits, block):
    blocks = -(-k // block)
    blob = block * bits // 8
    packed = host(b)
    if packed.dtype != np.uint8 or packed.size != n * blocks * blob:
        raise node_error(at, f"B {packed.dtype} {packed.shape} must be uint8 (N={n}, blocks={blocks}, "
                             f"{blob} bytes a block) for K={k}, bits={bits}, block_size={block}")
    s = host(scales).astype(np.float32)
    if s.size != n * blocks:
        raise node_error(at, f"scales {s.shape} must hold N x blocks = {n} x {blocks} values")
    zeros = None
    if zp is not None:
        z = host(zp)
        if z.dtype == np.uint8:                                 # packed like B, per row of N
            per_row = -(-blocks * bits // 8)
            if z.size != n * per_row:
                raise node_error(at, f"packed zero_points {z.shape} must be (N={n}, {per_row}) uint8")
            zeros = unpack(z.reshape(n, per_row), bits)[:, :blocks].astype(np.float32)
        else:                                                   # one float per block
            if z.size != n * blocks:
                raise node_error(at, f"zero_points {z.shape} must hold N x blocks = {n} x {blocks} values")
            zeros = z.astype(np.float32).reshape(n, blocks)
    return BlockWeight(packed.reshape(n, -1), s.reshape(n, blocks), zeros, bits, block, (n, k),
                       name=at.node.name or "MatMulNBits")


def _regrouped(ctx, at, w, g_idx):
    """g_idx (K) names each input feature's block (GPTQ's act-order): the identity k // block keeps the weight
    quantized; any other grouping is dequantized once with each feature's own block (the input is deprecated)."""
    g = host(g_idx).astype(np.int64).reshape(-1)
    n, k = w.shape
    if g.size != k or g.min(initial=0) < 0 or g.max(initial=0) >= w.scales.shape[1]:
        raise node_error(at, f"g_idx must be {k} block numbers below {w.scales.shape[1]}")
    if np.array_equal(g, np.arange(k) // w.block):
        return w
    levels = unpack(w.packed, w.bits).reshape(n, -1)[:, :k].astype(np.float32)
    dense = (levels - w.zeros[:, g]) * w.scales[:, g]                                # (N, K)
    return ctx.const(np.ascontiguousarray(dense.T))                                 # (K, N) for a plain matmul


@op("MatMulNBits", domain=MS, host=(1, 2, 3, 4))
def _matmul_nbits(ctx, ins, at):
    a, b, scales = ins[:3]
    zp, g_idx, bias = (list(ins[3:6]) + [None] * 3)[:3]
    n, k, bits, block = at.i("N"), at.i("K"), at.i("bits", 4), at.i("block_size")
    if None in (n, k, block) or n < 0 or k < 0:
        raise node_error(at, "attributes N, K and block_size are required")
    if bits not in BITS or block < 16 or block & (block - 1):
        raise node_error(at, f"bits={bits}, block_size={block}: bits must be one of {BITS}, the block a power of "
                             "two of at least 16")
    if at.i("weight_prepacked", 0):
        raise node_error(at, "weight_prepacked (a CUDA-specific layout) is not supported")
    if a.shape[-1] != k:
        raise node_error(at, f"A {tuple(a.shape)} must end in K={k}")
    if 0 in tuple(b.shape):                                    # an omitted projection: zeros (or the bias)
        y = a.new_zeros(tuple(sized(at, "N", (*a.shape[:-1], n))))
        return y + cast(bias, a.dtype) if bias is not None else y
    w = _cached(at, "nbits", (b, scales, zp), lambda: _block_weight(at, b, scales, zp, n, k, bits, block))
    if g_idx is not None:
        w = _cached(at, "g_idx", (b, g_idx), lambda: _regrouped(ctx, at, w, g_idx))
    y = w.matmul_t(a) if isinstance(w, BlockWeight) else cast(a, D.float32) @ w   # (..., N) float32
    y = cast(y, a.dtype)
    return y + bias if bias is not None else y


# ====================================================================== GatherBlockQuantized

@op("GatherBlockQuantized", domain=MS, host=(0, 2, 3))
def _gather_block_quantized(ctx, ins, at):
    """Rows of a block-quantized table picked by `indices` (out of range: zeros), dequantized on the host (only
    the picked rows: token ids are few) and put on the device."""
    data, idx, scales = ins[:3]
    zp = ins[3] if len(ins) > 3 else None
    d = host(data)
    s = host(scales).astype(np.float32)
    declared = ctx.session.value_types.get(at.node.input[0])
    bits, block = at.i("bits", 4), at.i("block_size", 128)
    gax, qax = at.i("gather_axis", 0), at.i("quantize_axis", 1)
    packed = declared == 2 and bits < 8                       # uint8 holding 8 / bits levels a byte (last axis)
    if declared in (21, 22):                                  # int4 / uint4: ember holds one value a byte already
        bits = 4
    elif declared != 2:
        raise node_error(at, f"data of ONNX type {declared} is not supported (int4, uint4 or uint8)")
    shape = list(d.shape)
    if packed:
        shape[-1] *= 8 // bits
    r = len(shape)
    gax, qax = gax % r, qax % r
    if packed and gax == r - 1:
        raise node_error(at, "packed uint8 data is gathered along another axis than the packed last one")
    i = host(idx).astype(np.int64)
    n_rows = shape[gax]
    i = np.where(i < 0, i + n_rows, i)
    bad = (i < 0) | (i >= n_rows)
    rows = np.take(d, np.where(bad, 0, i).reshape(-1), axis=gax)               # picked rows, still quantized
    sc = np.take(s, np.where(bad, 0, i).reshape(-1), axis=gax) if s.shape[gax] == n_rows else s
    levels = unpack(rows, bits) if packed else rows
    levels = levels.astype(np.float32)
    if zp is not None:
        z = host(zp)
        if packed:
            z = unpack(z, bits)[..., :s.shape[-1]]
        z = np.take(z, np.where(bad, 0, i).reshape(-1), axis=gax) if z.shape[gax] == n_rows else z
        zeros = z.astype(np.float32)
    else:
        zeros = np.float32(1 << (bits - 1)) if declared == 2 else np.float32(0)
    if not isinstance(zeros, np.float32):
        zeros = np.repeat(zeros, block, axis=qax)
        zeros = np.take(zeros, np.arange(levels.shape[qax]), axis=qax)
    scale = np.take(np.repeat(sc, block, axis=qax), np.arange(levels.shape[qax]), axis=qax)
    out = (levels - zeros) * scale
    keep = ~bad.reshape(-1)
    if not keep.all():
        shape_b = [1] * out.ndim
        shape_b[gax] = keep.size
        out = out * keep.reshape(shape_b)
    out = np.moveaxis(out, gax, 0).reshape(*i.shape, *np.delete(levels.shape, gax)) if gax else \
        out.reshape(*i.shape, *levels.shape[1:])
    return cast(ctx.const(out.astype(np.float32)), scales.dtype)


# ====================================================================== int8 matmuls with float outputs

def _scaled(prod, a_scale, b_scale):
    """The int32 product as float32 times a's scale (scalar) and b's (scalar or per column)."""
    return cast(prod, D.float32) * cast(a_scale, D.float32) * cast(b_scale, D.float32)


@op("MatMulIntegerToFloat", domain=MS)
def _matmul_integer_to_float(ctx, ins, at):
    a, b, a_scale, b_scale = ins[:4]
    a_zp, b_zp, bias = (list(ins[4:7]) + [None] * 3)[:3]
    y = _scaled(_exact_int_matmul(_centered(a, a_zp), _centered(b, b_zp)), a_scale, b_scale)
    y = cast(y, a_scale.dtype)
    return y + bias if bias is not None else y


@op("DynamicQuantizeMatMul", domain=MS)
def _dynamic_quantize_matmul(ctx, ins, at):
    """A quantized to uint8 per tensor as DynamicQuantizeLinear does, times int8/uint8 B: float32 out."""
    a, b, b_scale = ins[:3]
    b_zp, bias = (list(ins[3:5]) + [None] * 2)[:2]
    aq, a_scale, a_zp = _dynamic_quantize(ctx, [a], at)
    y = _scaled(_exact_int_matmul(_centered(aq, a_zp), _centered(b, b_zp)), a_scale, b_scale)
    return y + bias if bias is not None else y


# ====================================================================== QuantizeLinear / DequantizeLinear

op("QuantizeLinear", domain=MS)(_quantize_linear)
op("DequantizeLinear", domain=MS)(_dequantize_linear)
