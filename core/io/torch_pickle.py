"""PyTorch checkpoints (torch.save's zip format, .pt/.pth) read without torch and without running code.

Zip layout: <archive>/data.pkl (the pickled object), <archive>/data/<key> (raw storage bytes),
<archive>/byteorder. A tensor in data.pkl is a call to torch._utils._rebuild_tensor_v2 (or _v3) on a
persistent id ('storage', <storage class>, key, location, numel). Those rebuild functions, OrderedDict
and a few harmless builtins are implemented here on numpy; every other class stays an inert
PickleRecord (pickle_vm.py), and a pickle naming os/subprocess/eval/... is refused outright.

`load_pickle` returns the whole object tree (for checkpoints that pickle a model object, e.g.
Ultralytics); `load` flattens it to {name: Tensor} as torch's state_dict() names them.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..limits import Meter
from .formats import (
    FormatError,
    Stored,
    check_member_size,
    contiguous,
    describe,
    open_zip,
    source_size,
    to_tensor,
    zip_errors,
)
from .pickle_vm import Machine, PickleRecord, safe, safe_hashing

# Globals whose presence means the pickle wants to run code; any other unknown global is kept as a record.
_DENY = {"os", "posix", "nt", "sys", "subprocess", "builtins", "__builtin__", "importlib", "runpy", "shutil",
         "socket", "pickle", "_pickle", "marshal", "code", "codeop", "ctypes", "pty", "webbrowser", "commands",
         "pdb", "timeit", "eval", "exec", "torch.hub"}
_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
             "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool", "UntypedStorage": "uint8",
             "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128"}
_TORCH_ONLY_DTYPES = {"int16", "short", "uint16", "uint64", "complex32", "complex64", "complex128", "cfloat",
                      "cdouble", "chalf", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                      "float8_e8m0fnu", "qint8", "quint8", "qint32", "quint4x2"}


class _TorchDType:
    """torch.float16 or torch.HalfStorage as pickled: the element type (ember dtype, or None if ember lacks it)."""
    __slots__ = ("name", "ember")

    def __init__(self, name):
        self.name, self.ember = name, dtypes.BY_NAME.get(name)


class _Storage:
    __slots__ = ("key", "dtype", "raw")  # raw: the whole data/<key> entry as uint8

    def __init__(self, key, dtype, raw):
        self.key, self.dtype, self.raw = key, dtype, raw


def _is_ints(v, n=None):
    return (isinstance(v, (tuple, list)) and (n is None or len(v) == n) and len(v) <= 64
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v))


class _Checkpoint:
    """One zip checkpoint: finds data.pkl, serves storages, implements the rebuild functions."""

    def __init__(self, src, make_tensor):
        self.where, self.size, self.make_tensor = describe(src), source_size(src), make_tensor
        self.storages = {}
        self.meter = Meter(self.where, self.size)  # every tensor's bytes, against the file's budget
        self.zip = open_zip(src)
        try:
            pkls = [n for n in self.zip.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
            if len(pkls) != 1:
                raise FormatError(f"ember: {self.where}: expected one '<archive>/data.pkl' entry, "
                                  f"found {pkls or 'none'}")
            self.prefix = pkls[0][:-len("data.pkl")]
            order = self._read_entry(self.prefix + "byteorder", optional=True)  # absent in old files: little
            self.big_endian = order is not None and order.tobytes().strip() == b"big"
        except BaseException:
            self.zip.close()
            raise

    def _read_entry(self, name, optional=False) -> np.ndarray | None:
        """A zip entry as a uint8 array (one copy, sized from the checked entry size)."""
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            if optional:
                return None
            raise FormatError(f"ember: {self.where}: missing zip entry {name!r}") from None
        check_member_size(info, self.size, self.where)
        # the declared size counts before anything is inflated (a member listed under many names, or
        # storages no tensor uses, would otherwise decompress gigabytes before a tensor is charged)
        self.meter.take(info.file_size, f"zip entry {name!r}: uncompressed bytes; all entries and tensors so far")
        raw = np.empty(info.file_size, np.uint8)
        try:
            with self.zip.open(info) as f:
                got = f.readinto(memoryview(raw))
        except zip_errors() as e:
            raise FormatError(f"ember: {self.where}: damaged zip entry {name!r}: {e}") from None
        if got != info.file_size:  # (zipfile never inflates past the declared size; its CRC checks the bytes)
            raise FormatError(f"ember: {self.where}: zip entry {name!r} is truncated")
        return raw

    def run(self):
        data = self._read_entry(self.prefix + "data.pkl").tobytes()
        return Machine(data, self.resolve, self.persistent_load, self.where).run()

    # ---- what a pickled global may resolve to
    def resolve(self, module, name):
        if module.split(".")[0] in _DENY or module in _DENY:
            if module in ("builtins", "__builtin__") and name in _BUILTINS:
                return _BUILTINS[name]
            raise FormatError(f"ember: {self.where}: the pickle references {module}.{name}, which can run code; "
                              "refusing to load it (ember never imports or calls pickled globals)")
        if module in ("torch", "torch.storage", "torch.cuda"):
            if name in _STORAGES:
                return _TorchDType(_STORAGES[name])
            if name in dtypes.BY_NAME or name in _TORCH_ONLY_DTYPES:
                return _TorchDType(name)
            if name == "Size":
                return _torch_size
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
                                                 "_rebuild_parameter", "_rebuild_parameter_with_state"):
            return getattr(self, name)
        if module == "torch._tensor" and name == "_rebuild_from_type_v2":
            return _rebuild_from_type_v2
        if (module, name) == ("collections", "OrderedDict"):
            return _ordered_dict
        if (module, name) == ("_codecs", "encode"):
            return _codecs_encode
        return None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _TorchDType) and isinstance(pid[2], str)):
            raise FormatError(f"ember: {self.where}: unexpected persistent id {pid!r:.200}")
        key = pid[2]
        if key not in self.storages:
            self.storages[key] = _Storage(key, pid[1], self._read_entry(f"{self.prefix}data/{key}"))
        return self.storages[key]

    # ---- torch._utils rebuild functions (numpy versions)
    @safe
    def _rebuild_tensor(self, storage, offset, size, stride):
        return self._view(storage, storage.dtype if isinstance(storage, _Storage) else None, offset, size, stride)

    @safe
    def _rebuild_tensor_v2(self, storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
        return self._rebuild_tensor(storage, offset, size, stride)

    @safe
    def _rebuild_tensor_v3(self, storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
        return self._view(storage, dtype, offset, size, stride)

    @safe
    def _rebuild_parameter(self, data, requires_grad=True, hooks=None):
        return data

    @safe
    def _rebuild_parameter_with_state(self, data, requires_grad, hooks, state):
        return data

    def _view(self, storage, dtype, offset, size, stride):
        """storage[offset + sum(i_k * stride_k)] for every index i < size, as a C-contiguous array."""
        if not isinstance(storage, _Storage) or not isinstance(dtype, _TorchDType):
            raise FormatError(f"ember: {self.where}: tensor rebuilt from a {type(storage).__name__}, not a storage")
        where = f"{self.where}: storage {self.prefix}data/{storage.key}"
        d = dtype.ember
        if d is None:
            raise FormatError(f"ember: {where} holds a tensor of dtype torch.{dtype.name} (shape {tuple(size)}), "
                              f"which ember does not support")
        if not (isinstance(offset, int) and offset >= 0 and _is_ints(size) and _is_ints(stride, len(size))
                and all(n >= 0 for n in size) and all(s >= 0 for s in stride)):
            raise FormatError(f"ember: {where}: bad tensor geometry offset={offset!r} size={size!r} stride={stride!r}")
        if storage.raw.nbytes % d.itemsize:
            raise FormatError(f"ember: {where}: {storage.raw.nbytes} bytes is not a whole number of {d.name}")
        elems = storage.raw.view(d.np.newbyteorder(">" if self.big_endian else "<"))
        size = tuple(size)
        if 0 in size:
            return self.make_tensor(Stored(np.empty(size, d.np), d))
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= elems.size:
            raise FormatError(f"ember: {where}: tensor of size {size} stride {tuple(stride)} at offset {offset} "
                              f"reaches element {last}, past the storage's {elems.size}")
        nbytes = d.itemsize * int(np.prod(size, dtype=object))
        # overlapping strides (stride 0, or views of one storage) may materialise more than the file holds
        self.meter.take(nbytes, f"storage {self.prefix}data/{storage.key}: tensor of size {size} with "
                                f"stride {tuple(stride)} expands to {nbytes} bytes; all tensors so far")
        view = np.lib.stride_tricks.as_strided(elems[offset:], size, [s * d.itemsize for s in stride])
        out = contiguous(view, d.np)  # no copy for a contiguous little-endian view
        return self.make_tensor(Stored(out, d))


@safe
def _rebuild_from_type_v2(func, new_type, args, state):  # a tensor subclass (e.g. Parameter): keep the tensor
    # only a tensor rebuild function: a call made here is not one the machine sees (nor charges)
    if (not getattr(func, "_pickle_safe", False) or not getattr(func, "__name__", "").startswith("_rebuild_")
            or not isinstance(args, tuple)):
        raise FormatError(f"ember: _rebuild_from_type_v2 of {func!r:.100}")
    return func(*args)


@safe_hashing
def _ordered_dict(items=()):
    return dict(items)


@safe
def _torch_size(dims=()):
    return tuple(dims)


@safe
def _codecs_encode(text, encoding="utf-8"):  # how protocol 2 pickles bytes
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise FormatError(f"ember: unexpected _codecs.encode({type(text).__name__}, {encoding!r:.20})")
    return text.encode("latin1")


# harmless builtins a pickle may call (sets, slices); everything else in builtins is refused
_BUILTINS = {"set": safe_hashing(lambda items=(): set(items)),
             "frozenset": safe_hashing(lambda items=(): frozenset(items)),
             "slice": safe(lambda *a: slice(*a)), "complex": safe(lambda *a: complex(*a))}


# ---------------------------------------------------------------- public API

def load_pickle(src, numpy=False):
    """The checkpoint's whole object tree: dicts, lists, tuples, PickleRecords; tensors as ember Tensors
    (or as Stored numpy arrays with numpy=True). Raises FormatError on anything malformed or unsafe."""
    ck = _Checkpoint(src, (lambda s: s) if numpy else to_tensor)
    try:
        return ck.run()  # storages are read as the pickle names them, so the zip can close after
    finally:
        ck.zip.close()


def module_state_dict(module: PickleRecord, prefix="") -> dict:
    """A pickled torch nn.Module (a PickleRecord) -> {name: tensor} in torch's state_dict() order."""
    out, todo, seen = {}, [(prefix, module)], set()
    while todo:
        pre, m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        st = module_state(m)
        skip = st.get("_non_persistent_buffers_set")
        skip = skip if isinstance(skip, (set, frozenset)) else set()
        for name, t in _as_dict(st.get("_parameters")).items():
            if t is not None:
                out[f"{pre}{name}"] = t
        for name, t in _as_dict(st.get("_buffers")).items():
            if t is not None and name not in skip:
                out[f"{pre}{name}"] = t
        children = [(f"{pre}{name}.", c) for name, c in _as_dict(st.get("_modules")).items() if c is not None]
        todo.extend(reversed(children))  # depth first, in declaration order
    return out


