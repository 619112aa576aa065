"""ember.Tensor: a backend array handle plus device, with PyTorch's names and semantics.

This file holds the class with every method and operator, and the creation functions. The
methods are thin: they call the composed ops of ops_elementwise.py, ops_movement.py,
ops_reduce.py, ops_indexing.py and linalg.py, which bottom out in the primitives of autograd.py.
Those modules sit below this one: they never import it at module level (they test
`isinstance(v, autograd.TensorBase)` and make outputs with `x._new(array)`).
"""
from __future__ import annotations

import numbers

import numpy as np

from . import autograd as A
from . import dtypes as D
from . import linalg as L
from . import ops_elementwise as E
from . import ops_indexing as I
from . import ops_movement as M
from . import ops_reduce as R
from .device import CPU, device as _device

_new_object = object.__new__


class Tensor(A.TensorBase):
    __slots__ = ()  # (the fields are TensorBase's)
    __array_priority__ = 1000  # numpy scalars/arrays defer to our reflected operators

    def __init__(self, data, dtype=None, device=None, requires_grad=False):
        t = tensor(data, dtype=dtype, device=device)
        self._data, self.device, self.grad, self._ctx = t._data, t.device, None, None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    # ------------------------------------------------------------------ internals
    def _new(self, data):
        """A new plain Tensor (even for a Parameter) on self's device holding backend array `data`."""
        t = _new_object(Tensor)
        t._data, t.device, t.requires_grad, t.grad, t._ctx = data, self.device, False, None, None
        return t

    @staticmethod
    def _from_storage(a, dtype, device=None):
        """numpy storage array (dtype.np; bfloat16 as uint16 bits) -> Tensor, no value change."""
        dtype = D.get(dtype)
        dev = _device(device) if device is not None else CPU
        a = np.asarray(a)
        if a.dtype != dtype.np:
            raise TypeError(f"ember: storage array of dtype {a.dtype} does not match {dtype} (expects {dtype.np})")
        return _wrap(dev.backend.from_numpy(a, dtype), dev)

    def _storage_numpy(self):
        """numpy storage array (bfloat16 as uint16 bits); a copy for non-CPU devices."""
        if self.device is CPU:
            return np.asarray(self._data)
        return self.device.backend.to_numpy(self._data)

    # ------------------------------------------------------------------ properties
    @property
    def shape(self):
        return self.device.backend.shape(self._data) if self.device is not CPU else self._data.shape

    @property
    def dtype(self):
        return self.device.backend.dtype_of(self._data) if self.device is not CPU else D.FROM_NP[self._data.dtype]

    @property
    def ndim(self):
        return self._data.ndim if self.device is CPU else len(self.device.backend.shape(self._data))

    def dim(self):
        return self._data.ndim if self.device is CPU else len(self.device.backend.shape(self._data))

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def element_size(self):
        return self.dtype.itemsize

    @property
    def is_leaf(self):
        return self._ctx is None

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self):
        return self.transpose(-1, -2)

    def is_floating_point(self):
        return self.dtype.is_float

    def __len__(self):
        if not self.shape:
            raise TypeError("ember: len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        vals = np.array2string(self.numpy(), separator=", ", precision=4, threshold=200)
        extra = "" if self.dtype in (D.float32, D.int64, D.bool_) else f", dtype={self.dtype}"
        if self.device is not CPU:
            extra += f", device='{self.device}'"
        if self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({vals}{extra})"

    def __hash__(self):
        return id(self)

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"ember: truth value of a tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ------------------------------------------------------------------ conversion
    def numpy(self):
        """numpy array of the values; bfloat16 comes back as float32 (numpy has no bfloat16)."""
        a = self._storage_numpy()
        return D.bf16_bits_to_f32(a) if a.dtype == np.uint16 else a

    async def numpy_async(self):
        """Awaitable readback for backends whose reads are asynchronous (WebGPU in a page without JSPI)."""
        a = await self.device.backend.to_numpy_async(self._data)
        return D.bf16_bits_to_f32(a) if a.dtype == np.uint16 else a

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"ember: item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_float or self.numel() != 1:
            raise TypeError("ember: only integer tensors of one element can be used as an index")
        return int(self.item())

    def to(self, *args, dtype=None, device=None, copy=False):
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, (D.DType, type)) or (isinstance(a, str) and a.replace("torch.", "") in D.BY_NAME):
                dtype = a
            else:
                device = a
        t = self
        if device is not None:
            dev = _device(device)
            if dev != t.device:
                t = A.prim_to_device(t, dev)
        if dtype is not None:
            t = A.prim_cast(t, D.get(dtype))
        if copy and t is self:
            t = A.prim_contiguous(A.prim_binary("add", t, 0) if t.dtype is not D.bool_ else t)
        return t

    def cpu(self):
        return self.to("cpu")

    def cuda(self, index=0):
        return self.to(f"cuda:{index}" if index else "cuda")

    def type(self, dtype=None):
        return self.dtype.name if dtype is None else self.to(dtype)

    def float(self):
        return self.to(D.float32)

    def half(self):
        return self.to(D.float16)

    def bfloat16(self):
        return self.to(D.bfloat16)

    def double(self):
        return self.to(D.float64)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def bool(self):
        return self.to(D.bool_)

    # ------------------------------------------------------------------ autograd
    def requires_grad_(self, flag=True):
        if flag and not self.dtype.is_float:
            raise RuntimeError(f"ember: only floating-point tensors can require gradients, got {self.dtype}")
        self.requires_grad = flag
        return self

    def backward(self, gradient=None):
        A.backward(self, gradient)

    def detach(self):
        return self._new(self._data)

    def detach_(self):
        self._ctx, self.requires_grad = None, False
        return self

    def clone(self):
        out = A.prim_contiguous(self)
        if self.device is CPU:  # CPU arrays may share memory with a user's numpy array
            out._data = np.array(self._data, copy=True)
        return out

    def contiguous(self):
        return A.prim_contiguous(self)

    def zero_(self):
        self._data = self.device.backend.full(self.shape, 0, self.dtype)
        return self

    def fill_(self, v):
        self._data = self.device.backend.full(self.shape, v, self.dtype)
        return self

    def copy_(self, src):
        src = src if isinstance(src, Tensor) else tensor(src)
        src = src.to(self.device, self.dtype).expand(self.shape)
        self._data = self.device.backend.contiguous(src._data) if self.device is not CPU else np.array(src._data, copy=True)
        return self

    # ------------------------------------------------------------------ creation helpers
    def new_zeros(self, shape, dtype=None):
        return full(shape, 0, dtype=dtype or self.dtype, device=self.device)

    def new_ones(self, shape, dtype=None):
        return full(shape, 1, dtype=dtype or self.dtype, device=self.device)

    def new_full(self, shape, value, dtype=None):
        return full(shape, value, dtype=dtype or self.dtype, device=self.device)

    def new_tensor(self, data, dtype=None):
        return tensor(data, dtype=dtype or self.dtype, device=self.device)

    def zeros_like(self):
        return full(self.shape, 0, dtype=self.dtype, device=self.device)

    def ones_like(self):
        return full(self.shape, 1, dtype=self.dtype, device=self.device)


    # ------------------------------------------------------------------ arithmetic operators
    # (the ops' own functions, their host fast path inline: one Python call per operator)
    __add__, __radd__, __sub__, __rsub__ = E.binary_fn("add"), E.radd, E.binary_fn("sub"), E.rsub
    __mul__ = __rmul__ = E.binary_fn("mul")

    def __floordiv__(self, other):
        return E.binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return E.binary("floordiv", self, other, reverse=True)

    def __rpow__(self, other):
        a = A.prim_cast(self, D.float32) if not self.dtype.is_float and isinstance(other, float) else self
        return E.binary("pow", a, other, reverse=True)

    def __pos__(self):
        return self

    def __matmul__(self, other):
        return L.matmul(self, other if isinstance(other, Tensor) else E._as_tensor(other, self))

    def __rmatmul__(self, other):
        return L.matmul(E._as_tensor(other, self), self)

    def add(self, other, alpha=1):
        return E.add(self, other, alpha)

    def sub(self, other, alpha=1):
        return E.sub(self, other, alpha)

    mul = __mul__

    __truediv__ = div = E.div
    __rtruediv__ = E.rdiv
    __mod__ = remainder = E.remainder
    __pow__ = pow = E.pow
    __neg__ = neg = negative = E.neg
    __abs__ = abs = E.abs
    matmul = __matmul__

    # ------------------------------------------------------------------ comparisons and logic
    __eq__ = eq = E.eq
    __ne__ = ne = E.ne
    __lt__ = lt = E.lt
    __le__ = le = E.le
    __gt__ = gt = E.gt
    __ge__ = ge = E.ge
    __and__ = __rand__ = bitwise_and = E.bitwise_and
    __or__ = __ror__ = bitwise_or = E.bitwise_or
    __xor__ = __rxor__ = bitwise_xor = E.bitwise_xor
    __invert__ = bitwise_not = E.invert
    logical_and, logical_or, logical_xor, logical_not = E.logical_and, E.logical_or, E.logical_xor, E.logical_not

    # ------------------------------------------------------------------ in-place (rebinds the data: backend buffers never mutate)
    def _arith_(self, op, other):
        if self.requires_grad and self._ctx is None and A._GRAD[0]:
            raise RuntimeError("ember: in-place operation on a leaf tensor that requires grad")
        cur = A.snapshot(self)
        out = E.div(cur, other) if op == "div" else E.binary(op, cur, other)
        return A.rebind(self, A.prim_cast(_same_shape(self, out, f"{op}_"), self.dtype))

    def add_(self, other, alpha=1):
        return self._arith_("add", other if alpha == 1 else other * alpha)

    def sub_(self, other, alpha=1):
        return self._arith_("sub", other if alpha == 1 else other * alpha)

    def mul_(self, other, alpha=1):
        return self._arith_("mul", other if alpha == 1 else other * alpha)

    def div_(self, other, alpha=1):
        return self._arith_("div", other)

    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_

    def clamp_(self, min=None, max=None):
        return A.rebind(self, E.clamp(A.snapshot(self), min, max))  # (elementwise: the shape is kept)

    def masked_fill_(self, mask, value):
        return A.rebind(self, _same_shape(self, E.masked_fill(A.snapshot(self), mask, value), "masked_fill_"))

    # ------------------------------------------------------------------ elementwise functions (ops_elementwise.py)
    exp, log, log2, log10, log1p, expm1, exp2 = E.exp, E.log, E.log2, E.log10, E.log1p, E.expm1, E.exp2
    sin, cos, tan, sinh, cosh, tanh = E.sin, E.cos, E.tan, E.sinh, E.cosh, E.tanh
    sqrt, rsqrt, square, reciprocal, erf, sign = E.sqrt, E.rsqrt, E.square, E.reciprocal, E.erf, E.sign
    floor, ceil, round, trunc, frac = E.floor, E.ceil, E.round, E.trunc, E.frac
    fmod, maximum, minimum, lerp = E.fmod, E.maximum, E.minimum, E.lerp
    clamp = clip = E.clamp
    masked_fill, where = E.masked_fill, E.tensor_where
    isnan, isinf, isfinite, nan_to_num = E.isnan, E.isinf, E.isfinite, E.nan_to_num
    relu, sigmoid, softplus = E.relu, E.sigmoid, E.softplus

    # ------------------------------------------------------------------ movement (ops_movement.py)
    reshape = view = M.reshape
    flatten, unflatten, permute, t = M.flatten, M.unflatten, M.permute, M.t
    transpose = swapaxes = swapdims = M.transpose
    unsqueeze, squeeze, movedim = M.unsqueeze, M.squeeze, M.movedim
    expand, expand_as, broadcast_to = M.expand, M.expand_as, M.broadcast_to
    narrow, chunk, split, unbind, unfold = M.narrow, M.chunk, M.split, M.unbind, M.unfold
    flip, roll, repeat, repeat_interleave = M.flip, M.roll, M.repeat, M.repeat_interleave
    tril, triu = M.tril, M.triu

    def view_as(self, other):
        return M.reshape(self, *other.shape)

    reshape_as = view_as

    # ------------------------------------------------------------------ reductions (ops_reduce.py)
    sum, prod, mean, var, std = R.sum, R.prod, R.mean, R.var, R.std
    amax, amin, max, min, argmax, argmin = R.amax, R.amin, R.max, R.min, R.argmax, R.argmin
    all, any, count_nonzero, cumsum = R.all, R.any, R.count_nonzero, R.cumsum
    logsumexp, norm, softmax, log_softmax = R.logsumexp, R.norm, R.softmax, R.log_softmax
    argsort, sort, topk = R.argsort, R.sort, R.topk

    # ------------------------------------------------------------------ indexing (ops_indexing.py)
    __getitem__, __setitem__ = I.getitem, I.setitem
    index_select, gather, take_along_dim = I.index_select, I.gather, I.take_along_dim
    scatter, scatter_add, index_add, index_fill = I.scatter, I.scatter_add, I.index_add, I.index_fill
    nonzero, masked_select = I.nonzero, I.masked_select


