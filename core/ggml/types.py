"""GGML tensor types: ids, block geometry, the 8-bit activation type each is multiplied with, and the
quantize/dequantize functions of each block type (filled in by legacy.py and kquants.py).

Ids, block sizes and byte sizes are GGML's (ggml.h `enum ggml_type`, ggml.c `type_traits`), so a
GGUF tensor-info type id maps straight onto an entry here. Plain types (F32, F16, BF16, integers)
are "blocks" of one element so that every type shares one byte-size rule:
    row bytes = (row elements / block_size) * type_size.
A base-layer module, like ember.dtypes: the GGUF reader, every backend's quantized matmul and ember.quant use it.
"""
from __future__ import annotations

import numpy as np

QK_K = 256  # elements per K-quant super-block


class GGMLType:
    __slots__ = ("name", "id", "block_size", "type_size", "np_dtype", "quantize_blocks", "dequantize_blocks")

    def __init__(self, name, id, block_size, type_size, np_dtype=None):
        self.name, self.id, self.block_size, self.type_size = name, id, block_size, type_size
        self.np_dtype = None if np_dtype is None else np.dtype(np_dtype)  # plain (unquantized) types only
        # (n_blocks, block_size) f32 -> (n_blocks, type_size) u8 and back; filled in by the kernel modules
        self.quantize_blocks = None
        self.dequantize_blocks = None

    @property
    def is_quantized(self):
        return self.np_dtype is None

    def __repr__(self):
        return f"ember.quant.{self.name}"

    def __eq__(self, other):  # q.ggml_type == "q4_0" reads naturally; types are singletons otherwise
        if isinstance(other, str):
            return self.name == other.upper()
        return self is other

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):  # singletons, also across pickling
        return (get, (self.name,))

    def row_bytes(self, n: int, what: str = "tensor") -> int:
        """Bytes of one row of n elements; rejects rows that do not fill whole blocks."""
        if n % self.block_size:
            raise ValueError(f"ember: {what}: row length {n} is not a multiple of the {self.name} "
                             f"block size {self.block_size}")
        return n // self.block_size * self.type_size

    def dequantize_rows(self, rows) -> np.ndarray:
        """uint8 rows (r, row_bytes) of this type -> float32 (r, row elements), a bounded number of blocks at
        a time (codec.dequantize_rows)."""
        from .codec import dequantize_rows  # (codec imports this table)
        return dequantize_rows(rows, self)

    @property
    def vec_dot_type(self):
        """The 8-bit type llama.cpp's CPU backend quantizes activations to for this weight type (ggml-cpu's
        type_traits vec_dot_type: Q8_0, Q8_1 or Q8_K), or None where ember has no 8-bit-activation product."""
        name = VEC_DOT_TYPES.get(self.name)
        return None if name is None else BY_NAME[name]

    def nbytes(self, shape, what: str = "tensor") -> int:
        """Bytes of a tensor of this type with numpy-order shape (last axis = GGML ne[0])."""
        if len(shape) == 0:
            return self.type_size if self.block_size == 1 else self.row_bytes(1, what)
        rows = 1
        for s in shape[:-1]:
            rows *= int(s)
        return rows * self.row_bytes(int(shape[-1]), what)


_TABLE = [
    # name, id, block_size, type_size, numpy dtype for plain types
    ("F32", 0, 1, 4, np.float32), ("F16", 1, 1, 2, np.float16),
    ("Q4_0", 2, 32, 18), ("Q4_1", 3, 32, 20), ("Q5_0", 6, 32, 22), ("Q5_1", 7, 32, 24),
    ("Q8_0", 8, 32, 34), ("Q8_1", 9, 32, 36),
    ("Q2_K", 10, QK_K, 84), ("Q3_K", 11, QK_K, 110), ("Q4_K", 12, QK_K, 144), ("Q5_K", 13, QK_K, 176),
    ("Q6_K", 14, QK_K, 210), ("Q8_K", 15, QK_K, 292),
    ("IQ2_XXS", 16, QK_K, 66), ("IQ2_XS", 17, QK_K, 74), ("IQ3_XXS", 18, QK_K, 98), ("IQ1_S", 19, QK_K, 50),
    ("IQ4_NL", 20, 32, 18), ("IQ3_S", 21, QK_K, 110), ("IQ2_S", 22, QK_K, 82), ("IQ4_XS", 23, QK_K, 136),
    ("I8", 24, 1, 1, np.int8), ("I16", 25, 1, 2, np.int16), ("I32", 26, 1, 4, np.int32),
    ("I64", 27, 1, 8, np.int64), ("F64", 28, 1, 8, np.float64), ("IQ1_M", 29, QK_K, 56),
    ("BF16", 30, 1, 2, np.uint16),  # stored as uint16 bits, as ember.bfloat16
    ("TQ1_0", 34, QK_K, 54), ("TQ2_0", 35, QK_K, 66), ("MXFP4", 39, 32, 17),
]
BY_NAME: dict[str, GGMLType] = {}
BY_ID: dict[int, GGMLType] = {}
for _row in _TABLE:
    _t = GGMLType(*_row)
    BY_NAME[_t.name] = BY_ID[_t.id] = _t
globals().update(BY_NAME)  # ember.ggml.types.Q4_0 etc.

# weight type -> the activations' 8-bit type of llama.cpp's x86 CPU products (cpu_kernels/q8dot.c computes these)
VEC_DOT_TYPES = {"Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1",
                 "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K"}

# the plain GGML types of ember dtypes (by dtype name), as GGUF stores them
PLAIN_BY_DTYPE = {"float32": BY_NAME["F32"], "float16": BY_NAME["F16"], "bfloat16": BY_NAME["BF16"],
                  "float64": BY_NAME["F64"], "int8": BY_NAME["I8"], "int32": BY_NAME["I32"], "int64": BY_NAME["I64"]}


def get(x) -> GGMLType:
    """A GGML type from its object, name ("q4_0", "Q4_K") or numeric id."""
    if isinstance(x, GGMLType):
        return x
    if isinstance(x, str):
        t = BY_NAME.get(x.upper())
        if t is None:
            raise ValueError(f"ember: unknown GGML type {x!r}; known: {', '.join(BY_NAME)}")
        return t
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        t = BY_ID.get(int(x))
        if t is None:
            raise ValueError(f"ember: unknown GGML type id {int(x)}; known ids: {sorted(BY_ID)}")
        return t
    raise TypeError(f"ember: expected a GGML type name or id, got {type(x).__name__}")


def supported_quant_types() -> list[str]:
    """Names of the quantized types ember can both quantize and dequantize."""
    return [t.name for t in BY_NAME.values() if t.is_quantized and t.quantize_blocks and t.dequantize_blocks]
