"""Binds the composed ops onto Tensor as methods and operators (torch's method names)."""
from __future__ import annotations

from . import autograd as A
from . import dtypes as D
from . import ops_elementwise as E
from . import ops_indexing as I
from . import ops_movement as M
from . import ops_reduce as R
from .linalg import matmul
from .tensor import Tensor

E._Tensor = I._Tensor = Tensor


def _matmul(a, b):
    if not isinstance(b, Tensor):
        b = E._as_tensor(b, a)
    return matmul(a, b)


def _rpow(a, b):
    if not a.dtype.is_float and isinstance(b, float):
        a = A.prim_cast(a, D.float32)
    return E.binary("pow", a, b, reverse=True)


def _binop(op):
    def f(a, b):
        return E.binary(op, a, b)
    return f


def _rbinop(op):
    def f(a, b):
        return E.binary(op, a, b, reverse=True)
    return f


def _bind():
    T = Tensor
    # operators
    T.__add__ = T.add = _binop("add")
    T.__radd__ = _binop("add")
    T.__sub__ = T.sub = _binop("sub")
    T.__rsub__ = _rbinop("sub")
    T.__mul__ = T.mul = _binop("mul")
    T.__rmul__ = _binop("mul")
    T.__truediv__ = T.div = E.div
    T.__rtruediv__ = E.rdiv
    T.__floordiv__ = lambda a, b: E.binary("floordiv", a, b)
    T.__rfloordiv__ = lambda a, b: E.binary("floordiv", a, b, reverse=True)
    T.__mod__ = T.remainder = E.remainder
    T.__pow__ = T.pow = E.pow
    T.__rpow__ = _rpow
    T.__neg__ = T.neg = T.negative = E.neg
    T.__pos__ = lambda a: a
    T.__abs__ = T.abs = E.abs
    T.__matmul__ = T.matmul = _matmul
    T.__rmatmul__ = lambda a, b: _matmul(E._as_tensor(b, a), a)
    T.__eq__ = T.eq = E.eq
    T.__ne__ = T.ne = E.ne
    T.__lt__ = T.lt = E.lt
    T.__le__ = T.le = E.le
    T.__gt__ = T.gt = E.gt
    T.__ge__ = T.ge = E.ge
    T.__and__ = T.__rand__ = T.bitwise_and = E.bitwise_and
    T.__or__ = T.__ror__ = T.bitwise_or = E.bitwise_or
    T.__xor__ = T.__rxor__ = T.bitwise_xor = E.bitwise_xor
    T.__invert__ = T.bitwise_not = E.invert
    T.__getitem__ = I.getitem
    T.__setitem__ = I.setitem
    T.__hash__ = lambda self: id(self)
    # in-place arithmetic rebinds data (tensors never mutate backend buffers)
    for name, op in (("add_", "add"), ("sub_", "sub"), ("mul_", "mul"), ("div_", "div")):
        setattr(T, name, _inplace(op))
    T.__iadd__, T.__isub__, T.__imul__, T.__itruediv__ = T.add_, T.sub_, T.mul_, T.div_
    T.clamp_ = _inplace_fn(E.clamp)
    T.masked_fill_ = _inplace_fn(E.masked_fill)

    for name in ("fmod", "maximum", "minimum", "logical_and", "logical_or", "logical_xor", "logical_not",
                 "exp", "log", "sin", "cos", "tan", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "reciprocal",
                 "sign", "floor", "ceil", "round", "trunc", "frac", "log2", "log10", "log1p", "expm1", "exp2",
                 "square", "sinh", "cosh", "clamp", "masked_fill", "lerp", "isnan", "isinf", "isfinite",
                 "nan_to_num", "relu", "sigmoid", "softplus"):
        setattr(T, name, getattr(E, name))
    T.clip = E.clamp
    T.where = E.tensor_where
    for name in ("reshape", "flatten", "unflatten", "permute", "transpose", "t", "unsqueeze", "squeeze",
                 "expand", "expand_as", "broadcast_to", "narrow", "chunk", "split", "unbind", "flip", "roll",
                 "repeat", "repeat_interleave", "tril", "triu", "movedim", "unfold"):
        setattr(T, name, getattr(M, name))
    T.view = M.reshape
    T.view_as = lambda a, b: M.reshape(a, *b.shape)
    T.reshape_as = T.view_as
    T.swapaxes = T.swapdims = M.transpose
    for name in ("sum", "prod", "mean", "var", "std", "amax", "amin", "max", "min", "argmax", "argmin",
                 "all", "any", "count_nonzero", "cumsum", "logsumexp", "norm", "argsort", "sort", "topk"):
        setattr(T, name, getattr(R, name))
    for name in ("index_select", "gather", "take_along_dim", "scatter", "scatter_add", "index_add",
                 "index_fill", "nonzero", "masked_select"):
        setattr(T, name, getattr(I, name))
    from .nn import functional as F
    for name in ("softmax", "log_softmax"):
        setattr(T, name, getattr(F, name))


def _inplace(op):
    def f(self, other, alpha=1):
        if self.requires_grad and self._ctx is None and A.is_grad_enabled():
            raise RuntimeError("ember: in-place operation on a leaf tensor that requires grad")
        cur = A.snapshot(self)
        if op == "div":
            out = E.div(cur, other)
        else:
            out = E.binary(op, cur, other if alpha == 1 else other * alpha)
        return A.rebind(self, A.prim_cast(out, self.dtype))
    return f


def _inplace_fn(fn):
    def f(self, *a, **k):
        return A.rebind(self, fn(A.snapshot(self), *a, **k))
    return f


_bind()
