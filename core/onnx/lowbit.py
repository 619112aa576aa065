"""ONNX's sub-byte and 8-bit float types (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0, float4 e2m1,
int4/uint4, int2/uint2), which no ember backend stores: their values live in a wider ember dtype
(floats in float32, which holds every such value exactly; ints in int8/uint8).

Reading decodes the packed bits; a cast or quantization *to* one of them rounds on the device (float
formats: round-half-even to the format's grid, then saturate or overflow as ONNX says; ints: wrap
(Cast) or clip (QuantizeLinear)), so the values that flow on are exactly the narrow type's.
Outputs of these types come back in the wide numpy dtype (float32, int8, uint8).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from ..autograd import prim_binary, prim_unary
from .values import cast

E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, UINT4, INT4, E2M1, E8M0, UINT2, INT2 = 17, 18, 19, 20, 21, 22, 23, 24, 25, 26

# float formats: (exponent bits, mantissa bits, bias, what an overflow becomes: inf | nan | sat)
FLOATS = {E4M3FN: (4, 3, 7, "nan"), E4M3FNUZ: (4, 3, 8, "nan"), E5M2: (5, 2, 15, "inf"),
          E5M2FNUZ: (5, 2, 16, "nan"), E2M1: (2, 1, 1, "sat")}
# int formats: (bits, signed)
INTS = {UINT4: (4, False), INT4: (4, True), UINT2: (2, False), INT2: (2, True)}
BITS = {**{t: 8 for t in FLOATS}, E2M1: 4, E8M0: 8, **{t: b for t, (b, _) in INTS.items()}}
LOWBIT = set(BITS)
# ml_dtypes' names for these (what onnx's numpy_helper returns; a test reference, never imported here)
ML_NAMES = {"float8_e4m3fn": np.float32, "float8_e4m3fnuz": np.float32, "float8_e5m2": np.float32,
            "float8_e5m2fnuz": np.float32, "float8_e8m0fnu": np.float32, "float4_e2m1fn": np.float32,
            "int4": np.int8, "uint4": np.uint8, "int2": np.int8, "uint2": np.uint8}


def wide_np(onnx_type: int):
    """The numpy dtype a value of this type is held in."""
    if onnx_type in INTS:
        return np.int8 if INTS[onnx_type][1] else np.uint8
    return np.float32


def wide_dtype(onnx_type: int) -> D.DType:
    return D.get(np.dtype(wide_np(onnx_type)))


def _float_table(onnx_type: int) -> np.ndarray:
    """Every code of a float format -> its float32 value."""
    if onnx_type == E8M0:
        codes = np.arange(256, dtype=np.float64)
        out = np.exp2(codes - 127)
        out[255] = np.nan
        return out.astype(np.float32)
    eb, mb, bias, overflow = FLOATS[onnx_type]
    codes = np.arange(1 << (1 + eb + mb))
    sign = np.where(codes >> (eb + mb) & 1, -1.0, 1.0)
    e, m = (codes >> mb) & ((1 << eb) - 1), codes & ((1 << mb) - 1)
    mag = np.where(e == 0, m / (1 << mb) * 2.0 ** (1 - bias), (1 + m / (1 << mb)) * np.exp2(e - bias))
    val = sign * mag
    top = e == (1 << eb) - 1
    if overflow == "inf":  # IEEE-like: exponent all ones is inf (mantissa 0) or NaN
        val = np.where(top & (m == 0), sign * np.inf, np.where(top, np.nan, val))
    elif onnx_type == E4M3FN:  # only S.1111.111 is NaN
        val = np.where(top & (m == (1 << mb) - 1), np.nan, val)
    elif onnx_type in (E4M3FNUZ, E5M2FNUZ):  # the negative zero code is the one NaN
        val = np.where(codes == 1 << (eb + mb), np.nan, val)
    return val.astype(np.float32)


def decode(onnx_type: int, packed: np.ndarray, count: int) -> np.ndarray:
    """Packed little-endian codes (uint8 bytes, element 0 in the low bits) -> `count` wide values."""
    bits = BITS[onnx_type]
    per = 8 // bits
    if packed.size * per < count:
        from .wire import OnnxFormatError
        raise OnnxFormatError(f"{count} values of {bits} bits need {-(-count // per)} bytes, have {packed.size}")
    codes = np.stack([(packed >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], -1).reshape(-1)[:count]
    if onnx_type in INTS:
        b, signed = INTS[onnx_type]
        vals = codes.astype(np.int16)
        if signed:
            vals = np.where(vals >= 1 << (b - 1), vals - (1 << b), vals)
        return vals.astype(wide_np(onnx_type))
    return _float_table(onnx_type)[codes]


def max_finite(onnx_type: int) -> float:
    t = _float_table(onnx_type)
    return float(np.max(t[np.isfinite(t)]))


def round_to(x, onnx_type: int, saturate: bool = True):
    """Round a float tensor to the values of float format `onnx_type` (held in float32)."""
    x = cast(x, D.float32)
    if onnx_type == E8M0:  # a power of two: round up (ONNX's default round_mode), 2**127 at most
        a = E.abs(x)
        e = E.clamp(E.ceil(E.log2(a)), -127.0, 127.0)
        return E.where(a > 0, E.exp2(e), 2.0 ** -127)
    eb, mb, bias, overflow = FLOATS[onnx_type]
    top, emin = max_finite(onnx_type), 1.0 - bias
    a = E.abs(x)
    e = E.floor(E.log2(E.maximum(a, 2.0 ** (emin - mb - 2))))
    e = E.where(E.exp2(e) > a, e - 1.0, e)       # log2's last-bit error at powers of two
    e = E.where(E.exp2(e + 1.0) <= a, e + 1.0, e)
    q = E.exp2(E.maximum(e, emin) - mb)          # the grid spacing; subnormals share emin's
    y = prim_unary("round", a / q) * q           # half to even, as the formats round
    y = E.where(E.isinf(a), a, y)
    if overflow == "sat":  # float4 e2m1: no inf, no NaN (a NaN becomes -0, as the reference casts it)
        y = E.where(E.isnan(a), -0.0, E.minimum(y, top))
    elif saturate:
        y = E.minimum(y, top)
    else:
        y = E.where(y > top, np.inf if overflow == "inf" else np.nan, y)
    return E.where(x < 0, -y, y)


def wrap_int(x, onnx_type: int):
    """Cast to a sub-byte int: truncate toward zero, then keep the low bits (two's complement)."""
    b, signed = INTS[onnx_type]
    v = cast(x, D.float32)
    v = E.trunc(v) if x.dtype.is_float else v
    lo = -(1 << (b - 1)) if signed else 0
    span = float(1 << b)
    v = v - prim_binary("floordiv", v - lo, span) * span
    return cast(v, wide_dtype(onnx_type))


def clip_int(x, onnx_type: int):
    """Saturate an integer-valued tensor to a sub-byte int's range."""
    b, signed = INTS[onnx_type]
    lo, hi = (-(1 << (b - 1)), (1 << (b - 1)) - 1) if signed else (0, (1 << b) - 1)
    return cast(E.clamp(cast(x, D.float32), float(lo), float(hi)), wide_dtype(onnx_type))


def cast_to(x, onnx_type: int, saturate: bool = True):
    """ONNX Cast to a low-bit type."""
    if onnx_type in INTS:
        return wrap_int(x, onnx_type)
    return round_to(x, onnx_type, saturate)
