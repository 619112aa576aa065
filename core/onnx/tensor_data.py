"""TensorProto -> numpy: raw_data, the typed *_data fields, external data files; the ONNX dtype table.

Every size is checked against what the file holds before anything is allocated: the element count
the dims promise must match the bytes present, and an external file must be as long as its range.
"""
from __future__ import annotations

import os

import numpy as np

from .wire import OnnxFormatError, numbers

# TensorProto.DataType -> numpy storage dtype (bfloat16 as its uint16 bits)
FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE, UINT32, UINT64 = range(1, 14)
BFLOAT16 = 16
NP_OF = {FLOAT: np.float32, UINT8: np.uint8, INT8: np.int8, UINT16: np.uint16, INT16: np.int16, INT32: np.int32,
         INT64: np.int64, BOOL: np.bool_, FLOAT16: np.float16, DOUBLE: np.float64, UINT32: np.uint32,
         UINT64: np.uint64, BFLOAT16: np.uint16, STRING: np.object_}
NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
         9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
         16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
         21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2"}
ONNX_OF = {np.dtype(v): k for k, v in NP_OF.items() if k not in (BFLOAT16, STRING)}
MAX_NDIM = 64  # numpy's limit
LOWBIT_TYPES = set(range(17, 27))  # float8/float4/int4/int2 (lowbit.py): decoded to a wider dtype


def dtype_name(t: int) -> str:
    return NAMES.get(t, f"data_type {t}")


def to_numpy(t, where: str, base_dir: str | None = None, what: str = "tensor") -> np.ndarray:
    """The TensorProto `t` as an ndarray (bfloat16 as uint16 bits)."""
    name = f"{what} {t.name!r}" if t.name else what
    if t.data_type in LOWBIT_TYPES:
        return _lowbit(t, name, where)
    if t.data_type not in NP_OF:
        raise OnnxFormatError(f"ember: {where}: {name}: data_type {dtype_name(t.data_type)} is not supported")
    dims = _dims(t, where, name)
    count = 1
    for d in dims:
        count *= d
    dt = np.dtype(NP_OF[t.data_type])
    if t.data_location == 1:
        arr = _external(t, name, where, base_dir, count, dt)
    elif t.raw_data is not None:
        if dt == np.object_:
            raise OnnxFormatError(f"ember: {where}: {name}: string tensors cannot use raw_data")
        if len(t.raw_data) != count * dt.itemsize:
            raise OnnxFormatError(f"ember: {where}: {name}: shape {list(dims)} of {dtype_name(t.data_type)} "
                                  f"needs {count * dt.itemsize} bytes of raw_data, has {len(t.raw_data)}")
        arr = native(np.frombuffer(t.raw_data, dt.newbyteorder("<")), dt)
    else:
        arr = _typed(t, dt)
    if arr.size != count:
        raise OnnxFormatError(f"ember: {where}: {name}: {arr.size} values for shape {list(dims)} "
                              f"({dtype_name(t.data_type)})")
    return arr.reshape(dims)


def _dims(t, where, name):
    if len(t.dims) > MAX_NDIM or any(d < 0 for d in t.dims):
        raise OnnxFormatError(f"ember: {where}: {name}: dims {t.dims[:8]} must be at most {MAX_NDIM} "
                              "non-negative sizes")
    return tuple(int(d) for d in t.dims)


def _lowbit(t, name, where):
    """A float8/float4/int4/int2 tensor: packed codes (raw_data, or one byte per int32_data entry)."""
    from . import lowbit
    dims = _dims(t, where, name)
    count = 1
    for d in dims:
        count *= d
    if t.data_location == 1:
        raise OnnxFormatError(f"ember: {where}: {name}: external data of {dtype_name(t.data_type)} "
                              "is not supported")
    need = -(-count * lowbit.BITS[t.data_type] // 8)
    if t.raw_data is not None:
        packed = np.frombuffer(t.raw_data, np.uint8)
    else:
        packed = (numbers(t.int32_data, np.int64) & 0xFF).astype(np.uint8)  # one packed byte per entry
    if packed.size != need:
        raise OnnxFormatError(f"ember: {where}: {name}: shape {list(dims)} of {dtype_name(t.data_type)} "
                              f"needs {need} bytes, has {packed.size}")
    return lowbit.decode(t.data_type, packed, count).reshape(dims)


def native(a, dt):
    """Little-endian data `a` as dtype `dt` itself: a view where the host is little-endian. (astype(dt,
    copy=False) keeps the `dt.newbyteorder("<")` dtype object, an equal but distinct instance that the
    numpy backend's `dtype is float32` fast paths miss: in Pyodide every MatMul then ran numpy's
    BLAS-less stacked loop, 20x slower than the SIMD kernels.)"""
    return a.view(dt) if a.dtype == dt else a.astype(dt)


def _typed(t, dt):
    k = t.data_type
    if k == STRING:
        return np.array(t.string_data, dtype=object)
    if k in (FLOAT, DOUBLE):
        return numbers(t.float_data if k == FLOAT else t.double_data, dt)
    if k == INT64:
        return numbers(t.int64_data, np.int64)
    if k in (UINT32, UINT64):
        return numbers(t.uint64_data, np.uint64).astype(dt)
    ints = numbers(t.int32_data, np.int64)  # every other type; 16-bit floats keep their bit patterns here
    if k in (FLOAT16, BFLOAT16):
        return ints.astype(np.uint16).view(dt)
    return ints.astype(dt)


def _external(t, name, where, base_dir, count, dt):
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    if base_dir is None:
        raise OnnxFormatError(f"ember: {where}: {name}: external data {loc!r} needs the model loaded from a path")
    if not loc or os.path.isabs(loc) or ".." in loc.replace("\\", "/").split("/"):
        raise OnnxFormatError(f"ember: {where}: {name}: external data location {loc!r} must be a relative "
                              "path inside the model's folder")
    path = os.path.join(base_dir, loc)
    # the file itself, links followed, must lie in the model's folder: a symlink inside it pointing elsewhere
    # (/etc/passwd, another user's files) is refused like "../"
    root, real = os.path.realpath(base_dir), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise OnnxFormatError(f"ember: {where}: {name}: external data location {loc!r} resolves to {real}, "
                              f"outside the model's folder {root} (a link out of the folder is not followed)")
    try:
        offset, length = int(info.get("offset", 0)), info.get("length")
    except ValueError:
        raise OnnxFormatError(f"ember: {where}: {name}: external data offset {info.get('offset')!r} "
                              "is not an integer") from None
    nbytes = count * dt.itemsize
    if length is not None and int(length) != nbytes:
        raise OnnxFormatError(f"ember: {where}: {name}: external data length {length} != {nbytes} bytes "
                              f"for shape {list(t.dims)}")
    if not os.path.isfile(real):
        raise OnnxFormatError(f"ember: {where}: {name}: external data file {path} does not exist")
    size = os.path.getsize(real)
    if offset < 0 or offset + nbytes > size:
        raise OnnxFormatError(f"ember: {where}: {name}: external data wants bytes {offset}..{offset + nbytes} "
                              f"of {path}, which has {size}")
    return native(np.fromfile(real, dt.newbyteorder("<"), count, offset=offset), dt)
