"""safetensors read/write without the safetensors package.

Layout: u64 little-endian header length N | N bytes of JSON header | data buffer. The header maps
each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
buffer) plus an optional "__metadata__" {str: str}. The spec requires the tensors to tile the
buffer exactly: sorted by offset they start at 0, leave no gaps, never overlap, and end at its end.

Reads are lazy per tensor: `safe_open` parses only the header; `get_tensor` maps (np.memmap,
copy-on-write) or reads just that tensor's bytes. Where mmap is missing (Pyodide) it seeks and reads.
"""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from .. import dtypes
from ..errors import SaveError
from .formats import FormatError, LazyFile, Stored, atomic_write, try_memmap, describe, is_bytes, to_stored, to_tensor

MAX_HEADER = 100_000_000  # the safetensors package refuses larger headers too
MAX_NDIM = 64  # numpy's limit

# every dtype the spec names -> bits per element; ember reads those in READ_DTYPES (code -> ember dtype)
SPEC_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
             "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64,
             "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "E8M0": 8}
READ_DTYPES = {"BOOL": dtypes.bool_, "U8": dtypes.uint8, "I8": dtypes.int8, "I32": dtypes.int32,
               "U32": dtypes.uint32, "I64": dtypes.int64, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
               "F32": dtypes.float32, "F64": dtypes.float64}
SPEC_NAME = {d.name: code for code, d in READ_DTYPES.items()}


class _Entry:
    __slots__ = ("name", "code", "shape", "begin", "end")

    def __init__(self, name, code, shape, begin, end):
        self.name, self.code, self.shape, self.begin, self.end = name, code, shape, begin, end


# ---------------------------------------------------------------- header

def _bad(where, msg):
    return FormatError(f"ember: {where}: {msg}")


def _no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError(f"duplicate key {k!r}")
        d[k] = v
    return d


def parse_header(raw: bytes, data_len: int, where: str):
    """JSON header bytes + data buffer length -> ({name: _Entry} in file order, metadata)."""
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except FormatError as e:
        raise _bad(where, f"header has a {e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad(where, f"header is not valid JSON ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict):
        raise _bad(where, f"header is a JSON {type(header).__name__}, expected an object")
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(where, "__metadata__ must map strings to strings")
    entries = {name: _entry(name, info, where) for name, info in header.items()}
    _check_tiling(entries, data_len, where)
    return entries, meta


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(name, info, where) -> _Entry:
    w = f"{where}: tensor {name!r}"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise FormatError(f"ember: {w}: entry must be an object with exactly dtype, shape, data_offsets")
    code, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in SPEC_BITS:
        raise FormatError(f"ember: {w}: unknown dtype {code!r}")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d) and d >= 0 for d in shape):
        raise FormatError(f"ember: {w}: shape {shape!r} is not a list of at most {MAX_NDIM} non-negative ints")
    if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) and o >= 0 for o in offs)
            and offs[0] <= offs[1]):
        raise FormatError(f"ember: {w}: data_offsets {offs!r} must be [begin, end] with 0 <= begin <= end")
    nbits = math.prod(shape) * SPEC_BITS[code]
    if nbits % 8 or nbits // 8 != offs[1] - offs[0]:
        raise FormatError(f"ember: {w}: shape {shape} of {code} needs {nbits / 8:g} bytes but data_offsets "
                          f"{offs} span {offs[1] - offs[0]}")
    if math.prod(max(d, 1) for d in shape) >= 2 ** 62:
        raise FormatError(f"ember: {w}: shape {shape} is too large")
    return _Entry(name, code, tuple(shape), offs[0], offs[1])


def _check_tiling(entries, data_len, where):
    pos, prev = 0, None
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin != pos:
            what = f"overlaps tensor {prev!r}" if e.begin < pos else f"leaves a gap of {e.begin - pos} bytes"
            raise _bad(where, f"tensor {e.name!r} at data_offsets [{e.begin}, {e.end}] {what}")
        pos, prev = e.end, e.name
    if pos != data_len:
        raise _bad(where, f"tensors cover {pos} bytes but the data buffer holds {data_len} "
                          f"({'truncated file' if pos > data_len else 'trailing bytes'})")


# ---------------------------------------------------------------- reading

