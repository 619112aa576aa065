"""GGUF (llama.cpp's weights format) read and write, in pure Python + numpy.

Layout (little-endian; ggml/docs/gguf.md): "GGUF" | u32 version | u64 n_tensors | u64 n_kv |
n_kv x (string key | u32 value type | value) | n_tensors x (string name | u32 n_dims | u64 ne[n_dims] |
u32 ggml type | u64 offset) | padding to `general.alignment` (default 32) | tensor data, each tensor at
its offset from the data start (a multiple of the alignment). A string is u64 length + UTF-8 bytes;
an array is u32 element type + u64 count + elements. ne[0] is the fastest-varying axis, so the
numpy shape is ne reversed. Versions 2 and 3 share this layout (v1 used 32-bit counts; not read).

Every count, length and offset is checked against the bytes that are actually there before
anything is allocated, so a corrupt or hostile file fails with a FormatError naming the file and
the field, never with a huge allocation or a hang.

Quantized tensors load as ember.QTensor (raw blocks + GGML type + shape); F32/F16/BF16/F64/I8/I32/I64
load as ember Tensors (I16, which ember has no dtype for, widens to int32).
"""
from __future__ import annotations

import os
import struct

import numpy as np

from .. import dtypes
from ..backends import cpu_pool
from ..errors import SaveError
from ..ggml import types as T
from ..qtensor import QTensor
from .formats import FormatError, LazyFile, Stored, atomic_write, try_memmap, describe, is_bytes, to_stored, to_tensor

MAGIC = b"GGUF"
VERSION = 3
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp rejects more
MAX_ARRAY_DEPTH = 8
SHARED_MIN_BYTES = 64 << 10  # smaller quantized tensors stay in the heap (a pool block each is not worth it)

# metadata value types (gguf_type)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
TYPE_NAMES = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
              "UINT64", "INT64", "FLOAT64"]
