"""What every weights format shares: the error type, sources (path or bytes), format detection,
and the hand-off between numpy storage arrays and ember Tensors.

Readers work at the numpy level: a tensor is a `Stored` (storage ndarray + ember DType; bfloat16
as uint16 bits) so the formats do not depend on the Tensor core; `load` converts at the end.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from .. import dtypes
from ..errors import FormatError, LimitError  # noqa: F401  (re-exported: readers import them from here)
from ..errors import SaveError


class Stored:
    """A tensor as a reader produces it: `array` has `dtype.np` as its numpy dtype."""
    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype: dtypes.DType):
        self.array, self.dtype = array, dtype

    @property
    def shape(self):
        return self.array.shape

    def __repr__(self):
        return f"Stored(shape={self.array.shape}, dtype={self.dtype.name})"


# ---------------------------------------------------------------- sources

def is_bytes(src) -> bool:
    return isinstance(src, (bytes, bytearray, memoryview))


def describe(src) -> str:
    """How errors name a source: the path, or '<N bytes>' for in-memory data."""
    if is_bytes(src):
        return f"<{memoryview(src).nbytes} bytes>"
    return os.fspath(src)


def check_source(src):
    if not (is_bytes(src) or isinstance(src, (str, os.PathLike))):
        raise TypeError(f"ember: expected a path or bytes, got {type(src).__name__}")


def head(src, n: int) -> bytes:
    """The first n bytes of a path or buffer (fewer if it is shorter)."""
    if is_bytes(src):
        return bytes(memoryview(src).cast("B")[:n])
    try:
        with open(src, "rb") as f:
            return f.read(n)
    except OSError as e:
        raise FormatError(f"ember: cannot read {describe(src)}: {e.strerror or e}") from None


# ---------------------------------------------------------------- detection

_EXT = {".safetensors": "safetensors", ".npz": "npz", ".pt": "torch", ".pth": "torch",
        ".bin": "torch", ".ckpt": "torch", ".gguf": "gguf"}
# torch's legacy (pre-1.6) format starts with a pickled magic number 0x1950a86a20f9469cfc6c
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def detect(src) -> str:
    """'safetensors' | 'npz' | 'torch' | 'gguf', from the magic bytes first, else the extension."""
    check_source(src)
    magic = head(src, 16)
    if magic[:4] == b"GGUF":
        return "gguf"
    if magic.startswith(_TORCH_LEGACY_MAGIC):
        raise FormatError(f"ember: {describe(src)} is a legacy (pre-1.6, non-zip) torch file, which ember "
                          "does not read; re-save it with torch.save (the zip format is the default)")
    if magic[:4] == b"PK\x03\x04":
        return _zip_kind(src)
    if len(magic) >= 9 and magic[8:9] == b"{":
        return "safetensors"
    if not is_bytes(src):
        kind = _EXT.get(os.path.splitext(os.fspath(src))[1].lower())
        if kind:
            return kind
    raise FormatError(f"ember: {describe(src)} is not a known weights format "
                      "(safetensors, .npz, torch .pt/.pth zip, GGUF)")


def _zip_kind(src) -> str:
    """A zip is torch's format if it holds '<archive>/data.pkl', else an .npz."""
    with open_zip(src) as z:
        names = z.namelist()
    return "torch" if any(n.endswith("data.pkl") for n in names) else "npz"


def zip_errors() -> tuple:
    """What zipfile raises on damaged input (NotImplementedError: odd version or compression; RuntimeError:
    encryption), so readers turn exactly these into FormatError."""
    import zipfile
    import zlib
    return (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError)


def open_zip(src):
    import io
    import zipfile
    try:
        z = zipfile.ZipFile(io.BytesIO(src) if is_bytes(src) else src)
    except zip_errors() as e:
        raise FormatError(f"ember: {describe(src)} is a damaged zip file: {e}") from None
    seen = set()
    for name in z.namelist():  # zipfile keeps both entries and a lookup silently takes the last
        if name in seen:
            z.close()
            raise FormatError(f"ember: {describe(src)}: zip entry {name!r} is stored twice")
        seen.add(name)
    return z


def source_size(src) -> int:
    return memoryview(src).nbytes if is_bytes(src) else os.path.getsize(src)


def check_member_size(zinfo, archive_size: int, where: str):
    """Refuse a zip member whose claimed size the archive cannot hold, before allocating for it.
    Deflate expands at most ~1032x, so a larger claim is a lie (or a bomb)."""
    limit = archive_size if zinfo.compress_type == 0 else 1032 * zinfo.compress_size + 1024
    if zinfo.file_size > limit:
        raise FormatError(f"ember: {where}: zip entry {zinfo.filename!r} claims {zinfo.file_size} bytes, "
                          f"more than the archive can hold")


