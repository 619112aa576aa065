"""Block-quantized weights as onnxruntime's MatMulNBits stores them (the layout: ember.ggml.nbits), and their
product through the kernel registry (ember.kernels: nbits_matmul) on the device's kernel: the CPU's
(core/backends/cpu_nbits.py), WebGPU's (webgpu/nbits.wgsl), or composed here.

The layout of onnxruntime's MatMulNBitsQuantizer (GPTQ/RTN/HQQ, 4-bit block 32 or 128, symmetric or not) and of the
q4 files transformers.js and onnxruntime-genai ship; GGML's blocks (ember.qtensor) differ (f16 scales, fixed blocks
of 32 or 256).
"""
from __future__ import annotations

import numpy as np

from . import kernels as K
from .ggml.nbits import BITS, dequantize, unpack  # noqa: F401  (the ONNX operators read with these)


class BlockWeight:
    """A MatMulNBits weight on the host: packed (N, blocks * block * bits / 8) uint8, scales and zeros (N, blocks)
    float32 (zeros: the default 2 ** (bits - 1) filled in where the file has none), shape (N, K)."""

    __slots__ = ("packed", "scales", "zeros", "bits", "block", "shape", "name")

    def __init__(self, packed, scales, zeros, bits, block, shape, name="weight"):
        n, k = (int(s) for s in shape)
        blocks = -(-k // block)
        if bits not in BITS or block < 16 or block & (block - 1):
            raise ValueError(f"ember: {name}: {bits}-bit levels in blocks of {block}: bits must be one of {BITS} "
                             "and the block a power of two of at least 16")
        self.packed = np.ascontiguousarray(np.asarray(packed, np.uint8).reshape(n, blocks * block * bits // 8))
        self.scales = np.ascontiguousarray(np.asarray(scales, np.float32).reshape(n, blocks))
        if zeros is None:
            zeros = np.full((n, blocks), float(1 << (bits - 1)), np.float32)
        self.zeros = np.ascontiguousarray(np.asarray(zeros, np.float32).reshape(n, blocks))
        self.bits, self.block, self.shape, self.name = int(bits), int(block), (n, k), name

    @property
    def nbytes(self):
        return self.packed.nbytes + self.scales.nbytes + self.zeros.nbytes

    def numpy(self) -> np.ndarray:
        """The dequantized weight, float32 (N, K)."""
        return dequantize(self.packed, self.scales, self.zeros, self.bits, self.block, self.shape)

    def matmul_t(self, x):
        """x (..., K) Tensor @ W.T -> float32 (..., N) on x's device: its nbits_matmul kernel, else composed."""
        if tuple(x.shape[-1:]) != self.shape[1:]:
            raise ValueError(f"ember: {self.name}: input of shape {tuple(x.shape)} does not match the weight's "
                             f"{self.shape} (last dim must be {self.shape[1]})")
        kernel = K.bound("nbits_matmul", x.device._backend)
        args = (self.packed, self.scales, self.zeros, self.bits, self.block, self.shape)
        if kernel is None:
            return nbits_matmul_composed(x, *args)
        from .autograd import prim_fused
        return prim_fused(kernel, x, *args)

    def __repr__(self):
        return f"BlockWeight(shape={self.shape}, bits={self.bits}, block={self.block}, name={self.name!r})"


def nbits_matmul_composed(x, packed, scales, zeros, bits, block, shape):
    """x @ dequantize(W).T in Tensor ops on x's device, the host's dequantized weight moved there: the reference
    the kernels are tested against."""
    from .dtypes import float32
    from .tensor import Tensor
    w = Tensor._from_storage(dequantize(packed, scales, zeros, bits, block, shape), float32)  # (N, K)
    if str(x.device) != "cpu":
        w = w.to(x.device)
    return x.float() @ w.T