_NUMERIC = {UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
            FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8"}
_FROM_NP = {np.dtype(v).newbyteorder("="): k for k, v in _NUMERIC.items() if k != BOOL}
_FROM_NP[np.dtype(np.bool_)] = BOOL

# plain tensor types <-> ember dtypes
_PLAIN_TO_EMBER = {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F64": dtypes.float64,
                   "I8": dtypes.int8, "I32": dtypes.int32, "I64": dtypes.int64}



class GGUFValue:
    """A metadata value with its GGUF type spelled out (sub_type: the element type of an ARRAY).
    The reader's `fields` hold these; pass them to `save` to write exactly those types back."""
    __slots__ = ("_value", "type", "sub_type")

    def __init__(self, value, type: int, sub_type: int | None = None):
        self._value, self.type, self.sub_type = value, type, sub_type

    @property
    def value(self):
        """The value; a numeric array as a list, made on each read: the reader holds it as a numpy array (a
        262k-word vocabulary's scores: 1 MB where a list of Python floats held 8 MB as long as the header
        stayed cached)."""
        v = self._value
        return v.tolist() if isinstance(v, np.ndarray) else v

    def __repr__(self):
        sub = f"[{TYPE_NAMES[self.sub_type]}]" if self.type == ARRAY and self.sub_type is not None else ""
        v = self.value if not isinstance(self.value, list) or len(self.value) < 8 else f"[{len(self.value)} items]"
        return f"GGUFValue({TYPE_NAMES[self.type]}{sub}, {v!r})"


class TensorInfo:
    __slots__ = ("name", "shape", "ggml_type", "offset", "nbytes")

    def __init__(self, name, shape, ggml_type, offset, nbytes):
        self.name, self.shape, self.ggml_type, self.offset, self.nbytes = name, shape, ggml_type, offset, nbytes

    def __repr__(self):
        return f"TensorInfo({self.name!r}, shape={self.shape}, type={self.ggml_type.name}, offset={self.offset})"


# ============================================================================ reading

_U64 = struct.Struct("<Q")


class _Cursor:
    """Sequential little-endian reads over a source, refusing to read past its end."""

    def __init__(self, read, total, where):
        self._read, self.total, self.where = read, total, where
        self.pos = 0
        self._buf, self._buf_at = b"", 0  # header bytes read ahead from a file

    def fail(self, msg):
        return FormatError(f"ember: {self.where}: {msg}")

    def left(self):
        return self.total - self.pos

    def take(self, n, what):
        if n > self.left():
            raise self.fail(f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                            f"only {self.left()} left in the {self.total}-byte file")
        end = self.pos + n
        if end > self._buf_at + len(self._buf):  # read ahead in growing chunks: headers hold many tiny fields
            want = max(n, 1 << 16, len(self._buf))
            self._buf, self._buf_at = self._read(self.pos, min(want, self.left())), self.pos
            if len(self._buf) < n:
                raise self.fail(f"file shrank while reading {what} at offset {self.pos}")
        out = self._buf[self.pos - self._buf_at:end - self._buf_at]
        self.pos = end
        return out

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def u32(self, what):
        return self.unpack("<I", what)

    def u64(self, what):
        return self.unpack("<Q", what)

    def string(self, what):
        n = self.u64(f"the length of {what}")
        if n > self.left():
            raise self.fail(f"{what}: string length {n} exceeds the {self.left()} bytes left in the file")
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what}: string is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def strings(self, n, what):
        """n strings: straight from the read-ahead buffer while each lies whole in it (a vocabulary is 10^5
        strings: string() a call each was most of a cold start), else through string()'s checks and reads."""
        out, unpack_from = [], _U64.unpack_from
        for i in range(n):
            buf, rel = self._buf, self.pos - self._buf_at
            if rel + 8 <= len(buf):
                size = unpack_from(buf, rel)[0]
                end = rel + 8 + size
                if end <= len(buf):
                    try:
                        out.append(buf[rel + 8:end].decode("utf-8"))
                        self.pos += 8 + size
                        continue
                    except UnicodeDecodeError:
                        pass  # (string() names it)
            out.append(self.string(f"{what}[{i}]"))
        return out

    def count(self, what, min_item_bytes):
        n = self.u64(what)
        if n * min_item_bytes > self.left():
            raise self.fail(f"{what} is {n}, but {n} items need at least {n * min_item_bytes} bytes and only "
                            f"{self.left()} are left in the file")
        return n

    def value(self, vtype, what, depth=0):
        """One metadata value -> (plain Python value, sub_type or None)."""
        if vtype in _NUMERIC:
            dt = np.dtype(_NUMERIC[vtype])
            v = np.frombuffer(self.take(dt.itemsize, what), dt)[0]
            return (bool(v) if vtype == BOOL else v.item()), None
        if vtype == STRING:
            return self.string(what), None
        if vtype == ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise self.fail(f"{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
            sub = self.u32(f"the element type of {what}")
            if sub in _NUMERIC:
                dt = np.dtype(_NUMERIC[sub])
                n = self.count(f"the element count of {what}", dt.itemsize)
                arr = np.frombuffer(self.take(n * dt.itemsize, what), dt)
                return (arr.astype(bool) if sub == BOOL else arr.copy()), sub  # owned: not a view of the read
            if sub == STRING:
                n = self.count(f"the element count of {what}", 8)
                return self.strings(n, what), sub
            if sub == ARRAY:
                n = self.count(f"the element count of {what}", 12)
                return [GGUFValue(*self._nested(f"{what}[{i}]", depth)) for i in range(n)], sub
            raise self.fail(f"{what}: unknown array element type {sub}")
        raise self.fail(f"{what}: unknown value type {vtype} (known: 0..12)")

    def _nested(self, what, depth):
        v, sub = self.value(ARRAY, what, depth + 1)
        return v, ARRAY, sub


# (path, size) -> (the header's length and digest, the parse of it) of the file opened last: parsing a header is
# Python work a field at a time (a 262k-word vocabulary), reading and hashing its bytes to compare is one read
# (the digest rather than the bytes: Gemma 3's 6.5 MB header stayed resident for the process's life)
_HEADERS: dict = {}


def _digest(header: bytes) -> bytes:
    import hashlib
    return hashlib.blake2b(header, digest_size=32).digest()


class GGUFReader(LazyFile):
    """Lazy GGUF reader: header, metadata and tensor infos on open; tensor data only when asked.

        with GGUFReader("model.gguf") as f:
            f.metadata()["general.architecture"], f.keys(), f.tensor_infos["token_embd.weight"].shape
            w = f.get_tensor("blk.0.attn_q.weight")   # QTensor or Tensor

    src: a path (data memory-mapped where np.memmap works, else read on demand) or a bytes-like object
    (zero-copy views).
    """

    def __init__(self, src, mmap=None):
        self.where = describe(src)
        self._buf = self._file = self._map = self.version = None
        self.fields, self.tensor_infos = {}, {}
        if is_bytes(src):
            self._buf = np.frombuffer(src, np.uint8)
            total = self._buf.nbytes
            read = lambda at, n: self._buf[at:at + n].tobytes()  # noqa: E731
        else:
            try:
                self._file = open(src, "rb")
                total = os.fstat(self._file.fileno()).st_size
            except OSError as e:
                raise FormatError(f"ember: cannot read {self.where}: {e.strerror or e}") from None
            read = self._pread
        key = None if self._file is None else (os.path.realpath(os.fspath(src)), total)
        try:
            seen = _HEADERS.get(key) if key is not None else None
            if seen is not None and _digest(read(0, seen[0][0])) == seen[0][1]:  # this header parsed already
                (self.version, self.fields, self.alignment, self.tensor_infos, self.data_offset) = seen[1]
            else:
                self._parse(_Cursor(read, total, self.where))
                if key is not None:
                    _HEADERS.clear()  # one file's header kept: a CLI reads it for its family, metadata and weights
                    _HEADERS[key] = ((self.data_offset, _digest(read(0, self.data_offset))),
                                     (self.version, self.fields, self.alignment, self.tensor_infos, self.data_offset))
        except BaseException:
            self.close()
            raise
        # quantized blocks for the page's kernel pool are read into it, not mapped (emscripten's mmap copies the file)
        self._pool = cpu_pool.placing() if self._file is not None else None
        if self._file is not None and mmap is not False and self.tensor_infos and self._pool is None:
            self._map = _try_memmap(self._file, self.data_offset, mmap)

    def _pread(self, at, n):
        self._file.seek(at)
        return self._file.read(n)

    def _parse(self, c: _Cursor):
        if c.total < 24:
            raise c.fail(f"file is {c.total} bytes, too short for a GGUF header (24 bytes)")
        magic = c.take(4, "magic")
        if magic != MAGIC:
            raise c.fail(f"not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
        version = c.u32("version")
        if version not in (2, 3):
            if struct.unpack(">I", struct.pack("<I", version))[0] in (2, 3):
                raise c.fail("big-endian GGUF files are not supported")
            if version == 1:
                raise c.fail("GGUF version 1 is not supported (32-bit counts); convert it with a newer llama.cpp")
            raise c.fail(f"unknown GGUF version {version} (ember reads 2 and 3)")
        self.version = version
        n_tensors = c.count("tensor count", 8 + 4 + 4 + 8)  # the smallest possible tensor info
        n_kv = c.count("metadata key/value count", 8 + 4 + 1)
        self.fields: dict[str, GGUFValue] = {}
        for i in range(n_kv):
            key = c.string(f"metadata key #{i}")
            if key in self.fields:
                raise c.fail(f"metadata key {key!r} appears twice")
            vtype = c.u32(f"the value type of {key!r}")
            value, sub = c.value(vtype, f"metadata {key!r}")
            self.fields[key] = GGUFValue(value, vtype, sub)
        self.alignment = self._alignment(c)
        infos = [self._tensor_info(c, i) for i in range(n_tensors)]
        self.data_offset = -(-c.pos // self.alignment) * self.alignment
        data_len = c.total - self.data_offset
        self.tensor_infos: dict[str, TensorInfo] = {}
        end = 0
        for info in sorted(infos, key=lambda t: t.offset):
            if info.name in self.tensor_infos:
                raise c.fail(f"tensor {info.name!r} appears twice")
            if info.offset < end:
                raise c.fail(f"tensor {info.name!r} at data offset {info.offset} overlaps the previous tensor")
            end = info.offset + info.nbytes
            if end > data_len:
                raise c.fail(f"tensor {info.name!r} ({info.ggml_type.name}, shape {info.shape}) needs bytes "
                             f"{info.offset}..{end} of the data section, which has {max(data_len, 0)} "
                             f"(truncated file?)")
            self.tensor_infos[info.name] = info
        self.tensor_infos = {t.name: self.tensor_infos[t.name] for t in infos}  # file order

    def _alignment(self, c):
        f = self.fields.get("general.alignment")
        if f is None:
            return DEFAULT_ALIGNMENT
        if f.type != UINT32 or f.value == 0 or f.value & (f.value - 1):
            raise c.fail(f"general.alignment must be a power-of-two UINT32, got {f!r}")
        return f.value

    def _tensor_info(self, c, i):
        name = c.string(f"the name of tensor #{i}")
        n_dims = c.u32(f"the dimension count of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise c.fail(f"tensor {name!r} has {n_dims} dimensions; GGUF allows at most {MAX_DIMS}")
        ne = [c.u64(f"dimension {d} of tensor {name!r}") for d in range(n_dims)]
        tid = c.u32(f"the type of tensor {name!r}")
        if tid not in T.BY_ID:
            raise c.fail(f"tensor {name!r} has unknown GGML type id {tid}")
        t = T.BY_ID[tid]
        if t.is_quantized and t.dequantize_blocks is None:  # refused here, not at the first matmul
            raise c.fail(f"tensor {name!r} has GGML type {t.name}, which ember cannot dequantize "
                         f"(supported: {', '.join(T.supported_quant_types())}); re-quantize the model "
                         "to one of those with llama.cpp's llama-quantize")
        offset = c.u64(f"the data offset of tensor {name!r}")
        shape = tuple(reversed(ne))
        n = 1
        for s in shape:
            n *= max(s, 1)  # zeros ignored: an "empty" (0, 2**60) tensor is just as absurd
        if n > c.total * t.block_size:  # cheap bound before the exact size check below
            raise c.fail(f"tensor {name!r} claims shape {shape}, far more elements than the file can hold")
        try:
            nbytes = t.nbytes(shape)
        except ValueError as e:
            raise c.fail(f"tensor {name!r}: {str(e)[len('ember: '):]}") from None
        if offset % self.alignment:
            raise c.fail(f"tensor {name!r} data offset {offset} is not a multiple of the alignment {self.alignment}")
        return TensorInfo(name, shape, t, offset, nbytes)

    # ------------------------------------------------------------------ access

    def metadata(self) -> dict:
        """{key: plain Python value}; arrays are lists (nested arrays: lists of lists)."""
        return {k: _plain(v) for k, v in self.fields.items()}

    def keys(self):
        return list(self.tensor_infos)

    def __contains__(self, name):
        return name in self.tensor_infos

    def _info(self, name):
        info = self.tensor_infos.get(name)
        if info is None:
            raise KeyError(f"ember: {self.where} has no tensor {name!r}")
        return info

    def raw(self, name) -> np.ndarray:
        """The tensor's bytes as a flat uint8 array (a view where the source allows it)."""
        info = self._info(name)
        at = self.data_offset + info.offset
        if self._buf is not None:
            return self._buf[at:at + info.nbytes]
        if self._map is not None:
            return self._map[info.offset:info.offset + info.nbytes].view(np.ndarray)
        out = np.empty(info.nbytes, np.uint8)
        self._file.seek(at)
        if self._file.readinto(memoryview(out)) != info.nbytes:
            raise FormatError(f"ember: {self.where}: tensor {name!r}: file shrank while reading")
        return out

    def get_stored(self, name):
        """Stored (plain types) or QTensor (quantized types), without building ember Tensors. In the page, inside
        ember.backends.cpu_pool.weights_in_pool(), a quantized tensor's blocks go from the file straight into the
        kernel pool's memory (SharedRows), never into Pyodide's heap."""
        info = self._info(name)
        t = info.ggml_type
        pool = self._pool if t.is_quantized else None
        if pool is not None and info.nbytes >= SHARED_MIN_BYTES:
            rows = pool.rows_from_file(self._file, self.data_offset + info.offset, info.nbytes,
                                       t.row_bytes(info.shape[-1]), t.id)
            return QTensor(rows, t, info.shape, name=name)
        raw = self.raw(name)
        if t.is_quantized:
            return QTensor(raw, t, info.shape, name=name)
        arr = raw.view(t.np_dtype.newbyteorder("<")).reshape(info.shape)
        if t.name == "I16":
            return Stored(arr.astype(np.int32), dtypes.int32)
        return Stored(arr, _PLAIN_TO_EMBER[t.name])

    def get_tensor(self, name):
        """An ember Tensor (plain types) or an ember.QTensor (quantized types)."""
        v = self.get_stored(name)
        return to_tensor(v) if isinstance(v, Stored) else v


    def __repr__(self):
        return f"GGUFReader({self.where!r}, v{self.version}, {len(self.tensor_infos)} tensors, {len(self.fields)} keys)"


def _plain(v: GGUFValue):
    if v.type == ARRAY and v.sub_type == ARRAY:
        return [_plain(x) for x in v.value]
    return v.value


def _try_memmap(f, start, required):
    """The data section as a memmap (formats.try_memmap); None for an empty data section."""
    try:
        if os.fstat(f.fileno()).st_size <= start:
            return None
    except (OSError, AttributeError):
        if required:
            raise
        return None
    return try_memmap(f, start, required)


def load(src, mmap=None) -> dict:
    """{name: Tensor | QTensor} in file order."""
    with GGUFReader(src, mmap=mmap) as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def metadata(src) -> dict:
    with GGUFReader(src, mmap=False) as f:
        return f.metadata()


# ============================================================================ writing

# the keys every transformer decoder's GGUF metadata carries (llama.cpp's LLM_KV names, under the architecture)
DECODER_FIELDS = ("embedding_length", "block_count", "feed_forward_length", "attention.head_count")


def arch_fields(md: dict, arch: str, where: str, required=DECODER_FIELDS, error=FormatError):
    """The `{arch}.` metadata of a GGUF file as a getter g(key, default=None), after checking that
    general.architecture is `arch` and that every key in `required` is there (else `error`, naming them)."""
    found = md.get("general.architecture")
    if found != arch:
        raise error(f"ember: {where} holds a {found!r} model, not {arch!r}")
    missing = [f"{arch}.{k}" for k in required if md.get(f"{arch}.{k}") is None]
    if missing:
        raise error(f"ember: {where} lacks the metadata {missing}")
    return lambda key, default=None: md.get(f"{arch}.{key}", default)


def _int_type(lo, hi, where):
    for t, (a, b) in ((UINT32, (0, 2**32 - 1)), (INT32, (-2**31, 2**31 - 1)), (INT64, (-2**63, 2**63 - 1)),
                      (UINT64, (0, 2**64 - 1))):
        if a <= lo and hi <= b:
            return t
    raise SaveError(f"ember: GGUF metadata {where}: integer out of the 64-bit range")


def _infer(v, where) -> GGUFValue:
    """A plain value -> GGUFValue. bool -> BOOL, int -> UINT32 / INT32 / INT64 / UINT64 (the first that
    holds it), float -> FLOAT32 (as gguf-py), str -> STRING, numpy scalars and 1-d arrays keep their
    dtype, list/tuple -> ARRAY of the common element type."""
    if isinstance(v, GGUFValue):
        return v
    if isinstance(v, (bool, np.bool_)):
        return GGUFValue(bool(v), BOOL)
    if isinstance(v, np.generic) and v.dtype.newbyteorder("=") in _FROM_NP:
        return GGUFValue(v.item(), _FROM_NP[v.dtype.newbyteorder("=")])
    if isinstance(v, int):
        return GGUFValue(v, _int_type(v, v, where))
    if isinstance(v, float):
        return GGUFValue(v, FLOAT32)
    if isinstance(v, (str, bytes)):
        return GGUFValue(v, STRING)
    if isinstance(v, np.ndarray):
        if v.ndim != 1 or v.dtype.newbyteorder("=") not in _FROM_NP:
            raise SaveError(f"ember: GGUF metadata {where}: arrays must be 1-d numeric, got {v.dtype} {v.shape}")
        return GGUFValue(v.tolist(), ARRAY, _FROM_NP[v.dtype.newbyteorder("=")])
    if isinstance(v, (list, tuple)):
        items = [_infer(x, f"{where}[{i}]") for i, x in enumerate(v)]
        types = {x.type for x in items}
        if not items:
            return GGUFValue([], ARRAY, INT32)
        if types <= {UINT32, INT32, INT64, UINT64} and all(not isinstance(x, np.generic) for x in v):
            return GGUFValue(list(v), ARRAY, _int_type(min(v), max(v), where))
        if len(types) != 1:
            raise SaveError(f"ember: GGUF metadata {where}: array elements must share one type, "
                            f"got {sorted(TYPE_NAMES[t] for t in types)}")
        sub = types.pop()
        if sub == ARRAY:
            return GGUFValue(items, ARRAY, ARRAY)
        return GGUFValue([x.value for x in items], ARRAY, sub)
    raise SaveError(f"ember: GGUF metadata {where}: cannot store a {type(v).__name__}")


def _pack_str(s, where):
    b = s if isinstance(s, bytes) else str(s).encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pack_value(v: GGUFValue, where) -> bytes:
    if v.type in _NUMERIC:
        return _pack_numeric([v.value], v.type, where)
    if v.type == STRING:
        return _pack_str(v.value, where)
    if v.type == ARRAY:
        sub = v.sub_type
        head = struct.pack("<IQ", sub, len(v.value))
        if sub in _NUMERIC:
            return head + _pack_numeric(v.value, sub, where)
        if sub == STRING:
            return head + b"".join(_pack_str(s, where) for s in v.value)
        if sub == ARRAY:
            # an element of an array of arrays is itself (u32 element type, u64 count, elements)
            return head + b"".join(_pack_value(_infer(x, where), where) for x in v.value)
    raise SaveError(f"ember: GGUF metadata {where}: unknown value type {v.type}")


def _pack_numeric(values, vtype, where):
    dt = np.dtype(_NUMERIC[vtype])
    arr = np.asarray(values)
    if vtype == BOOL:
        arr = arr.astype(bool)
    elif dt.kind in "iu":
        if arr.size and (arr.dtype.kind not in "iub" or arr.min() < np.iinfo(dt).min or arr.max() > np.iinfo(dt).max):
            raise SaveError(f"ember: GGUF metadata {where}: value(s) do not fit {TYPE_NAMES[vtype]}")
    return arr.astype(dt).tobytes()


class Deferred:
    """A tensor whose bytes are produced only when the writer reaches it, so a converter holds one
    tensor at a time: `load()` returns its raw bytes (flat uint8) for `ggml_type` and numpy `shape`."""
    __slots__ = ("ggml_type", "shape", "load")

    def __init__(self, ggml_type, shape, load):
        self.ggml_type, self.shape, self.load = T.get(ggml_type), tuple(shape), load


def _tensor_entry(name, x):
    """-> (ggml type, numpy shape, flat uint8 data or a Deferred) for a Tensor, ndarray, Stored, QTensor."""
    if isinstance(x, QTensor):
        return x.ggml_type, tuple(x.shape), x.data.reshape(-1)
    if isinstance(x, Deferred):
        return x.ggml_type, x.shape, x
    s = to_stored(name, x)
    t = T.PLAIN_BY_DTYPE.get(s.dtype.name)
    if t is None:
        raise SaveError(f"ember: tensor {name!r} has dtype {s.dtype.name}, which GGUF cannot store "
                        f"(GGUF stores {', '.join(T.PLAIN_BY_DTYPE)}); cast it first")
    shape = s.array.shape or (1,)  # GGUF has no 0-d tensors: a scalar becomes shape (1,)
    return t, shape, s.array.astype(s.array.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8)


def _chunks(tensors: dict, metadata: dict | None, alignment: int | None):
    meta = dict(metadata or {})
    if alignment is not None:
        meta["general.alignment"] = GGUFValue(alignment, UINT32)
    fields = {}
    for k, v in meta.items():
        if not isinstance(k, str):
            raise SaveError(f"ember: GGUF metadata keys must be str, got {k!r}")
        fields[k] = _infer(v, repr(k))
    al = fields.get("general.alignment", GGUFValue(DEFAULT_ALIGNMENT, UINT32))
    if al.type != UINT32 or al.value <= 0 or al.value & (al.value - 1):
        raise SaveError(f"ember: general.alignment must be a power-of-two UINT32, got {al!r}")
    al = al.value
    entries = []
    for name, x in tensors.items():
        if not isinstance(name, str):
            raise SaveError(f"ember: tensor names must be str, got {name!r}")
        t, shape, data = _tensor_entry(name, x)
        if len(shape) > MAX_DIMS:
            raise SaveError(f"ember: tensor {name!r} of shape {shape} has more than the {MAX_DIMS} dims GGUF allows")
        entries.append((name, t, shape, data, t.nbytes(shape, f"tensor {name!r} of shape {shape}")))
    head = [MAGIC, struct.pack("<IQQ", VERSION, len(entries), len(fields))]
    for k, v in fields.items():
        head += [_pack_str(k, k), struct.pack("<I", v.type), _pack_value(v, repr(k))]
    offset = 0
    for name, t, shape, _, nbytes in entries:
        head += [_pack_str(name, name), struct.pack("<I", len(shape)),
                 struct.pack(f"<{len(shape)}Q", *reversed(shape)), struct.pack("<IQ", t.id, offset)]
        offset += -(-nbytes // al) * al
    head = b"".join(head)
    yield head + b"\0" * (-len(head) % al)
    for name, t, _, data, nbytes in entries:
        if isinstance(data, Deferred):
            data = np.asarray(data.load(), np.uint8).reshape(-1)
        if data.nbytes != nbytes:
            raise SaveError(f"ember: tensor {name!r}: {data.nbytes} bytes of {t.name} data, expected {nbytes}")
        yield data
        if nbytes % al:
            yield b"\0" * (-nbytes % al)


def save(tensors: dict, path, metadata: dict | None = None, alignment: int | None = None):
    """{name: Tensor | ndarray | QTensor} -> a GGUF v3 file. metadata values: see `_infer`, or GGUFValue."""
    with atomic_write(path) as f:
        for chunk in _chunks(tensors, metadata, alignment):
            f.write(chunk)


def dumps(tensors: dict, metadata: dict | None = None, alignment: int | None = None) -> bytes:
    return b"".join(bytes(c) if isinstance(c, np.ndarray) else c for c in _chunks(tensors, metadata, alignment))
