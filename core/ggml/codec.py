"""quantize / dequantize whole numpy arrays of any GGML type, a bounded number of blocks at a time.

Raw data is a uint8 array of shape (*shape[:-1], row_bytes): one row of blocks per row of the
tensor, which is exactly the GGUF on-disk layout.

NaN/Inf: quantize() rejects non-finite input with a ValueError (a block's scale is derived from its
max |x|, so one Inf or NaN would silently wipe the whole block). F32/F16/BF16 keep them as-is.
"""
from __future__ import annotations

import numpy as np

from . import types as T
from . import kquants, legacy  # noqa: F401  (registers the block kernels on the type table)
from ..dtypes import bf16_bits_to_f32, f32_to_bf16_bits

CHUNK_BLOCKS = 1 << 14  # blocks per kernel call: bounds the temporaries (a few MiB) on big tensors


def _rows(shape):
    n = 1
    for s in shape[:-1]:
        n *= int(s)
    return n


def quantize(x, qtype, name: str = "tensor") -> np.ndarray:
    """float array (*shape) -> uint8 raw blocks (*shape[:-1], row_bytes) of GGML type `qtype`."""
    t = T.get(qtype)
    x = np.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    if not t.is_quantized:
        with np.errstate(over="ignore"):  # beyond float16's range -> inf, like a C cast
            if t.name == "BF16":
                data = f32_to_bf16_bits(x.astype(np.float32, copy=False))
            else:
                data = np.ascontiguousarray(x, dtype=t.np_dtype)
        return data.view(np.uint8).reshape(*x.shape[:-1], -1)
    if t.quantize_blocks is None:
        raise NotImplementedError(f"ember: quantizing to {t.name} is not implemented; "
                                  f"supported: {', '.join(T.supported_quant_types())}")
    row_bytes = t.row_bytes(x.shape[-1], f"{name} of shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"ember: cannot quantize {name} of dtype {x.dtype} to {t.name}: expected a float array")
    flat = x.reshape(-1, t.block_size)  # (n_blocks, block_size)
    out = np.empty((flat.shape[0], t.type_size), np.uint8)
    for s in range(0, flat.shape[0], CHUNK_BLOCKS):
        blk = flat[s:s + CHUNK_BLOCKS].astype(np.float32)
        if not np.isfinite(blk).all():
            raise ValueError(f"ember: cannot quantize {name} of shape {tuple(x.shape)} to {t.name}: "
                             f"it holds NaN or Inf")
        with np.errstate(over="ignore", invalid="ignore"):  # huge inputs overflow scales to inf, as in C
            out[s:s + CHUNK_BLOCKS] = t.quantize_blocks(blk)
    return out.reshape(*x.shape[:-1], row_bytes)


def check_raw(raw, qtype, shape, name: str = "tensor") -> np.ndarray:
    """Validate raw bytes against a type and logical shape; returns them as uint8 rows."""
    t = T.get(qtype)
    shape = tuple(int(s) for s in shape)
    want = t.nbytes(shape, f"{name} of shape {shape}")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raw = raw.view(np.uint8) if raw.flags.c_contiguous else np.ascontiguousarray(raw).view(np.uint8)
    if raw.size != want:
        raise ValueError(f"ember: {name}: {raw.size} bytes of {t.name} data for shape {shape}, expected {want}")
    row_bytes = t.row_bytes(shape[-1]) if shape else want
    return raw.reshape(_rows(shape) if shape else 1, row_bytes)  # explicit widths: shapes may hold zeros


def dequantize_rows(rows, t) -> np.ndarray:
    """uint8 rows (r, row_bytes) of type t -> float32 (r, row_bytes / type_size * block_size)."""
    r, n = rows.shape[0], rows.shape[1] // t.type_size * t.block_size
    if not t.is_quantized:
        vals = rows.reshape(-1).view(t.np_dtype)
        if t.name == "BF16":
            return bf16_bits_to_f32(vals).reshape(r, n)
        return vals.astype(np.float32).reshape(r, n)
    if t.dequantize_blocks is None:
        raise NotImplementedError(f"ember: dequantizing {t.name} is not implemented")
    blocks = rows.reshape(-1, t.type_size)  # (n_blocks, type_size)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN scales in a file decode as in C
        if blocks.shape[0] <= CHUNK_BLOCKS:  # one call, no copy: the quantized-matmul slab path
            return t.dequantize_blocks(blocks).reshape(r, n)
        out = np.empty((blocks.shape[0], t.block_size), np.float32)
        for s in range(0, blocks.shape[0], CHUNK_BLOCKS):
            out[s:s + CHUNK_BLOCKS] = t.dequantize_blocks(blocks[s:s + CHUNK_BLOCKS])
    return out.reshape(r, n)


def dequantize(raw, qtype, shape, name: str = "tensor") -> np.ndarray:
    """uint8 raw blocks -> float32 array of `shape`."""
    t = T.get(qtype)
    rows = check_raw(raw, t, shape, name)
    return dequantize_rows(rows, t).reshape(tuple(shape))
