"""IDX files (MNIST, Fashion-MNIST, EMNIST): a big-endian header `00 00 <type> <ndim>`, ndim uint32 sizes,
then the array in C order (http://yann.lecun.com/exdb/mnist/). Gzipped files (`.gz`) are read as they come."""
from __future__ import annotations

import gzip
import os
import struct

import numpy as np

from ..errors import FormatError, LimitError
from .dataset import TensorDataset
from .source import read_source

# type byte -> big-endian numpy dtype
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(src) -> np.ndarray:
    """An IDX file (path or bytes, gzipped or not) -> its array, in native byte order."""
    data, name = read_source(src)
    if len(data) < 4 or data[:2] != b"\0\0":
        raise FormatError(f"ember: {name}: not an IDX file (it must start with two zero bytes)")
    kind, ndim = data[2], data[3]
    if kind not in IDX_TYPES:
        raise FormatError(f"ember: {name}: unknown IDX element type 0x{kind:02x}; expected one of "
                          f"{', '.join(f'0x{k:02x}' for k in IDX_TYPES)}")
    if ndim == 0 or len(data) < 4 + 4 * ndim:
        raise FormatError(f"ember: {name}: IDX header with {ndim} dimensions is truncated or empty")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dt = np.dtype(IDX_TYPES[kind])
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    body = data[4 + 4 * ndim:]
    if len(body) != n:
        raise FormatError(f"ember: {name}: IDX header says {shape} x {dt.itemsize} bytes = {n}, the file holds "
                          f"{len(body)}")
    return np.frombuffer(body, dt).reshape(shape).astype(dt.newbyteorder("="))


def write_idx(path, array) -> None:
    """Write `array` as an IDX file (what `read_idx` reads; gzipped when the name ends in .gz)."""
    a = np.asarray(array)
    code = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}.get(a.dtype.newbyteorder("="))
    if code is None:
        raise LimitError(f"ember: IDX cannot hold {a.dtype}; use uint8, int8, int16, int32, float32 or float64")
    out = bytes([0, 0, code, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(IDX_TYPES[code]).tobytes()
    path = os.fspath(path)
    with open(path, "wb") as f:
        f.write(gzip.compress(out, mtime=0) if path.endswith(".gz") else out)


class IDXDataset(TensorDataset):
    """An images file and a labels file (e.g. train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz):
    `ds[i]` = (image (1, H, W) uint8, or transform(image), label int64)."""

    def __init__(self, images, labels, transform=None):
        x, y = read_idx(images), read_idx(labels).astype(np.int64)
        if x.shape[0] != y.shape[0]:
            raise FormatError(f"ember: {images} holds {x.shape[0]} images, {labels} {y.shape[0]} labels")
        super().__init__(x[:, None] if x.ndim == 3 else x, y)  # (N, 1, H, W)
        self.transform = transform

    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return (self.transform(x) if self.transform else x), y
