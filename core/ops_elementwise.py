"""Elementwise ops: dtype promotion and scalars around the unary/binary/where/cast primitives."""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import autograd as A
from .autograd import TensorBase  # (isinstance checks: tensor.Tensor subclasses it)
from . import dtypes as D
from .ops_movement import broadcast_shapes

# Host fast paths: a float numpy array (the CPU backend's) and no gradient recorded go straight to the ufunc the
# backend would call (the checks, promotions and dispatch layers below cost more than the op on small tensors)
_ND = np.ndarray
_HOST_FLOAT = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))
_HOST_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "maximum": np.maximum,
                "minimum": np.minimum, "pow": np.power, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
                "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
_HOST_UNARY = {"exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "sqrt": np.sqrt, "tanh": np.tanh}
_GRAD = A._GRAD


def _as_tensor(v, like):
    if isinstance(v, TensorBase):
        return v
    from .tensor import tensor
    return tensor(v, device=like.device)


def _check_device(a, b):
    if a.device != b.device:
        raise ValueError(f"ember: expected all tensors on the same device, got {a.device} and {b.device}")


def _host_op(op, f, reverse):
    """binary(op, a, b, reverse) with the host fast path inline: float numpy arrays of one dtype (the CPU backend's)
    recording no gradient go straight to the ufunc the backend would call, broadcasting as it does; anything else
    (and a broadcast numpy refuses, for ember's error) takes the general path. The Tensor operators are these."""
    def fast(a, b, reverse=reverse):
        ad = a._data
        if ad.__class__ is _ND and ad.ndim and ad.dtype in _HOST_FLOAT and not (_GRAD[0] and a.requires_grad):
            bc = b.__class__
            if bc is float or bc is int:  # (a float tensor keeps its dtype with a Python scalar, as torch)
                return a._new(f(b, ad) if reverse else f(ad, b))
            if isinstance(b, TensorBase):
                bd = b._data
                if bd.__class__ is _ND and bd.dtype is ad.dtype and b.device is a.device \
                        and not (_GRAD[0] and b.requires_grad):
                    if bd.shape == ad.shape:
                        return a._new(f(bd, ad) if reverse else f(ad, bd))
                    try:
                        return a._new(f(bd, ad) if reverse else f(ad, bd))
                    except ValueError:
                        pass  # shapes that do not broadcast: the general path names them
        return _binary(op, a, b, reverse)
    fast.__name__ = op
    return fast


def binary(op, a, b, reverse=False):
    """a: Tensor; b: Tensor, Python scalar or array-like. Promotes dtypes as torch."""
    fast = _FAST.get(op)
    return fast(a, b, reverse) if fast is not None else _binary(op, a, b, reverse)


def _binary(op, a, b, reverse):
    bc = b.__class__
    if isinstance(b, TensorBase):
        if a.device is not b.device and a.device != b.device:
            _check_device(a, b)
        ad, bd = a._data, b._data
        if ad.__class__ is _ND and bd.__class__ is _ND and ad.dtype is bd.dtype and ad.dtype in _HOST_FLOAT:
            if ad.shape != bd.shape:  # host floats of one dtype (recording a gradient): nothing to promote
                broadcast_shapes(ad.shape, bd.shape)
            return A.prim_binary(op, b, a) if reverse else A.prim_binary(op, a, b)
        da, db = a.dtype, b.dtype
        if da is not db:
            # a 0-d tensor does not promote a dimensioned one within the same category (torch)
            if b.ndim == 0 and a.ndim and (da.is_float or not db.is_float) and not (da is D.bool_ and db is not D.bool_):
                dt = da
            elif a.ndim == 0 and b.ndim and (db.is_float or not da.is_float) and not (db is D.bool_ and da is not D.bool_):
                dt = db
            else:
                dt = D.promote(da, db)
            a, b = A.prim_cast(a, dt), A.prim_cast(b, dt)
        if a.shape != b.shape:
            _check_broadcast(a, b)
    elif bc is float or bc is int or bc is bool or isinstance(b, numbers.Number):
        dt = a.dtype
        if bc is bool:
            b = int(b) if dt is not D.bool_ else b
        elif bc is not float and bc is not int:  # numpy scalars -> Python scalars (weak typing)
            b = b.item() if hasattr(b, "item") else b
            bc = b.__class__
        if bc is float and not dt.is_float:
            a = A.prim_cast(a, D.float32)
        elif bc is int and dt is D.bool_ and op not in ("and", "or", "xor", "eq", "ne"):
            a = A.prim_cast(a, D.int64)
        if reverse:
            b = a.new_full((), b)
    else:
        return _binary(op, a, _as_tensor(b, a), reverse)
    if reverse:
        a, b = b, a
    if op in _INT_DIVISION and not a.dtype.is_float:
        _check_divisor(op, a, b)
    return A.prim_binary(op, a, b)


_INT_DIVISION = ("floordiv", "fmod")
_FAST = {op: _host_op(op, f, False) for op, f in _HOST_BINARY.items()}
radd, rsub = _FAST["add"], _host_op("sub", np.subtract, True)


def binary_fn(op):
    """f(a, b) = binary(op, a, b), as one function (a Tensor method)."""
    return _FAST[op]


def _check_divisor(op, a, b):
    """Integer division by zero has no value (numpy returns 0 with a warning): torch raises, so does ember.
    Checking a tensor divisor reads one bool back from the device."""
    scalar = isinstance(b, (int, bool))
    if (b == 0) if scalar else bool((b == 0).any().item()):
        divisor = "0" if scalar else f"a {b.dtype.name} tensor of shape {tuple(b.shape)} holding 0"
        raise ZeroDivisionError(f"ember: integer division by zero ({op}): a {a.dtype.name} tensor of shape "
                                f"{tuple(a.shape)} divided by {divisor}")


def _check_broadcast(a, b):
    broadcast_shapes(a.shape, b.shape)


def add(a, b, alpha=1):
    return binary("add", a, b if alpha == 1 else b * alpha)


def sub(a, b, alpha=1):
    return binary("sub", a, b if alpha == 1 else b * alpha)


def mul(a, b):
    return binary("mul", a, b)


def div(a, b, rounding_mode=None):
    if rounding_mode is None:
        if not a.dtype.is_float and not (isinstance(b, TensorBase) and b.dtype.is_float) and not isinstance(b, float):
            a = A.prim_cast(a, D.float32)
        return binary("div", a, b)
    if rounding_mode == "floor":
        return binary("floordiv", a, b)
    if rounding_mode == "trunc":
        if not a.dtype.is_float and not isinstance(b, float) and not (isinstance(b, TensorBase) and b.dtype.is_float):
            _check_divisor("floordiv", a, b)
        q = div(a, b)
        return trunc(q) if a.dtype.is_float else A.prim_cast(trunc(q), a.dtype)
    raise ValueError(f"ember: unknown rounding_mode {rounding_mode!r}")


def rdiv(a, b):
    if not a.dtype.is_float:
        a = A.prim_cast(a, D.float32)
    return binary("div", a, b, reverse=True)


def pow(a, b):
    if isinstance(a, numbers.Number):  # torch.pow(2, t)
        return binary("pow", b, a, reverse=True)
    if isinstance(b, numbers.Number):
        if b == 2 and a.dtype.is_float:
            return A.prim_binary("mul", a, a)
        if b == 1:
            return a
        if b == 0.5 and a.dtype.is_float:
            return A.prim_unary("sqrt", a)
    return binary("pow", a, b)


def remainder(a, b):
    """Python-style modulo (sign of the divisor), as torch.remainder."""
    return a - binary("floordiv", a, b) * b


def _named_binary(op):
    def f(a, b):
        return binary(op, a, b)
    f.__name__ = op
    return f


fmod, maximum, minimum = _named_binary("fmod"), _named_binary("maximum"), _named_binary("minimum")
eq, ne, lt, le, gt, ge = (_named_binary(op) for op in ("eq", "ne", "lt", "le", "gt", "ge"))


def _logical(op):
    def f(a, b):
        return binary(op, A.prim_cast(a, D.bool_), A.prim_cast(_as_tensor(b, a), D.bool_))
    f.__name__ = f"logical_{op}"
    return f


logical_and, logical_or, logical_xor = _logical("and"), _logical("or"), _logical("xor")


def logical_not(a):
    return A.prim_unary("not", A.prim_cast(a, D.bool_))


def _bool_only(fn, what):
    def f(a, *b):
        if a.dtype is not D.bool_:
            raise TypeError(f"ember: {what} is supported on bool tensors only, got {a.dtype}")
        return fn(a, *b)
    return f


bitwise_and = _bool_only(logical_and, "bitwise and (&)")
bitwise_or = _bool_only(logical_or, "bitwise or (|)")
bitwise_xor = _bool_only(logical_xor, "bitwise xor (^)")
invert = _bool_only(logical_not, "~")


def _unary(op, float_only=True):
    host = _HOST_UNARY.get(op)

    def f(x):
        d = x._data
        if d.__class__ is _ND and d.ndim and d.dtype in _HOST_FLOAT and not (_GRAD[0] and x.requires_grad):
            return x._new(host(d) if host is not None else x.device._backend.unary(op, d))
        if float_only and not x.dtype.is_float:
            x = A.prim_cast(x, D.float32)
        return A.prim_unary(op, x)
    f.__name__ = op
    return f


exp = _unary("exp")
log = _unary("log")
sin = _unary("sin")
cos = _unary("cos")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
erf = _unary("erf")
sigmoid = _unary("sigmoid")
reciprocal = _unary("recip")
abs = _unary("abs", False)
sign = _unary("sign", False)
neg = _unary("neg", False)


def floor(x):
    return A.prim_unary("floor", x) if x.dtype.is_float else x


def ceil(x):
    return A.prim_unary("ceil", x) if x.dtype.is_float else x


def round(x, decimals=0):
    if not x.dtype.is_float:
        return x
    if decimals:
        s = 10.0 ** decimals
        return A.prim_unary("round", x * s) / s
    return A.prim_unary("round", x)


def trunc(x):
    if not x.dtype.is_float:
        return x
    return A.prim_where(x >= 0, A.prim_unary("floor", x), A.prim_unary("ceil", x))


def frac(x):
    return x - trunc(x)


def log2(x):
    return log(x) * (1 / math.log(2))


def log10(x):
    return log(x) * (1 / math.log(10))


def log1p(x):
    return log(x + 1)


def expm1(x):
    return exp(x) - 1


def exp2(x):
    return exp(x * math.log(2))


def square(x):
    return x * x


def tan(x):
    return sin(x) / cos(x)


def sinh(x):
    return (exp(x) - exp(-x)) * 0.5


def cosh(x):
    return (exp(x) + exp(-x)) * 0.5


def clip(x, min=None, max=None):
    return clamp(x, min, max)


def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise ValueError("ember: clamp needs at least one of min and max")
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


def where(cond, a, b):
    """torch.where(cond, a, b): a and b are tensors or scalars; promotes like a binary op."""
    if not isinstance(cond, TensorBase):
        raise TypeError("ember: where() condition must be a tensor")
    like = a if isinstance(a, TensorBase) else b if isinstance(b, TensorBase) else cond
    if not isinstance(a, TensorBase) or not isinstance(b, TensorBase):
        if isinstance(a, TensorBase):
            dt = D.promote_scalar(a.dtype, b)
        elif isinstance(b, TensorBase):
            dt = D.promote_scalar(b.dtype, a)
        else:
            dt = D.promote(D.scalar_dtype(a), D.scalar_dtype(b))
        a = A.prim_cast(a, dt) if isinstance(a, TensorBase) else like.new_full((), a, dt)
        b = A.prim_cast(b, dt) if isinstance(b, TensorBase) else like.new_full((), b, dt)
    elif a.dtype is not b.dtype:
        dt = D.promote(a.dtype, b.dtype)
        a, b = A.prim_cast(a, dt), A.prim_cast(b, dt)
    _check_device(cond, a)
    _check_device(a, b)
    if cond.dtype is not D.bool_:
        cond = A.prim_cast(cond, D.bool_)
    return A.prim_where(cond, a, b)


def tensor_where(x, cond, other):
    """Tensor.where(cond, other) = where(cond, x, other)."""
    return where(cond, x, other)


def masked_fill(x, mask, value):
    if isinstance(value, TensorBase):
        value = value.to(x.dtype)
    elif isinstance(value, float) and not x.dtype.is_float:
        raise TypeError(f"ember: masked_fill with a float value on a {x.dtype} tensor")
    return where(mask, value, x) if isinstance(value, TensorBase) else where(mask, _scalar_like(value, x), x)


def _scalar_like(v, x):
    return x.new_full((), v)


def lerp(a, b, w):
    return a + (b - a) * w


def isnan(x):
    return x != x


def isinf(x):
    return abs(x) == float("inf") if x.dtype.is_float else x.zeros_like().bool()


def isfinite(x):
    return ~(isnan(x) | isinf(x)) if x.dtype.is_float else x.ones_like().bool()


def nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    if not x.dtype.is_float:
        return x
    x = where(isnan(x), nan, x)
    if posinf is not None:
        x = where(x == float("inf"), posinf, x)
    if neginf is not None:
        x = where(x == float("-inf"), neginf, x)
    return x


# ---------------------------------------------------------------- activations

def relu(x):
    return maximum(x, 0) if not x.requires_grad else x * (x > 0).to(x.dtype)


def relu6(x):
    return clamp(x, 0, 6)


def leaky_relu(x, negative_slope=0.01):
    return where(x > 0, x, x * negative_slope)


def elu(x, alpha=1.0):
    return where(x > 0, x, (exp(x) - 1) * alpha)


def gelu_composed(x, approximate):
    if approximate == "tanh":
        return x * 0.5 * (1 + tanh((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)))
    if approximate != "none":
        raise ValueError(f"ember: gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * 0.5 * (1 + erf(x * (1 / math.sqrt(2))))


def gelu(x, approximate="none"):
    """GELU, exact (erf) or tanh-approximated; the device's kernel (ember.kernels) when no gradient is recorded."""
    k = A.fused_kernel("gelu", x) if x.dtype.is_floating_point and approximate in ("none", "tanh") else None
    return A.prim_fused(k, x, approximate) if k is not None else gelu_composed(x, approximate)


def silu(x):
    """x * sigmoid(x); the device's kernel (ember.kernels) when no gradient is recorded."""
    k = A.fused_kernel("silu", x) if x.dtype.is_floating_point else None
    return A.prim_fused(k, x) if k is not None else silu_composed(x)


def silu_composed(x):
    return x * sigmoid(x)


def mish(x):
    return x * tanh(softplus(x))


def hardsigmoid(x):
    return clamp(x / 6 + 0.5, 0, 1)


def hardswish(x):
    return x * hardsigmoid(x)


def softplus(x, beta=1.0, threshold=20.0):
    bx = x * beta if beta != 1 else x
    # log(1 + e^bx) = max(bx, 0) + log(1 + e^-|bx|), stable for large |bx|; linear past threshold
    soft = (maximum(bx, 0) + log(exp(-abs(bx)) + 1)) / beta
    return where(bx > threshold, x, soft)


def logsigmoid(x):
    return -softplus(-x)
