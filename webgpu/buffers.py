"""GPU arrays (a pooled buffer + a strided view of it) and the buffer pool behind them.

Every ember dtype is stored in 4-byte words on the GPU, so one kernel template serves every
dtype and views never split a word:
  float32, float16, bfloat16 -> f32 words; float16/bfloat16 values are rounded to their format
                                after every op (f16: RNE with overflow to inf; bf16: RNE), so the
                                numbers equal the CPU backend's, at twice the memory.
  int64, int32, int8         -> i32 words (int64: range-checked on upload; arithmetic wraps at 32 bits)
  uint32, uint8, bool        -> u32 words (uint8 masked to 8 bits, bool is 0/1)
float64 has no WGSL type: `WebGPUBackend.supports(float64)` is False and uploads raise.
Where the adapter has `shader-f16`, float16 is stored natively instead (F16_NATIVE: 2-byte f16
words, computed in f32 inside kernels and converted on store). With 16-bit packing on (WebGPUBackend's
`pack16`, EMBER_WEBGPU_PACK16=1) bfloat16, and float16 without shader-f16, are stored two to a u32 word
(BF16_PACKED, F16_PACKED) and unpacked in the kernels (pack16.py).
"""
from __future__ import annotations

import weakref

import numpy as np

from ember import dtypes as D

# ember dtype -> (WGSL word type, numpy word dtype, rounding fix applied to results or None)
WORD = {
    D.float32: ("f32", np.float32, None), D.float16: ("f32", np.float32, "fix_f16"),
    D.bfloat16: ("f32", np.float32, "fix_bf16"),
    D.int64: ("i32", np.int32, None), D.int32: ("i32", np.int32, None), D.int8: ("i32", np.int32, "fix_i8"),
    D.uint32: ("u32", np.uint32, None), D.uint8: ("u32", np.uint32, "fix_u8"), D.bool_: ("u32", np.uint32, None),
}
F16_NATIVE = ("f16", np.float16, None)
# two 16-bit elements per u32 word, unpacked in the kernels (pack16.py): bfloat16 always where packing is on,
# float16 where packing is on and the adapter has no shader-f16
BF16_PACKED = ("bf16x2", np.uint16, "fix_bf16")
F16_PACKED = ("f16x2", np.uint16, "fix_f16")


def compute_type(word):
    """Kernels compute f16 and packed 16-bit words in f32."""
    return "f32" if word in ("f16", "bf16x2", "f16x2") else word


class Storage:
    """One pooled GPU buffer; returns itself to the pool when the last view dies."""

    __slots__ = ("handle", "nbytes", "__weakref__")

    def __init__(self, pool, nbytes):
        self.handle, self.nbytes = pool.take(nbytes)
        weakref.finalize(self, pool.give, self.handle, self.nbytes)


class GArray:
    """A strided view (shape, strides and offset in elements) of a Storage, with an ember dtype."""

    __slots__ = ("storage", "shape", "strides", "offset", "dtype")

    def __init__(self, storage, shape, strides, offset, dtype):
        self.storage, self.shape, self.strides, self.offset, self.dtype = storage, shape, strides, offset, dtype

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def contiguous(self):
        # strides of size-1 dims never matter
        return self.offset == 0 and all(n == 1 or a == b for n, a, b in
                                        zip(self.shape, self.strides, contiguous_strides(self.shape)))

    def __repr__(self):
        return f"GArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.strides}, offset={self.offset})"


def contiguous_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def _bucket(nbytes):
    """Round sizes up so freed buffers fit later requests: powers of two below 4 MiB, 1 MiB steps above."""
    nbytes = max(nbytes, 16)
    if nbytes < 1 << 22:
        return 1 << (nbytes - 1).bit_length()
    return (nbytes + (1 << 20) - 1) & ~((1 << 20) - 1)


class BufferPool:
    """Free lists of GPU buffers by size bucket; `live`/`pooled` byte counts make growth testable."""

    def __init__(self, adapter, max_pooled_bytes=1 << 30):
        self.adapter, self.max_pooled = adapter, max_pooled_bytes
        self.free: dict[int, list] = {}
        self.live = self.pooled = 0
        self.created = 0
        self.limit = min(adapter.limits["max-buffer-size"], adapter.limits["max-storage-buffer-binding-size"])

    def take(self, nbytes):
        size = _bucket(nbytes)
        if size > self.limit:
            size = nbytes if nbytes <= self.limit else size
            if size > self.limit:
                raise MemoryError(
                    f"ember: webgpu buffer of {nbytes} bytes exceeds the adapter limit "
                    f"maxStorageBufferBindingSize/maxBufferSize = {self.limit} bytes ({self.adapter.info})")
        lst = self.free.get(size)
        if lst:
            h = lst.pop()
            self.pooled -= size
        else:
            h = self.adapter.buffer(size)
            self.created += 1
        self.live += size
        return h, size

    def give(self, handle, size):
        self.live -= size
        if self.pooled + size <= self.max_pooled:
            self.free.setdefault(size, []).append(handle)
            self.pooled += size
        else:
            self.adapter.release(handle)
