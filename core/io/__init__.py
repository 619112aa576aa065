"""ember.io: weights files in and out — safetensors, .npz, PyTorch .pt/.pth (zip), GGUF (gguf.py).

    tensors = ember.io.load("model.safetensors")       # or bytes; format from magic bytes / extension
    ember.io.save(tensors, "out.safetensors", metadata={"k": "v"})
    with ember.io.safe_open("big.safetensors") as f:   # lazy: one tensor at a time
        w = f.get_tensor("lm_head.weight")

Importing this package costs only numpy and a few stdlib modules; zipfile, json and the pickle
machine load when a format is first used.
"""
from __future__ import annotations

import importlib
import os

from ..errors import SaveError
from .formats import FormatError, detect

_READERS = {"safetensors": "safetensors", "npz": "npz", "torch": "torch_pickle", "gguf": "gguf"}
_WRITERS = {".safetensors": "safetensors", ".npz": "npz", ".gguf": "gguf", ".pt": "torch_save", ".pth": "torch_save"}


def _module(kind):
    return importlib.import_module(f"{__name__}.{_READERS[kind]}")


def load(src, format: str | None = None) -> dict:
    """A weights file (path or bytes) -> {name: Tensor}. format: 'safetensors' | 'npz' | 'torch' | 'gguf'
    (default: detected from the magic bytes, then the extension)."""
    return _module(format or detect(src)).load(src)


def metadata(src, format: str | None = None) -> dict:
    """The file's metadata: safetensors __metadata__, npz metadata saved by ember, GGUF key/values,
    a torch checkpoint's top-level plain entries."""
    return _module(format or detect(src)).metadata(src)


def save(tensors: dict, path, metadata: dict | None = None):
    """{name: Tensor | ndarray} -> a file whose format follows the extension: .safetensors, .npz, .gguf, or
    .pt/.pth (torch's zip format, readable by torch.load(weights_only=True); no metadata)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if not isinstance(tensors, dict):
        raise SaveError(f"ember: cannot save {os.fspath(path)!r}: expected a dict of name -> tensor, got a "
                        f"{type(tensors).__name__}")
    if ext not in _WRITERS:
        raise SaveError(f"ember: cannot save {os.fspath(path)!r}: ember writes "
                         f"{', '.join(_WRITERS)} files (choose one of those extensions)")
    importlib.import_module(f"{__name__}.{_WRITERS[ext]}").save(tensors, path, metadata)


def __getattr__(name):  # lazy: safe_open and PickleRecord pull in their modules only when used
    if name == "safe_open":
        from .safetensors import safe_open
        return safe_open
    if name == "PickleRecord":
        from .pickle_vm import PickleRecord
        return PickleRecord
    if name in ("safetensors", "npz", "torch_pickle", "torch_save", "pickle_vm", "gguf"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load", "save", "metadata", "safe_open", "detect", "FormatError", "PickleRecord"]
