"""ONNX quantized operators on ember Tensors: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products run as float32 matmuls/convs, which are exact while every partial sum stays below
2**24; MatMulInteger splits the reduction into chunks that guarantee that (255 * 255 * 256 < 2**24),
so every backend (WebGPU has no integer matmul) gives the exact int32 result.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_movement as M
from ..autograd import prim_unary
from ..linalg import matmul
from . import lowbit
from .ops_nn import _conv
from .registry import op
from .tensor_data import INT8, INT16, UINT8, UINT16
from .values import axis, cast, ember_dtype

_RANGES = {UINT8: (0, 255), INT8: (-128, 127), UINT16: (0, 65535), INT16: (-32768, 32767)}
_EXACT_K = 256  # float32 sums of 256 products of two 8-bit values are exact


def _declared(ctx, at, i):
    """The declared ONNX type of the node's input i (held-wide types need it), or None."""
    names = at.node.input
    return ctx.session.value_types.get(names[i]) if i < len(names) and names[i] else None


def _broadcastable(v, x, ax, block):
    """A scale or zero point laid out against x: scalar, per-axis (1-D along ax) or blocked."""
    if v.ndim == 0 or int(np.prod(v.shape)) == 1:
        return M.reshape(v, *([1] * x.ndim)) if x.ndim else M.reshape(v)
    if not block:
        return M.reshape(v, *[v.shape[0] if i == ax else 1 for i in range(x.ndim)])
    v = M.repeat_interleave(v, block, ax)
    return M.narrow(v, ax, 0, x.shape[ax])


def _round(x):
    return prim_unary("round", x)  # half to even, as ONNX's quantizers


def _saturate(q, to):
    """An integer-valued float tensor as ONNX type `to`, clipped to its range."""
    if to in lowbit.INTS:
        return lowbit.clip_int(q, to)
    lo, hi = _RANGES[to]
    return cast(E.clamp(q, float(lo), float(hi)), ember_dtype(to))


def quantize(x, scale, zp, to, saturate=True):
    """x / scale (+ zp) in ONNX type `to` (ints: rounded half to even and clipped; floats: rounded)."""
    y = x / scale
    if to in lowbit.FLOATS and to != lowbit.E2M1:  # float8: the zero point is ignored (it must be 0)
        return lowbit.round_to(y, to, saturate)
    if to == lowbit.E2M1:
        return lowbit.round_to(y if zp is None else y + zp, to)
    q = _round(y)
    if zp is not None:
        q = q + cast(zp, q.dtype)
    return _saturate(q, to)


def _quant_params(ctx, ins, at):
    x = ins[0]
    per_axis = int(np.prod(ins[1].shape)) > 1  # the axis matters (and must exist) only then
    ax = axis(at.i("axis", 1), x.ndim, ctx) if per_axis else 0
    block = at.i("block_size", 0)
    scale = _broadcastable(ins[1], x, ax, block)
    zp = ins[2] if len(ins) > 2 else None
    return x, scale, (_broadcastable(zp, x, ax, block) if zp is not None else None)


@op("QuantizeLinear", since=10)
def _quantize_linear(ctx, ins, at):
    x, scale, zp = _quant_params(ctx, ins, at)
    to = _declared(ctx, at, 2) if zp is not None else None
    to = to or at.i("output_dtype", 0) or UINT8
    precision = at.i("precision", 0)
    work = ember_dtype(precision) if precision else (D.float32 if x.dtype.itemsize < 4 else x.dtype)
    return quantize(cast(x, work), cast(scale, work), zp, to, bool(at.i("saturate", 1)))


@op("DequantizeLinear", since=10)
def _dequantize_linear(ctx, ins, at):
    x, scale, zp = _quant_params(ctx, ins, at)
    xf = cast(x, D.float32)
    if zp is not None and _declared(ctx, at, 0) not in lowbit.FLOATS:  # float8/float4: zero point ignored
        xf = xf - cast(zp, D.float32)
    out = at.i("output_dtype", 0)
    return cast(xf * cast(scale, D.float32), ember_dtype(out) if out else ins[1].dtype)


