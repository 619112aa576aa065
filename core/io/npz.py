""".npz read/write (numpy's zip of .npy files), never unpickling.

npz has no bfloat16: ember writes bfloat16 as uint16 bits and lists those names, with any string
metadata, in a JSON entry `__ember__`. A uint16 array without that mark has no ember dtype and is
refused by name. Each .npy header is checked against its zip entry before any allocation.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from .. import dtypes
from ..errors import SaveError
from ..limits import Meter
from .formats import (
    FormatError,
    atomic_write,
    Stored,
    check_member_size,
    contiguous,
    describe,
    open_zip,
    source_size,
    to_stored,
    to_tensor,
    zip_errors,
)

MARK = "__ember__"


def _read_npy(z, zinfo, where):
    """One .npy member -> ndarray (native byte order, C order)."""
    fmt = np.lib.format
    name = zinfo.filename
    with z.open(zinfo) as f:
        version = fmt.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise FormatError(f"ember: {where}: {name!r} uses .npy format version {version}, not 1.0/2.0")
        with warnings.catch_warnings():  # numpy literal_evals the header: garbage warns before it fails
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dt = read_header(f)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise FormatError(f"ember: {where}: array {name!r} has shape {shape!r}, not a tuple of sizes")
        if dt.hasobject or dt.itemsize == 0 or dt.fields is not None:
            raise FormatError(f"ember: {where}: array {name!r} has dtype {dt}, which is not a plain numeric dtype")
        count = 1
        for d in shape:
            count *= d
        nbytes = count * dt.itemsize
        if nbytes != zinfo.file_size - f.tell():
            raise FormatError(f"ember: {where}: array {name!r} of shape {shape} {dt} needs {nbytes} bytes but "
                              f"its entry holds {zinfo.file_size - f.tell()}")
        out = np.empty(count, dt)
        if f.readinto(memoryview(out.reshape(-1).view(np.uint8))) != nbytes:
            raise FormatError(f"ember: {where}: array {name!r} is truncated")
    out = out.reshape(shape, order="F" if fortran else "C")
    return contiguous(out, dt.newbyteorder("="))


def read(src) -> tuple[dict, dict]:
    """.npz -> ({name: Stored}, metadata)."""
    import tokenize  # numpy tokenizes .npy headers, and raises its errors on garbage
    where, size = describe(src), source_size(src)
    arrays, meter = {}, Meter(where, size)
    with open_zip(src) as z:
        try:
            for zinfo in z.infolist():
                if not zinfo.filename.endswith(".npy"):
                    continue
                name = zinfo.filename[:-4]
                check_member_size(zinfo, size, where)
                # one deflated entry listed many times in the directory decompresses once per listing
                meter.take(zinfo.file_size, f"array {name!r}")
                arrays[name] = _read_npy(z, zinfo, where)
        except zip_errors() + (SyntaxError, tokenize.TokenError) as e:  # the last two: a garbled .npy header
            if isinstance(e, FormatError):
                raise
            raise FormatError(f"ember: {where}: damaged .npz: {type(e).__name__}: {e}") from None
    mark = _mark(arrays.pop(MARK, None), where)
    bf16 = set(mark.get("bfloat16", []))
    out = {}
    for name, a in arrays.items():
        if name in bf16 and a.dtype == np.uint16:
            out[name] = Stored(a, dtypes.bfloat16)
            continue
        d = dtypes.FROM_NP.get(a.dtype)
        if d is None or a.dtype == np.uint16:
            raise FormatError(f"ember: {where}: array {name!r} has numpy dtype {a.dtype}, which ember does not "
                              f"support (supported: {', '.join(x.name for x in dtypes.ALL)})")
        out[name] = Stored(a, d)
    return out, mark.get("metadata", {})


def _mark(a, where) -> dict:
    if a is None:
        return {}
    try:
        mark = json.loads(str(a[()]))
    except (ValueError, TypeError, IndexError):
        mark = None
    if not (isinstance(mark, dict) and isinstance(mark.get("bfloat16", []), list)
            and isinstance(mark.get("metadata", {}), dict)):
        raise FormatError(f"ember: {where}: entry {MARK!r} is not ember's JSON record")
    return mark


def load(src) -> dict:
    return {k: to_tensor(v) for k, v in read(src)[0].items()}


def metadata(src) -> dict:
    return read(src)[1]


def save(tensors: dict, path, metadata: dict | None = None):
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SaveError("ember: .npz metadata must be a dict of str -> str")
    arrays, bf16 = {}, []
    for name, x in tensors.items():
        if not isinstance(name, str) or name == MARK:
            raise SaveError(f"ember: invalid tensor name {name!r} (must be a str other than {MARK!r})")
        s = to_stored(name, x)
        arrays[name] = s.array
        if s.dtype is dtypes.bfloat16:
            bf16.append(name)
    if bf16 or metadata:
        arrays[MARK] = np.array(json.dumps({"bfloat16": bf16, "metadata": dict(metadata or {})}))
    with atomic_write(path) as f:  # a file object, so numpy does not append '.npz' to the name
        np.savez(f, **arrays)