def module_state(m) -> dict:
    st = m.state if isinstance(m, PickleRecord) else None
    if isinstance(st, tuple) and st and isinstance(st[0], dict):  # (__dict__, slots) form
        st = st[0]
    return st if isinstance(st, dict) else {}


def _as_dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def is_module(v) -> bool:
    st = module_state(v)
    return "_modules" in st or "_parameters" in st


def _is_tensor(v) -> bool:
    return isinstance(v, Stored) or hasattr(v, "_storage_numpy")


# where checkpoints commonly wrap their weights, in order of preference
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "ema")


def state_dict(tree, where="checkpoint") -> dict:
    """An object tree from load_pickle -> {name: tensor}: a state_dict as is (nested dicts joined with '.'),
    a pickled nn.Module by its parameters and buffers, a wrapper dict by its WRAPPER_KEYS entry."""
    seen = set()
    while isinstance(tree, dict) and id(tree) not in seen and not any(_is_tensor(v) for v in tree.values()):
        seen.add(id(tree))
        inner = [tree[k] for k in WRAPPER_KEYS if isinstance(tree.get(k), dict) or is_module(tree.get(k))]
        if not inner:
            break
        tree = inner[0]
    out = module_state_dict(tree) if is_module(tree) else _flatten(tree) if isinstance(tree, dict) else {}
    if not out:
        raise FormatError(f"ember: {where}: no tensors found (top level is a {type(tree).__name__}); "
                          "use ember.io.torch_pickle.load_pickle for the raw object")
    return out


def _flatten(tree) -> dict:
    out, todo, seen = {}, [("", tree)], set()
    while todo:
        pre, d = todo.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        children = []
        for k, v in d.items():
            name = f"{pre}{k}"
            if _is_tensor(v):
                out[name] = v
            elif isinstance(v, dict):
                children.append((name + ".", v))
            elif is_module(v):
                out.update(module_state_dict(v, name + "."))
        todo.extend(reversed(children))
    return out


def read(src) -> dict:
    """{name: Stored}, flattened as state_dict() does."""
    return state_dict(load_pickle(src, numpy=True), describe(src))


def load(src) -> dict:
    return {k: to_tensor(v) for k, v in read(src).items()}


def metadata(src) -> dict:
    """A checkpoint dict's top-level plain entries (str/int/float/bool), e.g. epoch, version, date."""
    tree = load_pickle(src, numpy=True)
    if not isinstance(tree, dict):
        return {}
    return {k: v for k, v in tree.items() if isinstance(k, str) and isinstance(v, (str, int, float, bool))}
