"""nn.Module and Parameter: torch-like registration, strict state-dict loading (as MLX reports it)."""
from __future__ import annotations

import os
from collections import OrderedDict

from .. import autograd as A
from ..errors import EmberError
from ..tensor import Tensor


class Parameter(Tensor):
    """A Tensor that a Module registers as a trainable parameter."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        t = object.__new__(cls)
        if data is None:
            from ..tensor import zeros
            data = zeros(0)
        t._data, t.device, t.grad, t._ctx = data._data, data.device, None, None
        t.requires_grad = bool(requires_grad) and data.dtype.is_float
        return t

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class StateDictError(EmberError, KeyError):
    """load_state_dict(strict=True) found missing, unexpected or mis-shaped keys.

    Fields: `missing` and `unexpected` (lists of names), `mismatched` (list of (name, expected shape,
    got shape)), `source` (the file or other origin of the tensors, or None), `owner` (what was loaded into)."""

    def __init__(self, message, missing=(), unexpected=(), mismatched=(), source=None, owner=None):
        super().__init__(message)
        self.missing, self.unexpected, self.mismatched = list(missing), list(unexpected), list(mismatched)
        self.source, self.owner = source, owner

    def __str__(self):
        return self.args[0]


SHOW_KEYS = 20  # names listed per kind in a StateDictError message; the fields hold all of them


def check_state_dict(expected: dict, state_dict, strict=True, source=None, owner="model"):
    """Compare `state_dict` ({name: tensor-like with .shape}) with `expected` ({name: shape}); raise one
    StateDictError listing every problem (shape mismatches always, missing/unexpected keys when strict).
    Returns (missing, unexpected). The one strict check: Module.load_state_dict and the model loaders
    that check names before mapping them (models/llama/names.py) both call it."""
    where = f" from {source}" if source is not None else ""
    if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
        raise StateDictError(f"ember: state dict{where} for {owner} is a {type(state_dict).__name__}, not a mapping "
                             "of names to tensors", [], [], [], source, owner)
    for k in expected:
        if k in state_dict and getattr(state_dict[k], "shape", None) is None:
            raise StateDictError(f"ember: state dict{where}: {k!r} is a {type(state_dict[k]).__name__}, not a tensor "
                                 f"(loading into {owner})", [], [], [], source, owner)
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    mismatched = [(k, tuple(expected[k]), tuple(state_dict[k].shape)) for k in expected
                  if k in state_dict and tuple(state_dict[k].shape) != tuple(expected[k])]
    if mismatched or (strict and (missing or unexpected)):
        lines = [f"ember: error loading state dict{where} into {owner}:"]
        more = lambda keys: f"{', '.join(keys[:SHOW_KEYS])}{' ...' if len(keys) > SHOW_KEYS else ''}"
        if missing:
            lines.append(f"  missing keys ({len(missing)}): {more(missing)}")
        if unexpected:
            lines.append(f"  unexpected keys ({len(unexpected)}): {more(unexpected)}")
        for k, want, got in mismatched[:SHOW_KEYS]:
            lines.append(f"  shape mismatch for {k}: checkpoint {got}, model {want}")
        if len(mismatched) > SHOW_KEYS:
            lines.append(f"  ... and {len(mismatched) - SHOW_KEYS} more shape mismatches")
        raise StateDictError("\n".join(lines), missing, unexpected, mismatched, source, owner)
    return missing, unexpected


_STRUCTURE = [0]  # bumped whenever any module gains or loses a parameter or a submodule


def structure_version() -> int:
    """A count that changes whenever any module gains or loses a parameter or a submodule: what a cached result of
    walking a module tree (its first parameter) is keyed by."""
    return _STRUCTURE[0]


class Module:
    training = True

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # Parameters, buffers and submodules live in ordinary attributes (fast access in forward)
    # and are also listed by name in the registries that state_dict walks.
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"ember: call super().__init__() in {type(self).__name__}.__init__ before setting {name!r}")
        params, bufs, mods = d["_parameters"], d["_buffers"], d["_modules"]
        if isinstance(value, Parameter):
            bufs.pop(name, None), mods.pop(name, None)
            params[name] = value
            _STRUCTURE[0] += 1
        elif isinstance(value, Module):
            params.pop(name, None), bufs.pop(name, None)
            mods[name] = value
            _STRUCTURE[0] += 1
        elif name in bufs and (value is None or isinstance(value, Tensor)):
            bufs[name] = value
        else:
            if name in params or name in mods:
                _STRUCTURE[0] += 1
            params.pop(name, None), mods.pop(name, None), bufs.pop(name, None)
        object.__setattr__(self, name, value)

    def register_buffer(self, name, tensor, persistent=True):
        self.__dict__["_buffers"][name] = tensor
        if not persistent:
            self._non_persistent.add(name)
        object.__setattr__(self, name, tensor)

    def register_parameter(self, name, param):
        setattr(self, name, param)

    def add_module(self, name, module):
        setattr(self, name, module)

    def __delattr__(self, name):
        for reg in (self._parameters, self._buffers, self._modules):
            reg.pop(name, None)
        _STRUCTURE[0] += 1
        object.__delattr__(self, name)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"ember: {type(self).__name__} has no forward()")

    # ------------------------------------------------------------------ traversal
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        yield self
        for m in self._modules.values():
            if m is not None:
                yield from m.modules()

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def named_parameters(self, prefix="", recurse=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, p in m._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mp}.{n}" if mp else n), p

    def parameters(self, recurse=True):
        # named_parameters' order without its names (a model's device and dtype are read from its first
        # parameter at every decoded token: the names cost 20 us there)
        seen = set()
        for m in self.modules() if recurse else (self,):
            for p in m._parameters.values():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def named_buffers(self, prefix=""):
        for mp, m in self.named_modules(prefix):
            for n, b in m._buffers.items():
                if b is not None:
                    yield (f"{mp}.{n}" if mp else n), b

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    # ------------------------------------------------------------------ state
    def state_dict(self):
        out = OrderedDict()
        for mp, m in self.named_modules():
            for n, p in m._parameters.items():
                if p is not None:
                    out[f"{mp}.{n}" if mp else n] = p
            for n, b in m._buffers.items():
                if b is not None and n not in m._non_persistent:
                    out[f"{mp}.{n}" if mp else n] = b
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False, source=None):
        """Copy tensors into parameters/buffers by name. With strict=True, any missing key,
        unexpected key or shape mismatch raises one StateDictError listing all of them (its message
        names `source`, e.g. the checkpoint file, when given)."""
        own = self.state_dict()
        source = None if source is None else os.fspath(source)
        missing, unexpected = check_state_dict({k: tuple(v.shape) for k, v in own.items()}, state_dict, strict,
                                               source, type(self).__name__)
        # weights a linear reads (`_linear_weights`) are stored the way their backend reads them fastest, built
        # straight from the checkpoint's array (no second full-size copy on the way)
        linear = {id(p) for m in self.modules() for p in m._linear_weights()}
        with A.no_grad():
            for k, t in own.items():
                if k not in state_dict:
                    if id(t) in linear:
                        t._data = t.device.backend.weight_layout(t._data)
                    continue
                src = state_dict[k]
                if not isinstance(src, Tensor):
                    from ..tensor import tensor
                    src = tensor(src)
                src = src.to(t.device)
                cast = None if assign or src.dtype is t.dtype else t.dtype
                if id(t) in linear:
                    t._data = t.device.backend.weight_layout(src._data, cast)
                    continue
                t._data = (src.to(dtype=cast) if cast is not None else src)._data  # shared: never mutated in place
        for m in self.modules():
            if hasattr(m, "_after_load"):
                m._after_load()
        return missing, unexpected

    def _linear_weights(self):
        """This module's own parameters that F.linear reads as (out, in) weights (a tied embedding is one):
        load_state_dict stores them in their backend's weight_layout. Default: none."""
        return ()

    # ------------------------------------------------------------------ modes / devices
    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, flag=True):
        for p in self.parameters():
            p.requires_grad_(flag)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def to(self, *args, **kwargs):
        """Moves/casts parameters and buffers in place (floating-point ones only for dtypes)."""
        with A.no_grad():
            for m in self.modules():
                for reg in (m._parameters, m._buffers):
                    for n, t in reg.items():
                        if t is None:
                            continue
                        new = t.to(*args, **kwargs)
                        if not t.dtype.is_float and new.dtype is not t.dtype:
                            new = new.to(t.dtype)  # dtype casts apply to float tensors only (torch)
                        t._data, t.device = new._data, new.device
        return self

    def float(self):
        return self.to("float32")

    def half(self):
        return self.to("float16")

    def bfloat16(self):
        return self.to("bfloat16")

    def cpu(self):
        return self.to("cpu")

    def apply(self, fn):
        for m in self.modules():
            fn(m)
        return self

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for n, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({n}): {sub}")
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")
