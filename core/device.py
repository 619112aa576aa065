"""Devices and the backend registry.

A device names a backend ("cpu", "webgpu", "cuda") plus an index. Backends are registered by
name as a module path and imported on first use, so `import ember` never imports a GPU library.
"""
from __future__ import annotations

import importlib
from .errors import EmberError

# name -> (module path, attribute that builds the backend, extra to install if the import fails)
_REGISTRY = {
    "cpu": ("ember.backends.numpy_backend", "NumpyBackend", None),
    "webgpu": ("ember.webgpu.backend", "WebGPUBackend", "ember[webgpu]  (pip install wgpu)"),
    "cuda": ("ember.backends.cuda_backend", "CudaBackend", "ember[cuda]  (pip install cupy-cuda12x)"),
}
# Exceptions a backend's constructor raises when its library or hardware is missing on this machine,
# besides DeviceError: webgpu's adapters raise AdapterError ("needs the `wgpu` package", "no WebGPU
# adapter found"). Named by path so that listing devices imports no GPU module that is not asked for.
_UNAVAILABLE_ERRORS = {"webgpu": ("ember.webgpu.adapter_native", "AdapterError")}
# Names that are not devices, with what to say instead. There are no aliases: one name per backend.
_NOT_DEVICES = {
    "metal": "use 'webgpu' (it runs on Metal through wgpu on macOS)",
    "wgpu": "use 'webgpu'",
    "gpu": "use 'webgpu' or 'cuda'",
    "mps": "use 'webgpu' (it runs on Metal through wgpu on macOS)",
}
_BACKENDS: dict = {}  # (type, index) -> backend instance
_DEVICES: dict = {}


class DeviceError(EmberError, RuntimeError):
    """A device was asked for whose library or hardware is missing (or a name that is no device)."""


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


def loaded_backends(type: str) -> list:
    """The backends of one device type built so far (cuda.synchronize() waits for each)."""
    return [be for (kind, _), be in list(_BACKENDS.items()) if kind == type]


def _load_backend(type: str, index: int):
    key = (type, index)
    if key in _BACKENDS:
        return _BACKENDS[key]
    mod_name, attr, extra = _REGISTRY[type]
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        if _is_ember_module(e.name):  # a module of ember itself is broken: a bug, not a missing library
            raise
        hint = f"; install {extra}" if extra else ""
        raise DeviceError(f"ember: device '{type}' is not available: {e}{hint}") from e
    be = getattr(mod, attr)(index)
    _BACKENDS[key] = be
    return be


def _is_ember_module(name) -> bool:
    return name is not None and (name == "ember" or name.startswith("ember."))


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
    name = name.strip().lower()
    if name in _NOT_DEVICES:
        raise DeviceError(f"ember: '{spec}' is not a device name; {_NOT_DEVICES[name]}")
    if name not in _REGISTRY:
        raise DeviceError(f"ember: unknown device '{spec}'; known: {', '.join(_REGISTRY)}")
    try:
        index = int(idx) if idx else 0
    except ValueError:
        raise DeviceError(f"ember: bad device index in '{spec}'") from None
    d = _DEVICES[spec] = Device(name, index)
    return d


CPU = device("cpu")


def _unavailable_errors(name) -> tuple:
    errors = [DeviceError]
    where = _UNAVAILABLE_ERRORS.get(name)
    if where:
        try:
            errors.append(getattr(importlib.import_module(where[0]), where[1]))
        except ImportError as e:
            if _is_ember_module(e.name):
                raise
    return tuple(errors)


def device_status(name: str) -> tuple[bool, str]:
    """(True, description) when `name` works here; (False, why not) when its library or hardware is missing.

    Only the backend's "not available" signals count as unavailable: DeviceError (a missing library, no
    GPU) and the errors named in _UNAVAILABLE_ERRORS (webgpu: no wgpu, no adapter). Anything else -- a
    broken ember module, a bug in a backend's constructor -- raises, so it cannot silently drop a device.
    """
    try:
        be = device(name).backend
    except Exception as e:
        if not isinstance(e, _unavailable_errors(name)):
            raise
        return False, str(e).replace("ember: ", "").splitlines()[0]
    if not be.available:
        return False, be.unavailable_reason
    return True, be.description or (type(be).__name__ if type(be).__repr__ is object.__repr__ else repr(be))


def devices() -> list[str]:
    """Names of the devices that work on this machine. A device whose library or hardware is missing is
    left out (`ember info` shows why); any other error while building a backend raises."""
    return [name for name in _REGISTRY if device_status(name)[0]]