@op("DynamicQuantizeLinear", since=11)
def _dynamic_quantize(ctx, ins, at):
    x = cast(ins[0], D.float32)
    lo = E.minimum(x.min(), 0.0)
    hi = E.maximum(x.max(), 0.0)
    scale = (hi - lo) / 255.0
    zp = _saturate(_round(-lo / scale), UINT8)
    return [quantize(x, scale, zp, UINT8), scale, zp]


def _centered(v, zp, per_row_axis=None):
    """An integer tensor minus its zero point, as float32 (exact for 8/16-bit values)."""
    vf = cast(v, D.float32)
    if zp is None:
        return vf
    z = cast(zp, D.float32)
    if per_row_axis is not None and z.ndim == 1 and z.shape[0] > 1:  # A's per-row zero points
        z = M.reshape(z, *z.shape, 1)
    return vf - z


def _exact_int_matmul(a, b):
    """float32 matmul of integer values, exact: the K axis in chunks whose sums stay below 2**24."""
    k = a.shape[-1]
    out = None
    for s in range(0, k, _EXACT_K):
        n = min(_EXACT_K, k - s)
        part = cast(matmul(M.narrow(a, -1, s, n) if n < k else a, M.narrow(b, -2, s, n) if n < k else b), D.int32)
        out = part if out is None else out + part
    return out


@op("MatMulInteger", since=10)
def _matmul_integer(ctx, ins, at):
    a, b = ins[0], ins[1]
    azp = ins[2] if len(ins) > 2 else None
    bzp = ins[3] if len(ins) > 3 else None
    return _exact_int_matmul(_centered(a, azp, per_row_axis=True), _centered(b, bzp))


def _requantize(y, y_scale, y_zp, to):
    return quantize(y, cast(y_scale, D.float32), y_zp, to)


@op("QLinearMatMul", since=10)
def _qlinear_matmul(ctx, ins, at):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = ins[:8]
    prod = cast(_exact_int_matmul(_centered(a, a_zp, per_row_axis=True), _centered(b, b_zp)), D.float32)
    scale = cast(a_s, D.float32) * cast(b_s, D.float32)
    if scale.ndim == 1 and scale.shape[0] > 1 and a_s.ndim == 1 and a_s.shape[0] > 1:
        scale = M.reshape(scale, -1, 1)
    to = _declared(ctx, at, 7) or UINT8
    return _requantize(prod * scale, y_s, y_zp, to)


def _per_out_channel(v, ndim):
    return M.reshape(v, -1, *([1] * (ndim - 1))) if v.ndim == 1 and v.shape[0] > 1 else v


@op("ConvInteger", since=10)
def _conv_integer(ctx, ins, at):
    x, w = ins[0], ins[1]
    xzp = ins[2] if len(ins) > 2 else None
    wzp = ins[3] if len(ins) > 3 else None
    xf = _centered(x, xzp)
    wf = cast(w, D.float32) - (_per_out_channel(cast(wzp, D.float32), w.ndim) if wzp is not None else 0.0)
    return cast(_conv(ctx, [xf, wf], at), D.int32)


@op("QLinearConv", since=10)
def _qlinear_conv(ctx, ins, at):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = ins[:8]
    bias = ins[8] if len(ins) > 8 else None
    xf = _centered(x, x_zp)
    wf = cast(w, D.float32) - _per_out_channel(cast(w_zp, D.float32), w.ndim)
    acc = _conv(ctx, [xf, wf, cast(bias, D.float32) if bias is not None else None], at)
    scale = cast(x_s, D.float32) * cast(w_s, D.float32)  # per output channel when w_scale is
    if scale.ndim == 1 and scale.shape[0] > 1:
        scale = M.reshape(scale, 1, -1, *([1] * (acc.ndim - 2)))
    return _requantize(acc * scale, y_s, y_zp, _declared(ctx, at, 7) or UINT8)