def _same_shape(t, out, op):
    """An in-place op cannot grow its tensor: x(1,3).add_(y(2,3)) broadcasts to (2,3), which torch refuses."""
    if out.shape != t.shape:
        raise RuntimeError(f"ember: {op}: the result has shape {tuple(out.shape)} (broadcast with the other "
                           f"operand), but the tensor updated in place has shape {tuple(t.shape)}")
    return out


def _wrap(data, device) -> Tensor:
    """A new Tensor holding backend array `data` on `device` (the creation functions below)."""
    t = _new_object(Tensor)
    t._data, t.device, t.requires_grad, t.grad, t._ctx = data, device, False, None, None
    return t


# ====================================================================== creation

def _infer_dtype(a: np.ndarray):
    k = a.dtype.kind
    if k == "b":
        return D.bool_
    if k in "iu":
        return D.FROM_NP.get(a.dtype, D.int64) if a.dtype != np.uint16 else D.int32
    if k == "f":
        return D.FROM_NP[a.dtype] if a.dtype in (np.float16, np.float32, np.float64) else D.float32
    raise TypeError(f"ember: cannot make a tensor from numpy dtype {a.dtype}")


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """ember.tensor(data): like torch.tensor. Python floats become float32, ints int64."""
    if isinstance(data, Tensor):
        t = data.detach().to(device=device, dtype=dtype) if (device or dtype) else data.detach().clone()
    else:
        if isinstance(data, np.ndarray):
            a = data
            dt = D.get(dtype) if dtype is not None else _infer_dtype(a)
        else:
            a = np.asarray(data)
            if dtype is not None:
                dt = D.get(dtype)
            elif a.dtype.kind == "f":
                dt = D.float32  # torch's default dtype for Python floats
            elif a.dtype.kind in "iu":
                dt = D.int64
            elif a.dtype.kind == "b":
                dt = D.bool_
            elif a.dtype == object and a.size and all(isinstance(x, Tensor) for x in a.flat):
                return M.stack([tensor(x) for x in data]).to(device=device, dtype=dtype)
            else:
                raise TypeError(f"ember: cannot make a tensor from {type(data).__name__} with numpy dtype {a.dtype}")
        if dt is D.bfloat16:
            st = D.f32_to_bf16_bits(np.asarray(a, np.float32)) if a.dtype != np.uint16 else a
        elif dt.is_float or a.dtype.kind != "f":
            st = np.array(a, dtype=dt.np, copy=True)
        else:
            st = np.trunc(a).astype(dt.np)
        dev = _device(device) if device is not None else CPU
        t = _wrap(dev.backend.from_numpy(st if st.flags.c_contiguous else st.copy(), dt), dev)  # (0-d stays 0-d)
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(a: np.ndarray) -> Tensor:
    """Shares memory on CPU (as torch.from_numpy); float64 stays float64. The caller may write `a` in place: the
    CPU backend then keeps no copy derived from it (a weight's blocked or column-major copy)."""
    from .backends.cpu_matmul import share
    a = np.asarray(a)
    data = CPU.backend.from_numpy(a, _infer_dtype(a))
    if isinstance(data, np.ndarray) and np.may_share_memory(data, a):
        share(data)
    return _wrap(data, CPU)


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, numbers.Integral) or s < 0:
            raise ValueError(f"ember: invalid shape {tuple(size)}")
    return tuple(int(s) for s in size)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    size = _shape((size,) if isinstance(size, numbers.Integral) else (size,))
    if dtype is None:
        dtype = D.scalar_dtype(fill_value)
    dt = D.get(dtype)
    dev = _device(device) if device is not None else CPU
    t = _wrap(dev.backend.full(size, fill_value, dt), dev)
    return t.requires_grad_(True) if requires_grad else t


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(_shape(size), 0, dtype or D.float32, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(_shape(size), 1, dtype or D.float32, device, requires_grad)


def empty(*size, dtype=None, device=None):
    """Uninitialised on the CPU (np.empty: pages a loaded checkpoint replaces are never touched), zeros elsewhere."""
    dev = _device(device) if device is not None else CPU
    if dev is CPU:
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        dt = D.get(dtype) if dtype is not None else D.float32
        try:
            return _wrap(np.empty(tuple(int(s) for s in shape), dt.np), dev)
        except (TypeError, ValueError):
            pass  # (zeros names the bad size)
    return zeros(*size, dtype=dtype, device=device)


def zeros_like(t, dtype=None, device=None):
    return full(t.shape, 0, dtype or t.dtype, device or t.device)


def ones_like(t, dtype=None, device=None):
    return full(t.shape, 1, dtype or t.dtype, device or t.device)


def full_like(t, v, dtype=None, device=None):
    return full(t.shape, v, dtype or t.dtype, device or t.device)


def empty_like(t, dtype=None, device=None):
    return zeros_like(t, dtype, device)


def arange(start, end=None, step=1, dtype=None, device=None) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = D.float32 if any(isinstance(v, float) for v in (start, end, step)) else D.int64
    if step == 0:
        raise ValueError("ember: arange step must be non-zero")
    dev = _device(device) if device is not None else CPU
    return _wrap(dev.backend.arange(start, end, step, D.get(dtype)), dev)


def linspace(start, end, steps, dtype=None, device=None) -> Tensor:
    a = np.linspace(start, end, steps, dtype=np.float64)
    return tensor(a, dtype=dtype or D.float32, device=device)


def eye(n, m=None, dtype=None, device=None) -> Tensor:
    return tensor(np.eye(n, m), dtype=dtype or D.float32, device=device)


# ---------------------------------------------------------------------- random
# One host generator: the same seed gives the same numbers on every device. Made on first use: numpy.random's
# nine extension modules then load only when something draws (the web page's boot compiles none of them).
_rng = [None]


def default_generator() -> np.random.Generator:
    """The generator ember's random ops draw from (manual_seed replaces it): nn.init's initialisers use it too."""
    if _rng[0] is None:
        _rng[0] = np.random.default_rng(0)
    return _rng[0]


def manual_seed(seed: int):
    _rng[0] = np.random.default_rng(seed)


def rand(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    a = default_generator().random(_shape(size), dtype=np.float32)
    return tensor(a, dtype=dtype or D.float32, device=device, requires_grad=requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    a = default_generator().standard_normal(_shape(size), dtype=np.float32)
    return tensor(a, dtype=dtype or D.float32, device=device, requires_grad=requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    return tensor(default_generator().integers(low, high, size=_shape((size,) if isinstance(size, int) else (size,))),
                  dtype=dtype or D.int64, device=device)


def randperm(n, device=None) -> Tensor:
    return tensor(default_generator().permutation(n), dtype=D.int64, device=device)


def rand_like(t, dtype=None):
    return rand(*t.shape, dtype=dtype or t.dtype, device=t.device)


def randn_like(t, dtype=None):
    return randn(*t.shape, dtype=dtype or t.dtype, device=t.device)


def multinomial(probs, num_samples=1):
    """Samples indices from (rows of) probs on the host, as a sampling helper for generation."""
    p = probs.float().numpy().astype(np.float64)
    squeeze = p.ndim == 1
    p = p.reshape(-1, p.shape[-1])
    p = p / p.sum(-1, keepdims=True)
    out = np.stack([default_generator().choice(p.shape[-1], size=num_samples, p=row) for row in p])
    return tensor(out[0] if squeeze else out, dtype=D.int64, device=probs.device)

