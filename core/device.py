"""Devices and the backend registry.

A device names a backend ("cpu", "webgpu", "cuda") plus an index. Backends are registered by
name as a module path and imported on first use, so `import ember` never imports a GPU library.
"""
from __future__ import annotations

import importlib

# name -> (module path, attribute that builds the backend, extra to install if the import fails)
_REGISTRY = {
    "cpu": ("ember.backends.numpy_backend", "NumpyBackend", None),
    "webgpu": ("ember.webgpu.backend", "WebGPUBackend", "ember[webgpu]  (pip install wgpu)"),
    "cuda": ("ember.backends.cuda_backend", "CudaBackend", "ember[cuda]  (pip install cupy-cuda12x)"),
}
_ALIASES = {"metal": "webgpu", "wgpu": "webgpu", "gpu": "webgpu"}
_BACKENDS: dict = {}  # (type, index) -> backend instance
_DEVICES: dict = {}


class DeviceError(RuntimeError):
    """A device was asked for whose library or hardware is missing."""


def register_backend(name: str, module: str, attr: str, extra: str | None = None) -> None:
    """Make a new backend findable by name (for out-of-tree backends)."""
    _REGISTRY[name] = (module, attr, extra)


class Device:
    __slots__ = ("type", "index", "_backend")

    def __init__(self, type: str, index: int = 0):
        self.type, self.index, self._backend = type, index, None

    @property
    def backend(self):
        b = self._backend
        if b is None:
            b = self._backend = _load_backend(self.type, self.index)
        return b

    def __repr__(self):
        return f"device(type='{self.type}')" if self.index == 0 else f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return self.type if self.index == 0 else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, Device) and other.type == self.type and other.index == self.index

    def __hash__(self):
        return hash((self.type, self.index))


def _load_backend(type: str, index: int):
    key = (type, index)
    if key in _BACKENDS:
        return _BACKENDS[key]
    mod_name, attr, extra = _REGISTRY[type]
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        hint = f"; install {extra}" if extra else ""
        raise DeviceError(f"ember: device '{type}' is not available: {e}{hint}") from e
    be = getattr(mod, attr)(index)
    _BACKENDS[key] = be
    return be


def device(spec="cpu") -> Device:
    """`ember.device("cuda:1")` -> Device. Accepts a Device, 'type' or 'type:index'."""
    if isinstance(spec, Device):
        return spec
    d = _DEVICES.get(spec)
    if d is not None:
        return d
    if not isinstance(spec, str):
        raise TypeError(f"ember: device must be a string or ember.device, got {type(spec).__name__}")
    name, _, idx = spec.partition(":")
    name = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if name not in _REGISTRY:
        raise DeviceError(f"ember: unknown device '{spec}'; known: {', '.join(_REGISTRY)}")
    try:
        index = int(idx) if idx else 0
    except ValueError:
        raise DeviceError(f"ember: bad device index in '{spec}'") from None
    d = _DEVICES[spec] = Device(name, index)
    return d


CPU = device("cpu")


def devices() -> list[str]:
    """Names of the devices that work on this machine (tries each backend; never raises)."""
    found = []
    for name in _REGISTRY:
        try:
            be = device(name).backend
            if getattr(be, "available", True):
                found.append(name)
        except Exception:  # a missing library or adapter just means "not available"
            pass
    return found
