"""Protobuf wire format, decoded in pure Python from a memoryview (no `protobuf` package: Pyodide too).

A message is a run of (key varint, value) pairs; the key holds the field number and the wire type
(0 varint, 1 fixed64, 2 length-delimited, 5 fixed32). Decoding is schema-driven: a `Schema` maps
field numbers to (name, kind, repeated), where kind is a scalar kind or a nested Schema.

Bounded by construction: a length-delimited field must fit inside its parent, so no value is ever
larger than the file; nested messages go at most MAX_DEPTH deep; everything raises OnnxFormatError
naming the file and the field path.
"""
from __future__ import annotations

import struct

import numpy as np

from ..io.formats import FormatError

MAX_DEPTH = 64  # message nesting (graph -> node -> attribute -> graph ...); onnx's checker allows far less


class OnnxFormatError(FormatError):
    """An ONNX file is malformed or hostile; the message names the file, the field path and the limit."""


class Schema:
    """One protobuf message type: {field number: (name, kind, repeated)} and the class it decodes to."""

    def __init__(self, name, fields, cls=None):
        self.name, self.fields, self.cls = name, fields, cls


# scalar kinds: "int" (int64, two's complement varint), "uint", "bool", "float" (fixed32), "double",
# "str" (utf-8), "bytes", "span" (a zero-copy memoryview, for tensor payloads)
_VARINT_KINDS = {"int", "uint", "bool"}
_PACKABLE = {"int", "uint", "bool", "float", "double"}


class Reader:
    def __init__(self, buf, where: str):
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.where = where

    def fail(self, path, msg, pos=None):
        at = f" (byte {pos} of {len(self.buf)})" if pos is not None else ""
        return OnnxFormatError(f"ember: {self.where}: {path}: {msg}{at}")

    def varint(self, pos, end, path):
        buf, out, shift = self.buf, 0, 0
        while True:
            if pos >= end:
                raise self.fail(path, "varint runs past the end of its message", pos)
            if shift > 63:
                raise self.fail(path, "varint longer than 10 bytes", pos)
            c = buf[pos]
            pos += 1
            out |= (c & 0x7F) << shift
            shift += 7
            if c < 0x80:
                return out & 0xFFFFFFFFFFFFFFFF, pos

    def decode(self, schema: Schema, start: int, end: int, path: str, depth: int = 0):
        """Decode buf[start:end] as `schema`; returns schema.cls() with one attribute per field."""
        if depth > MAX_DEPTH:
            raise self.fail(path, f"messages nested deeper than {MAX_DEPTH}", start)
        obj = schema.cls()
        fields, buf = schema.fields, self.buf
        pos = start
        while pos < end:
            key, pos = self.varint(pos, end, path)
            num, wt = key >> 3, key & 7
            if num == 0:
                raise self.fail(path, "field number 0", pos)
            spec = fields.get(num)
            fpath = f"{path}.{spec[0]}" if spec else f"{path}.<field {num}>"
            if wt == 0:
                v, pos = self.varint(pos, end, fpath)
            elif wt == 2:
                n, pos = self.varint(pos, end, fpath)
                if n > end - pos:
                    raise self.fail(fpath, f"length {n} exceeds the {end - pos} bytes left in {schema.name}", pos)
                v, pos = (pos, pos + n), pos + n
            elif wt in (1, 5):
                n = 8 if wt == 1 else 4
                if n > end - pos:
                    raise self.fail(fpath, f"fixed{n * 8} value cut short", pos)
                v, pos = bytes(buf[pos:pos + n]), pos + n
            else:
                raise self.fail(fpath, f"wire type {wt} (groups are not used by ONNX)", pos)
            if spec is None:
                continue  # an unknown field: skipped, as protobuf does
            name, kind, repeated = spec
            val = self._value(kind, wt, v, fpath, depth, repeated)
            if repeated:
                lst = getattr(obj, name)
                if isinstance(val, _Packed):  # a packed float run stays one ndarray chunk (see numbers())
                    lst.append(val.values) if isinstance(val.values, np.ndarray) else lst.extend(val.values)
                else:
                    lst.append(val)
            else:
                setattr(obj, name, val)
        return obj

    def _value(self, kind, wt, v, path, depth, repeated):
        if isinstance(kind, Schema):
            if wt != 2:
                raise self.fail(path, f"{kind.name} must be length-delimited, got wire type {wt}")
            return self.decode(kind, v[0], v[1], path, depth + 1)
        if wt == 2 and repeated and kind in _PACKABLE:
            return _Packed(self.packed(kind, v, path))
        if kind in _VARINT_KINDS:
            if wt != 0:
                raise self.fail(path, f"expected a varint, got wire type {wt}")
            if kind == "int":
                return v - (1 << 64) if v >= 1 << 63 else v
            return bool(v) if kind == "bool" else v
        if kind == "float":
            if wt != 5:
                raise self.fail(path, f"expected fixed32, got wire type {wt}")
            return struct.unpack("<f", v)[0]
        if kind == "double":
            if wt != 1:
                raise self.fail(path, f"expected fixed64, got wire type {wt}")
            return struct.unpack("<d", v)[0]
        if wt != 2:
            raise self.fail(path, f"expected a length-delimited {kind}, got wire type {wt}")
        if kind == "span":
            return self.buf[v[0]:v[1]]
        raw = bytes(self.buf[v[0]:v[1]])
        if kind == "bytes":
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(path, "string is not valid UTF-8", v[0]) from None

    def packed(self, kind, span, path):
        a, b = span
        if kind in ("float", "double"):
            size = 4 if kind == "float" else 8
            if (b - a) % size:
                raise self.fail(path, f"packed {kind}s: {b - a} bytes is not a multiple of {size}", a)
            return np.frombuffer(self.buf[a:b], "<f4" if size == 4 else "<f8")
        out, pos = [], a
        while pos < b:
            x, pos = self.varint(pos, b, path)
            out.append(x - (1 << 64) if kind == "int" and x >= 1 << 63 else x)
        return out


class _Packed:
    __slots__ = ("values",)

    def __init__(self, values):
        self.values = values


def numbers(lst, dtype) -> np.ndarray:
    """A repeated numeric field (scalars and packed ndarray chunks, in order) as one 1-d array."""
    if not lst:
        return np.zeros(0, dtype)
    if all(isinstance(x, np.ndarray) for x in lst):
        return np.concatenate(lst).astype(dtype) if len(lst) > 1 else lst[0].astype(dtype)
    return np.concatenate([np.atleast_1d(np.asarray(x)).astype(dtype) for x in lst])
