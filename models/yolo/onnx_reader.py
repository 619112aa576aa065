"""Just enough of ONNX's protobuf to pull the weights out of a ModelProto, in pure Python + numpy.

Reads graph.initializer (TensorProto: dims, data_type, raw_data or typed *_data fields, name) and
the model's metadata_props (string key/values; ultralytics stores names, stride, imgsz there).
Everything else in the file (nodes, value infos, opsets) is skipped without being decoded.
Field numbers from onnx/onnx.proto3 (ModelProto.graph = 7, metadata_props = 14; GraphProto.initializer = 5;
TensorProto.dims = 1, data_type = 2, float_data = 4, int32_data = 5, int64_data = 7, name = 8,
raw_data = 9, double_data = 10, data_location = 14).
"""
from __future__ import annotations

import numpy as np

from ...errors import FormatError

# TensorProto.DataType -> numpy dtype (the types a weights file can hold)
_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
           9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
_BFLOAT16 = 16


class OnnxFormatError(FormatError):
    """The file is not a readable ONNX ModelProto (truncated, malformed, or using unsupported features)."""


class _Reader:
    def __init__(self, buf: memoryview, where: str):
        self.buf, self.where = buf, where

    def fail(self, msg, pos):
        return OnnxFormatError(f"ember: {self.where}: {msg} (byte {pos} of {len(self.buf)}); "
                               "the ONNX file is truncated or not an ONNX model")

    def varint(self, pos, end):
        out = shift = 0
        while True:
            if pos >= end or shift > 63:
                raise self.fail("bad varint", pos)
            c = self.buf[pos]
            pos += 1
            out |= (c & 0x7F) << shift
            shift += 7
            if c < 0x80:
                return out, pos

    def fields(self, start, end):
        """Yield (field number, wire type, value) where value is an int (varint/fixed) or a (start, end) span."""
        pos = start
        while pos < end:
            key, pos = self.varint(pos, end)
            num, wt = key >> 3, key & 7
            if wt == 0:
                v, pos = self.varint(pos, end)
            elif wt == 2:
                n, pos = self.varint(pos, end)
                if pos + n > end:
                    raise self.fail(f"field {num} wants {n} bytes, {end - pos} left", pos)
                v, pos = (pos, pos + n), pos + n
            elif wt in (1, 5):
                n = 8 if wt == 1 else 4
                if pos + n > end:
                    raise self.fail(f"field {num} is cut short", pos)
                v, pos = int.from_bytes(self.buf[pos:pos + n], "little"), pos + n
            else:
                raise self.fail(f"unsupported wire type {wt} for field {num}", pos)
            yield num, wt, v

    def text(self, span):
        return bytes(self.buf[span[0]:span[1]]).decode("utf-8", "replace")

    def packed_ints(self, wt, v):
        if wt == 0:
            return [v]
        vals, pos = [], v[0]
        while pos < v[1]:
            x, pos = self.varint(pos, v[1])
            vals.append(x)
        return vals


def _signed(v):  # protobuf int64 varints are two's complement
    return v - (1 << 64) if v >= 1 << 63 else v


def _tensor(r: _Reader, span) -> tuple[str, np.ndarray]:
    dims, dtype, name, raw, typed, external = [], 1, "", None, {}, False
    for num, wt, v in r.fields(*span):
        if num == 1:
            dims.extend(_signed(d) for d in r.packed_ints(wt, v))
        elif num == 2:
            dtype = v
        elif num == 8:
            name = r.text(v)
        elif num == 9:
            raw = v
        elif num in (4, 5, 7, 10) and wt == 2:
            typed[num] = v
        elif num in (4, 5, 7, 10):
            raise r.fail(f"tensor {name or '?'}: unpacked repeated data is not supported", span[0])
        elif num == 14 and v == 1:
            external = True
    if external:
        raise OnnxFormatError(f"ember: {r.where}: tensor {name!r} keeps its data in an external file; "
                              "re-export the model with the weights inside the .onnx")
    if dtype != _BFLOAT16 and dtype not in _DTYPES:
        raise OnnxFormatError(f"ember: {r.where}: tensor {name!r} has unsupported ONNX data_type {dtype}")
    if any(d < 0 for d in dims):
        raise OnnxFormatError(f"ember: {r.where}: tensor {name!r} has negative dims {dims}")
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    np_dtype = np.dtype(np.uint16 if dtype == _BFLOAT16 else _DTYPES[dtype])
    if raw is not None:
        if raw[1] - raw[0] != count * np_dtype.itemsize:
            raise OnnxFormatError(f"ember: {r.where}: tensor {name!r} of shape {dims} ({np_dtype}) needs "
                                  f"{count * np_dtype.itemsize} bytes of raw_data, has {raw[1] - raw[0]}")
        arr = np.frombuffer(r.buf[raw[0]:raw[1]], dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
    elif 4 in typed:   # float_data: packed little-endian float32
        arr = np.frombuffer(r.buf[typed[4][0]:typed[4][1]], "<f4").astype(np_dtype)
    elif 10 in typed:  # double_data
        arr = np.frombuffer(r.buf[typed[10][0]:typed[10][1]], "<f8").astype(np_dtype)
    elif 7 in typed:   # int64_data: varints
        arr = np.array([_signed(x) for x in r.packed_ints(2, typed[7])], np.int64).astype(np_dtype)
    elif 5 in typed:   # int32_data: varints; float16/bfloat16 keep their bit patterns here
        ints = np.array([_signed(x) for x in r.packed_ints(2, typed[5])], np.int64)
        arr = ints.astype(np.uint16).view(np_dtype) if np_dtype.itemsize == 2 else ints.astype(np_dtype)
    else:
        arr = np.zeros(0, np_dtype)
    if arr.size != count:
        raise OnnxFormatError(f"ember: {r.where}: tensor {name!r} has {arr.size} values for shape {dims}")
    return name, arr.reshape(dims)


def read_onnx(src, where: str | None = None) -> tuple[dict, dict]:
    """An .onnx path or bytes -> ({initializer name: ndarray}, {metadata key: value}).
    bfloat16 initializers come back as uint16 bit patterns."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data, where = bytes(src), where or "<onnx bytes>"
    else:
        where = where or str(src)
        with open(src, "rb") as f:
            data = f.read()
    r = _Reader(memoryview(data), where)
    tensors, meta, graph = {}, {}, None
    for num, wt, v in r.fields(0, len(data)):
        if num == 7 and wt == 2:
            graph = v
        elif num == 14 and wt == 2:
            kv = {k: r.text(s) for k, w, s in r.fields(*v) if w == 2}
            meta[kv.get(1, "")] = kv.get(2, "")
    if graph is None:
        raise OnnxFormatError(f"ember: {where}: no ONNX graph found (is this an .onnx ModelProto?)")
    for num, wt, v in r.fields(*graph):
        if num == 5 and wt == 2:
            name, arr = _tensor(r, v)
            tensors[name] = arr
    return tensors, meta