class safe_open(LazyFile):
    """Lazy reader: `keys()`, `metadata()`, `get_tensor(name)`, `get_stored(name)`; also a context manager.

    src is a path or a bytes-like object. From bytes, tensors are zero-copy views (read-only for immutable
    `bytes`; pass a bytearray for writable ones). From a path, mmap=None maps the file copy-on-write where
    np.memmap works and otherwise seeks and reads one tensor at a time; mmap=False always reads.
    """

    def __init__(self, src, mmap=None):
        self.where = describe(src)
        self._buf = self._file = self._map = None
        if is_bytes(src):
            self._buf = np.frombuffer(src, np.uint8)
            total = self._buf.nbytes
            raw = self._read_header(lambda a, n: self._buf[a:a + n].tobytes(), total)
        else:
            try:
                self._file = open(src, "rb")
                total = os.fstat(self._file.fileno()).st_size
            except OSError as e:
                raise FormatError(f"ember: cannot read {self.where}: {e.strerror or e}") from None
            try:
                raw = self._read_header(self._pread, total)
            except BaseException:
                self._file.close()
                raise
        self._start = 8 + len(raw)
        try:
            self._entries, self._meta = parse_header(raw, total - self._start, self.where)
            if self._file is not None and mmap is not False and total > self._start:
                self._map = try_memmap(self._file, self._start, mmap)
        except BaseException:
            self.close()
            raise

    def _pread(self, at, n):
        self._file.seek(at)
        return self._file.read(n)

    def _read_header(self, read, total):
        if total < 8:
            raise _bad(self.where, f"file is {total} bytes, too short for the 8-byte header length")
        (n,) = struct.unpack("<Q", read(0, 8))
        if n > MAX_HEADER or n > total - 8:
            raise _bad(self.where, f"header length {n} exceeds the file ({total} bytes) or the "
                                   f"{MAX_HEADER}-byte limit")
        return read(8, n)

    def keys(self):
        return list(self._entries)

    def metadata(self):
        return dict(self._meta)

    def shape(self, name):
        return self._entry(name).shape

    def dtype(self, name):
        return self._ember_dtype(self._entry(name))

    def _entry(self, name):
        e = self._entries.get(name)
        if e is None:
            raise KeyError(f"ember: {self.where} has no tensor {name!r}")
        return e

    def _ember_dtype(self, e):
        d = READ_DTYPES.get(e.code)
        if d is None:
            raise FormatError(f"ember: {self.where}: tensor {e.name!r} has dtype {e.code}, which ember does "
                              f"not support (supported: {', '.join(READ_DTYPES)})")
        return d

    def get_stored(self, name) -> Stored:
        e = self._entry(name)
        d = self._ember_dtype(e)
        n = e.end - e.begin
        if self._buf is not None:
            raw = self._buf[self._start + e.begin:self._start + e.end]
        elif self._map is not None:
            raw = self._map[e.begin:e.end].view(np.ndarray)  # plain array over the mapping
        else:
            raw = np.empty(n, np.uint8)
            self._file.seek(self._start + e.begin)
            if self._file.readinto(memoryview(raw)) != n:
                raise _bad(self.where, f"tensor {name!r}: file shrank while reading")
        return Stored(raw.view(d.np.newbyteorder("<")).reshape(e.shape), d)

    def get_tensor(self, name):
        return to_tensor(self.get_stored(name))



def read(src, mmap=None) -> dict:
    """All tensors as {name: Stored}, in file order."""
    f = safe_open(src, mmap=mmap)
    try:
        return {k: f.get_stored(k) for k in f.keys()}
    finally:
        f.close()


def load(src, mmap=None) -> dict:
    return {k: to_tensor(v) for k, v in read(src, mmap).items()}


def metadata(src) -> dict:
    f = safe_open(src, mmap=False)
    f.close()
    return f.metadata()


# ---------------------------------------------------------------- writing

def dumps(tensors: dict, metadata: dict | None = None) -> bytes:
    """{name: Tensor | ndarray} -> safetensors bytes. Tensors are laid out by alignment then name (as the
    safetensors package does) and the header is space-padded to 8 bytes so every tensor is aligned."""
    return b"".join(_chunks(tensors, metadata))


def save(tensors: dict, path, metadata: dict | None = None):
    with atomic_write(path) as f:
        for chunk in _chunks(tensors, metadata):
            f.write(chunk)


def _chunks(tensors, metadata):
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise SaveError("ember: safetensors metadata must be a dict of str -> str")
    stored = {}
    for name, x in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise SaveError(f"ember: invalid tensor name {name!r} (must be a str other than '__metadata__')")
        stored[name] = to_stored(name, x)
    order = sorted(stored, key=lambda k: (-stored[k].dtype.itemsize, k))
    header, pos = {}, 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for k in order:
        s = stored[k]
        header[k] = {"dtype": SPEC_NAME[s.dtype.name], "shape": list(s.shape),
                     "data_offsets": [pos, pos + s.array.nbytes]}
        pos += s.array.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    yield struct.pack("<Q", len(raw)) + raw
    for k in order:
        a = stored[k].array
        yield a.astype(a.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8).data
