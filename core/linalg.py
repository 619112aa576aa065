"""matmul with torch's 1-D/2-D/batched rules on top of the batched matmul primitive."""
from __future__ import annotations

import numpy as np

from . import autograd as A
from . import dtypes as D

_HOST_FLOAT = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))


def matmul(a, b):
    ad, bd = a._data, b._data
    if ad.__class__ is np.ndarray and bd.__class__ is np.ndarray and ad.ndim == 2 and bd.ndim == 2 and \
            ad.dtype is bd.dtype and ad.dtype in _HOST_FLOAT and ad.shape[1] == bd.shape[0] and a.device is b.device \
            and not (A._GRAD[0] and (a.requires_grad or b.requires_grad)):  # host matrices, no gradient: the primitive
        return a._new(a.device._backend.matmul(ad, bd))
    if a.device is b.device and a.dtype is b.dtype and a.dtype is not D.bool_:  # hot path: plain batched matmul
        sa, sb = a.shape, b.shape
        if len(sa) >= 2 and len(sb) >= 2 and sa[-1] == sb[-2] and (len(sa) == 2 or len(sb) == 2 or sa[:-2] == sb[:-2]):
            return A.prim_matmul(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"ember: matmul needs tensors of at least 1 dim, got {a.shape} and {b.shape}")
    if a.device != b.device:
        raise ValueError(f"ember: matmul: tensors on different devices ({a.device} and {b.device})")
    if a.dtype is not b.dtype:
        dt = D.promote(a.dtype, b.dtype)
        a, b = A.prim_cast(a, dt), A.prim_cast(b, dt)
    if a.dtype is D.bool_:
        raise TypeError("ember: matmul of bool tensors is not supported")
    squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
    if squeeze_a:
        a = A.prim_reshape(a, (1, a.shape[0]))
    if squeeze_b:
        b = A.prim_reshape(b, (b.shape[0], 1))
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"ember: matmul shape mismatch: {a.shape} @ {b.shape} "
                         f"(inner dims {a.shape[-1]} and {b.shape[-2]})")
    from .ops_movement import broadcast_shapes
    broadcast_shapes(a.shape[:-2], b.shape[:-2])  # raises a clear error on mismatch
    out = A.prim_matmul(a, b)
    if squeeze_a or squeeze_b:
        shp = out.shape
        if squeeze_a:
            shp = shp[:-2] + shp[-1:]
        if squeeze_b:
            shp = shp[:-1]
        out = A.prim_reshape(out, shp)
    return out


def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"ember: mm needs 2-D tensors, got {a.shape} and {b.shape}")
    return matmul(a, b)


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"ember: bmm needs 3-D tensors with equal batch, got {a.shape} and {b.shape}")
    return matmul(a, b)


def outer(a, b):
    return a.reshape(-1, 1) * b.reshape(1, -1)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"ember: dot needs 1-D tensors, got {a.shape} and {b.shape}")
    return matmul(a, b)
