"""ember dtypes: names, numpy storage types, promotion, and exact bfloat16 conversion.

bfloat16 has no numpy type: it is stored as uint16 bit patterns (the upper half of a float32)
and computed in float32. uint16 is therefore *not* an ember dtype, which keeps "a uint16 numpy
array" unambiguous inside the numpy backend.
"""
from __future__ import annotations

import numpy as np


class DType:
    __slots__ = ("name", "np", "itemsize", "is_float", "is_signed", "rank")

    def __init__(self, name, np_dtype, itemsize, is_float, is_signed, rank):
        self.name, self.np, self.itemsize = name, np.dtype(np_dtype), itemsize
        self.is_float, self.is_signed, self.rank = is_float, is_signed, rank

    def __repr__(self):
        return f"ember.{self.name}"

    def __reduce__(self):  # dtypes are singletons, also across pickling
        return (get, (self.name,))

    @property
    def is_floating_point(self):
        return self.is_float


# rank orders the promotion lattice: bool < unsigned/ints < floats (as torch's category rule)
bool_ = DType("bool", np.bool_, 1, False, False, 0)
uint8 = DType("uint8", np.uint8, 1, False, False, 1)
int8 = DType("int8", np.int8, 1, False, True, 2)
int32 = DType("int32", np.int32, 4, False, True, 4)
uint32 = DType("uint32", np.uint32, 4, False, False, 5)
int64 = DType("int64", np.int64, 8, False, True, 6)
float16 = DType("float16", np.float16, 2, True, True, 10)
bfloat16 = DType("bfloat16", np.uint16, 2, True, True, 11)  # storage: uint16 bits
float32 = DType("float32", np.float32, 4, True, True, 12)
float64 = DType("float64", np.float64, 8, True, True, 13)

ALL = (bool_, uint8, int8, int32, uint32, int64, float16, bfloat16, float32, float64)
BY_NAME = {d.name: d for d in ALL}
BY_NAME.update({"bool_": bool_, "half": float16, "float": float32, "double": float64, "long": int64,
                "int": int32, "bf16": bfloat16, "f16": float16, "f32": float32})
# numpy storage dtype -> ember dtype (uint16 storage means bfloat16)
FROM_NP = {d.np: d for d in ALL}

half, float, double, long = float16, float32, float64, int64  # torch aliases
bool = bool_  # noqa: A001  (ember.bool like torch.bool)


def get(x) -> DType:
    """Any dtype spelling (ember dtype, name, numpy dtype, python type) -> DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = BY_NAME.get(x.replace("torch.", "").replace("ember.", ""))
        if d is None:
            raise TypeError(f"ember: unknown dtype {x!r}; known: {', '.join(d.name for d in ALL)}")
        return d
    if x is builtins_float:
        return float32
    if x is builtins_int:
        return int64
    if x is builtins_bool:
        return bool_
    try:
        nd = np.dtype(x)
    except TypeError:
        raise TypeError(f"ember: unknown dtype {x!r}") from None
    d = FROM_NP.get(nd)
    if d is None or nd == np.uint16:
        raise TypeError(f"ember: numpy dtype {nd} has no ember dtype; known: {', '.join(d.name for d in ALL)}")
    return d


import builtins as _b  # noqa: E402

builtins_float, builtins_int, builtins_bool = _b.float, _b.int, _b.bool


def promote(a: DType, b: DType) -> DType:
    """Result dtype of a binary op between two tensors (torch's rules for the dtypes we have)."""
    if a is b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a, b} == {float16, bfloat16}:
                return float32
            return a if a.rank > b.rank else b
        return a if a.is_float else b
    if a is bool_:
        return b
    if b is bool_:
        return a
    # mixed integers: widen to a type that holds both
    if {a, b} == {uint8, int8}:
        return int32
    if uint32 in (a, b) and (a.is_signed or b.is_signed):
        return int64
    return a if a.rank > b.rank else b


def scalar_dtype(v) -> DType:
    """The category a python scalar belongs to (for tensor-scalar ops the tensor's dtype wins within it)."""
    if isinstance(v, _b.bool):
        return bool_
    if isinstance(v, _b.int):
        return int64
    return float32


def promote_scalar(t: DType, v) -> DType:
    s = scalar_dtype(v)
    if s is float32 and not t.is_float:
        return float32
    if s is int64 and t is bool_:
        return int64
    return t


# ---------------------------------------------------------------- bfloat16 bits

def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round-to-nearest-even; NaN stays NaN (quiet)."""
    x = np.asarray(x, dtype=np.float32)
    u = (x if x.flags.c_contiguous else x.copy()).view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    out = np.asarray(((u + rounding) >> 16).astype(np.uint16))  # (0-d math yields scalars)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return out


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32, exact."""
    return np.asarray((np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16)).view(np.float32)