def read_json_object(path) -> dict:
    """A config file (config.json, index files) as a dict; anything else is a FormatError naming the file."""
    import json
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FormatError(f"ember: {where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise FormatError(f"ember: {where}: malformed JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise FormatError(f"ember: {where}: JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise FormatError(f"ember: {where}: expected a JSON object, got {type(obj).__name__}")
    return obj


# ---------------------------------------------------------------- Tensor hand-off

def contiguous(a: np.ndarray, dtype=None) -> np.ndarray:
    """a as a C-contiguous array of dtype, copying only if needed (np.ascontiguousarray turns 0-d into 1-d)."""
    a = np.asarray(a)
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    return a if a.flags.c_contiguous else a.copy(order="C")


def to_tensor(s: Stored):
    from ..tensor import Tensor
    return Tensor._from_storage(s.array, s.dtype)


def to_stored(name: str, x) -> Stored:
    """An ember Tensor, a Stored, or a numpy array -> Stored (C-contiguous) for writing."""
    if isinstance(x, Stored):
        return Stored(contiguous(x.array), x.dtype)
    if hasattr(x, "_storage_numpy") and hasattr(x, "dtype"):
        d = dtypes.get(x.dtype)
        return Stored(contiguous(x._storage_numpy()), d)
    if isinstance(x, np.ndarray):
        if x.dtype == np.uint16:
            raise SaveError(f"ember: tensor {name!r}: a uint16 numpy array is ambiguous (ember stores "
                            "bfloat16 as uint16 bits); pass an ember Tensor")
        try:
            d = dtypes.get(x.dtype)
        except TypeError as e:
            raise SaveError(f"ember: tensor {name!r}: {str(e)[len('ember: '):]}") from None
        return Stored(contiguous(x), d)
    raise SaveError(f"ember: tensor {name!r} is a {type(x).__name__}; expected an ember Tensor or numpy array")


def try_memmap(f, start, required):
    """The file from `start` on as a copy-on-write uint8 memmap, or None where mapping is unavailable
    (Pyodide, special files); with `required` the failure propagates instead."""
    try:
        return np.memmap(f, np.uint8, mode="c", offset=start)
    except (ImportError, OSError, ValueError, AttributeError):
        if required:
            raise
        return None


class LazyFile:
    """Close/context-manager plumbing shared by the lazy readers (safetensors.safe_open, GGUFReader):
    subclasses set `self._file` to the open file (None for bytes sources)."""

    _file = None

    def close(self):
        if self._file is not None:
            self._file.close()  # a memmap keeps its own mapping alive for arrays that use it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@contextlib.contextmanager
def atomic_write(path):
    """A binary file object that replaces `path` only once fully written (temporary name in the same
    folder, then os.replace). Saving over a file that is still memory-mapped by a lazy load (or was
    being read) then never truncates it under the reader, and a failed write leaves the old file."""
    path = os.path.realpath(os.fspath(path))  # through a symlink: replace its target, keep the link
    folder, base = os.path.split(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"ember: cannot save {path}: folder {folder} does not exist")
    _remove_stale_temps(folder, base)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            yield f
        _copy_owner_and_mode(path, tmp)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        # name what the caller asked for, not the temp file: a write error (a full disk) carries no file name,
        # an open or rename error the temp file's
        if isinstance(e, OSError) and e.filename in (None, tmp) and not str(e).startswith("ember:"):
            err = type(e)(f"ember: cannot save {path}: {e.strerror or e}")
            err.errno = e.errno  # (strerror and filename unset: str(err) stays the message above)
            raise err from None
        raise


def _copy_owner_and_mode(path: str, tmp: str):
    """Give the new file the old one's mode (a 0600 file stays 0600) and, where allowed, its owner."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    os.chmod(tmp, st.st_mode & 0o7777)
    if hasattr(os, "chown") and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
        with contextlib.suppress(PermissionError):  # only root (or the owner, for the group) may
            os.chown(tmp, st.st_uid, st.st_gid)


def _remove_stale_temps(folder: str, base: str):
    """Delete `base.<pid>.tmp` files left by a save that was killed, when that pid no longer runs."""
    import re
    pattern = re.compile(re.escape(base) + r"\.(\d+)\.tmp")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if m and not _pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, AttributeError):  # someone else's process, or no kill (Pyodide)
        return True
    return True
