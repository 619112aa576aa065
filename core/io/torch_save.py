"""Write {name: tensor} as a PyTorch zip checkpoint that torch.load(weights_only=True) reads, without torch.

The pickle is emitted opcode by opcode (protocol 2, as torch.save does): a dict of
torch._utils._rebuild_tensor_v2(<persistent storage>, 0, size, stride, False, OrderedDict()) calls.
uint32 has no typed storage class, so it uses _rebuild_tensor_v3 with an UntypedStorage and torch.uint32.
"""
from __future__ import annotations

import struct

from ..errors import SaveError
from .formats import atomic_write, to_stored

_STORAGE = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
            "bfloat16": "BFloat16Storage", "int64": "LongStorage", "int32": "IntStorage", "int8": "CharStorage",
            "uint8": "ByteStorage", "bool": "BoolStorage"}


def _int(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if 0 <= v < 65536:
        return b"M" + struct.pack("<H", v)
    if -(2 ** 31) <= v < 2 ** 31:
        return b"J" + struct.pack("<i", v)
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _tuple(items) -> bytes:
    return b"(" + b"".join(_int(i) for i in items) + b"t"


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _tensor(key: str, s) -> bytes:
    shape = s.array.shape
    stride = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        stride[i] = stride[i + 1] * max(shape[i + 1], 1)
    v3 = s.dtype.name not in _STORAGE
    storage = (b"(" + _str("storage") + (_global("torch.storage", "UntypedStorage") if v3 else
                                          _global("torch", _STORAGE[s.dtype.name]))
               + _str(key) + _str("cpu") + _int(s.array.nbytes if v3 else s.array.size) + b"tQ")
    args = (storage + _int(0) + _tuple(shape) + _tuple(stride) + b"\x89"
            + _global("collections", "OrderedDict") + b")R" + (_global("torch", s.dtype.name) if v3 else b""))
    return _global("torch._utils", "_rebuild_tensor_v3" if v3 else "_rebuild_tensor_v2") + b"(" + args + b"tR"


def save(tensors: dict, path, metadata: dict | None = None):
    import zipfile
    if metadata:
        raise SaveError("ember: .pt/.pth files carry no metadata; use .safetensors to keep it")
    stored, pkl = {}, [b"\x80\x02}("]
    for i, (name, x) in enumerate(tensors.items()):
        if not isinstance(name, str):
            raise SaveError(f"ember: invalid tensor name {name!r} (must be a str)")
        stored[str(i)] = to_stored(name, x)
        pkl.append(_str(name) + _tensor(str(i), stored[str(i)]))
    pkl.append(b"u.")
    with atomic_write(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"".join(pkl))
        z.writestr("archive/byteorder", "little")
        for key, s in stored.items():
            z.writestr(f"archive/data/{key}", s.array.astype(s.array.dtype.newbyteorder("<"), copy=False).tobytes())
        z.writestr("archive/version", "3\n")
