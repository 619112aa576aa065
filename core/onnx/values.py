"""Helpers the operators share: ONNX types as ember dtypes, small host reads of shape-like inputs."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..autograd import prim_cast
from .tensor_data import BFLOAT16, NP_OF, STRING, dtype_name
from .wire import OnnxFormatError

_WIDER = {4: D.int32, 5: D.int32, 13: D.int64}  # uint16, int16, uint64 run in a wider ember dtype


def ember_dtype(onnx_type: int, where="") -> D.DType:
    if onnx_type == BFLOAT16:
        return D.bfloat16
    if onnx_type in _WIDER:
        return _WIDER[onnx_type]
    if 17 <= onnx_type <= 26:  # float8/float4/int4/int2: held wide (lowbit.py)
        from .lowbit import wide_dtype
        return wide_dtype(onnx_type)
    if onnx_type == STRING or onnx_type not in NP_OF:
        raise OnnxFormatError(f"ember: {where}: ONNX type {dtype_name(onnx_type)} has no ember dtype")
    return D.get(np.dtype(NP_OF[onnx_type]))


def cast(x, dtype):
    return x if x.dtype is dtype else prim_cast(x, dtype)


def host(t) -> np.ndarray:
    """A small shape-like tensor (shape, axes, pads, k ...) read on the host."""
    return np.asarray(t.numpy())


def host_ints(t) -> list[int]:
    a = host(t).reshape(-1)
    return a.tolist() if a.dtype.kind in "iu" else [int(v) for v in a]


def axis(a, ndim, ctx=None, what="axis"):
    if not -ndim <= a < max(ndim, 1):
        where = ctx.where if ctx is not None else ""
        raise OnnxFormatError(f"ember: {where}: {what} {a} out of range for rank {ndim}")
    return a % ndim if ndim else 0
