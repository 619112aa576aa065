"""Where a reader's bytes come from: a path or the bytes themselves (the page hands over bytes), gzipped
or not, with the decompression bounded by the load budget (a few-KB gzip bomb stops here)."""
from __future__ import annotations

import os
import zlib

from ..errors import FormatError, LimitError
from ..limits import budget


def read_source(src, decompress: bool = True) -> tuple[bytes, str]:
    """(the file's bytes, a name for messages); gzip data (magic 1f 8b) is decompressed."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data, name = bytes(src), "<bytes>"
    else:
        name = os.fspath(src)
        with open(name, "rb") as f:
            data = f.read()
    if decompress and data[:2] == b"\x1f\x8b":
        data = gunzip(data, name)
    return data, name


def gunzip(data: bytes, name: str) -> bytes:
    limit = budget.load_bytes(len(data))
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise FormatError(f"ember: {name}: broken gzip stream ({e})") from None
    if len(out) > limit:
        raise LimitError(name, "decompressed size", f"over {limit}", limit, "load_allowance", " bytes")
    return out
