"""The WebGPU column of the registry's nbits_matmul (ember.ops_blockwise: onnxruntime's MatMulNBits layout): the
weight goes to the GPU once as its packed bits (u32 words) with float32 scales and zero points, and nbits.wgsl
decodes it inside the product, so a 4-bit weight takes half a byte a value on the device."""
from __future__ import annotations

import math
import weakref

import numpy as np

from ember import dtypes as D
from ember.kernel_source import WGSL

from .fused import _wgsl

_MAX_GROUPS = 65535


def _grid(out_shape, *arrays, **attrs):
    total = math.prod(out_shape)
    return (min(total, _MAX_GROUPS), -(-total // _MAX_GROUPS), 1)


NBITS = WGSL(_wgsl("nbits.wgsl"), workgroup_size=64, grid=_grid,
             params=lambda x, w, s, z, m, n, k, blocks, bits, words, block: [m, n, k, blocks, bits, words, block])
NBITS.op = "nbits_matmul"


def nbits_matmul(be, x, packed, scales, zeros, bits, block, shape):
    n, k = shape
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    w, s, z = _device_weight(be, packed, scales, zeros)
    x2 = be.contiguous(be.reshape(be.cast(x, D.float32), (m, k)))                  # (M, K)
    blocks = scales.shape[1]
    y = be.custom_kernel(NBITS, [x2, w, s, z], (m, n), D.float32,
                         dict(m=m, n=n, k=k, blocks=blocks, bits=bits, words=packed.shape[1] // 4, block=block))
    return be.reshape(y, lead + (n,))


def _device_weight(be, packed, scales, zeros):
    """(packed bits as u32 words, scales, zeros) on this device, uploaded once per host array."""
    cache = be.__dict__.setdefault("_nbits_weights", {})
    hit = cache.get(id(packed))
    if hit is not None and hit[0]() is packed:
        return hit[1]
    words = np.ascontiguousarray(packed).reshape(-1).view(np.uint32)              # rows are whole words
    dev = (be.from_numpy(words, D.uint32), be.from_numpy(scales, D.float32), be.from_numpy(zeros, D.float32))
    cache[id(packed)] = (weakref.ref(packed, lambda _, key=id(packed): cache.pop(key, None)), dev)
    return dev
