"""ONNX elementwise math, comparisons, reductions and matrix products on ember Tensors."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_indexing as I
from .. import ops_movement as M
from .. import ops_reduce as R
from ..autograd import prim_binary, prim_pad, prim_unary
from ..linalg import matmul
from . import lowbit
from .guard import sized
from .registry import op
from .values import axis, cast, ember_dtype, host_ints

# ====================================================================== elementwise

_UNARY = {"Abs": E.abs, "Neg": E.neg, "Exp": E.exp, "Log": E.log, "Sqrt": E.sqrt, "Reciprocal": E.reciprocal,
          "Floor": E.floor, "Ceil": E.ceil, "Sin": E.sin, "Cos": E.cos, "Tan": E.tan, "Tanh": E.tanh,
          "Sinh": E.sinh, "Cosh": E.cosh, "Erf": E.erf, "Sigmoid": E.sigmoid, "Relu": E.relu, "Sign": E.sign,
          "Not": E.logical_not, "IsNaN": E.isnan}
for _name, _fn in _UNARY.items():
    op(_name)(lambda ctx, ins, at, _fn=_fn: _fn(ins[0]))


@op("Round", since=11)
def _round(ctx, ins, at):
    return prim_unary("round", ins[0])  # half to even, as ONNX


@op("Identity")
def _identity(ctx, ins, at):
    return ins[0]


@op("Asinh", since=9)
def _asinh(ctx, ins, at):
    x = ins[0]
    return E.sign(x) * E.log(E.abs(x) + E.sqrt(x * x + 1.0))


@op("Acosh", since=9)
def _acosh(ctx, ins, at):
    x = ins[0]
    return E.log(x + E.sqrt(x * x - 1.0))


@op("Atanh", since=9)
def _atanh(ctx, ins, at):
    x = ins[0]
    return 0.5 * E.log((1.0 + x) / (1.0 - x))


@op("IsInf", since=10)
def _isinf(ctx, ins, at):
    x = ins[0]
    pos, neg = at.i("detect_positive", 1), at.i("detect_negative", 1)
    inf = E.isinf(x)
    if pos and neg:
        return inf
    if pos:
        return E.logical_and(inf, x > 0)
    if neg:
        return E.logical_and(inf, x < 0)
    return inf & False


def _arith(name):
    def f(ctx, ins, at):
        return E.binary(name, ins[0], ins[1])
    return f


for _name, _p in {"Add": "add", "Sub": "sub", "Mul": "mul"}.items():
    op(_name, since=7)(_arith(_p))

for _name, _fn in {"Equal": E.eq, "Less": E.lt, "Greater": E.gt, "LessOrEqual": E.le, "GreaterOrEqual": E.ge,
                   "And": E.logical_and, "Or": E.logical_or, "Xor": E.logical_xor}.items():
    op(_name, since=7)(lambda ctx, ins, at, _fn=_fn: _fn(ins[0], ins[1]))


@op("Equal", since=19)
def _equal(ctx, ins, at):
    a, b = ins
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):  # string tensors (held on the host)
        return ctx.const(np.asarray(a == b, np.bool_))
    return E.eq(a, b)


@op("Div", since=7)
def _div(ctx, ins, at):
    a, b = ins
    if a.dtype.is_float:
        return E.binary("div", a, b)
    return E.div(a, b, rounding_mode="trunc")  # integer Div truncates (C semantics)


@op("Pow", since=7)
def _pow(ctx, ins, at):
    a, b = ins  # the exponent may have another type (opset 12+); the result has the base's
    if a.dtype.is_float:
        return E.binary("pow", a, cast(b, a.dtype))
    if b.dtype.is_float:
        return cast(E.binary("pow", cast(a, b.dtype), b), a.dtype)
    return E.binary("pow", a, cast(b, a.dtype))


@op("Mod", since=10)
def _mod(ctx, ins, at):
    a, b = ins
    if at.i("fmod", 0):
        return prim_binary("fmod", a, b)   # fmod=1: the sign of the dividend, as C's fmod
    if a.dtype.is_float:  # fmod=0 on floats: the sign of the divisor, as numpy's mod
        r = prim_binary("fmod", a, b)
        fix = E.logical_and(r != 0, (r < 0) != (b < 0))
        r = E.where(fix, r + b, r)
        return E.where(E.logical_and(E.isinf(b), E.logical_not(E.isinf(a))), E.where((a < 0) != (b < 0), E.where(a == 0, a, b), a), r)
    return a - prim_binary("floordiv", a, b) * b  # integer Mod: sign of the divisor, as Python


@op("BitShift", since=11)
def _bitshift(ctx, ins, at):
    """A shift is a product or floor quotient by 2**s (wrapping as the integer type does); a shift by a
    negative count or by the bit width or more gives 0 (or -1: a negative value shifted right)."""
    x, s = ins
    width = 8 * x.dtype.itemsize
    sf = cast(s, D.float32)
    valid = E.logical_and(sf >= 0, sf < width)
    sc = E.clamp(sf, 0.0, width - 1.0)
    p = None  # 2**s exactly: the product of 2**(2**k) over s's set bits, in x's own (wrapping) type
    for k in range(width.bit_length() - 1):
        bit = E.floor(sc / float(1 << k)) - E.floor(sc / float(2 << k)) * 2.0
        factor = cast(bit * float((1 << (1 << k)) - 1) + 1.0, x.dtype)
        p = factor if p is None else p * factor
    if at.s("direction") == "LEFT":
        return E.where(valid, x * p, 0)
    shifted = prim_binary("floordiv", x, p)
    beyond = E.where(x < 0, -1, 0) if x.dtype.is_signed else 0
    return E.where(valid, shifted, beyond)


def _variadic(combine):
    def f(ctx, ins, at):
        out = ins[0]
        for x in ins[1:]:
            out = combine(out, x)
        return out
    return f


op("Max", since=8)(_variadic(E.maximum))
op("Min", since=8)(_variadic(E.minimum))
op("Sum", since=8)(_variadic(lambda a, b: a + b))


@op("Mean", since=8)
def _mean(ctx, ins, at):
    return _variadic(lambda a, b: a + b)(ctx, ins, at) / float(len(ins))


@op("Where", since=9)
def _where(ctx, ins, at):
    return E.where(ins[0], ins[1], ins[2])


def _cast_onnx(x, to, at, ctx):
    if to in lowbit.LOWBIT:  # a type no backend stores: round to its values (held wide)
        return lowbit.cast_to(x, to, bool(at.i("saturate", 1)))
    return cast(x, ember_dtype(to, ctx.where))


@op("Cast", since=6)
def _cast(ctx, ins, at):
    return _cast_onnx(ins[0], at.i("to"), at, ctx)


@op("CastLike", since=15)
def _cast_like(ctx, ins, at):
    to = ctx.session.value_types.get(at.node.input[1])  # the declared type: float8 and int4 are held wide
    if to in lowbit.LOWBIT:
        return _cast_onnx(ins[0], to, at, ctx)
    return cast(ins[0], ins[1].dtype)


@op("Clip", since=6)
def _clip_attrs(ctx, ins, at):
    return E.clamp(ins[0], at.f("min", -3.4028234663852886e38), at.f("max", 3.4028234663852886e38))


@op("Clip", since=11)
def _clip(ctx, ins, at):
    x = ins[0]
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    if lo is not None:
        x = E.maximum(x, cast(lo, x.dtype))
    if hi is not None:
        x = E.minimum(x, cast(hi, x.dtype))
    return x


# ====================================================================== activations

@op("LeakyRelu", since=6)
def _leaky(ctx, ins, at):
    x = ins[0]
    return E.where(x >= 0, x, x * at.f("alpha", 0.01))


@op("PRelu", since=7)
def _prelu(ctx, ins, at):
    x, slope = ins
    return E.where(x >= 0, x, x * slope)


@op("Elu", since=6)
def _elu(ctx, ins, at):
    x = ins[0]
    return E.where(x >= 0, x, (E.exp(x) - 1.0) * at.f("alpha", 1.0))


@op("Selu", since=6)
def _selu(ctx, ins, at):
    x = ins[0]
    alpha, gamma = at.f("alpha", 1.67326319217681884765625), at.f("gamma", 1.05070102214813232421875)
    return E.where(x > 0, x, (E.exp(x) - 1.0) * alpha) * gamma


@op("Celu", since=12)
def _celu(ctx, ins, at):
    x, alpha = ins[0], at.f("alpha", 1.0)
    return E.maximum(x, 0.0) + E.minimum((E.exp(x / alpha) - 1.0) * alpha, 0.0)


@op("ThresholdedRelu", since=10)
def _thresholded(ctx, ins, at):
    x = ins[0]
    return E.where(x > at.f("alpha", 1.0), x, x * 0.0)


@op("HardSigmoid", since=6)
def _hardsigmoid(ctx, ins, at):
    return E.clamp(ins[0] * at.f("alpha", 0.2) + at.f("beta", 0.5), 0.0, 1.0)


@op("HardSwish", since=14)
def _hardswish(ctx, ins, at):
    x = ins[0]
    return x * E.clamp(x * (1 / 6) + 0.5, 0.0, 1.0)


@op("Softplus")
def _softplus(ctx, ins, at):
    x = ins[0]
    return E.maximum(x, 0.0) + E.log1p(E.exp(-E.abs(x)))  # log(1 + e^x) without overflow


@op("Softsign")
def _softsign(ctx, ins, at):
    x = ins[0]
    return x / (E.abs(x) + 1.0)


@op("Mish", since=18)
def _mish(ctx, ins, at):
    x = ins[0]
    return x * E.tanh(_softplus(ctx, ins, at))


@op("Gelu", since=20)
def _gelu(ctx, ins, at):
    return E.gelu(ins[0], approximate=at.s("approximate", "none"))


@op("Shrink", since=9)
def _shrink(ctx, ins, at):
    x, bias, lambd = ins[0], at.f("bias", 0.0), at.f("lambd", 0.5)
    zero = x * 0
    return E.where(x < -lambd, x + bias, E.where(x > lambd, x - bias, zero))


# ====================================================================== reductions

def _reduce_axes(ctx, ins, at, axes_input: bool):
    x = ins[0]
    given = ins[1] if axes_input and len(ins) > 1 else None
    kept = at.memo.get("axes")  # (the same axes tensor, or the attribute, on the same rank as the last run: its axes)
    if kept is not None and kept[0] is given and kept[1] == x.ndim:
        return x, kept[2]
    if axes_input:
        axes = host_ints(given) if given is not None else []
    else:
        axes = at.ints("axes", [])
    if not axes:
        got = None if at.i("noop_with_empty_axes", 0) else tuple(range(x.ndim))
    else:
        got = tuple(sorted({axis(a, x.ndim, ctx) for a in axes}))
    at.memo["axes"] = (given, x.ndim, got)
    return x, got


def _reduction(kernel, axes_input_since):
    def make(axes_input):
        def f(ctx, ins, at):
            x, axes = _reduce_axes(ctx, ins, at, axes_input)
            if axes is None:
                return kernel(x, None, None, noop=True)
            return kernel(x, axes, bool(at.i("keepdims", 1)), noop=False)
        return f
    return make(False), make(True), axes_input_since


def _keep_dtype(fn):
    def k(x, axes, keep, noop):
        if noop:
            return x
        if not axes:
            return x  # a rank-0 input: nothing to reduce
        return cast(fn(x, axes, keep), x.dtype)
    return k


def _sum(x, axes, keep):
    return R.sum(x, dim=axes, keepdim=keep)


def _log_sum_exp(x, axes, keep):
    m = R.amax(x, dim=axes, keepdim=True)
    m = E.where(E.isinf(m), m * 0.0, m)
    out = E.log(R.sum(E.exp(x - m), dim=axes, keepdim=True)) + m
    return out if keep else _squeeze(out, axes)


def _squeeze(x, axes):
    for a in sorted(axes, reverse=True):
        x = M.squeeze(x, a)
    return x


_REDUCTIONS = {
    "ReduceSum": (_sum, 13),
    "ReduceMean": (lambda x, a, k: R.mean(x, dim=a, keepdim=k), 18),
    "ReduceMax": (lambda x, a, k: R.amax(x, dim=a, keepdim=k), 18),
    "ReduceMin": (lambda x, a, k: R.amin(x, dim=a, keepdim=k), 18),
    "ReduceProd": (lambda x, a, k: R.prod(x, dim=a, keepdim=k), 18),
    "ReduceL1": (lambda x, a, k: R.sum(E.abs(x), dim=a, keepdim=k), 18),
    "ReduceL2": (lambda x, a, k: E.sqrt(cast(R.sum(x * x, dim=a, keepdim=k), D.float32)) if not x.dtype.is_float
                 else E.sqrt(R.sum(x * x, dim=a, keepdim=k)), 18),
    "ReduceSumSquare": (lambda x, a, k: R.sum(x * x, dim=a, keepdim=k), 18),
    "ReduceLogSum": (lambda x, a, k: E.log(R.sum(x, dim=a, keepdim=k)), 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
}
def _empty_aware(fn, identity):
    """Max/min/log-sum-exp over an empty axis: the reduction's identity (-inf, +inf; for ints and bools
    the type's extreme), as ONNX defines them, where the backend reduction refuses empty input."""
    def k(x, axes, keep):
        if not any(x.shape[a] == 0 for a in axes):
            return fn(x, axes, keep)
        shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
        if x.dtype.is_float:
            v = identity
        elif x.dtype is D.bool_:
            v = identity > 0
        else:
            info = np.iinfo(x.dtype.np)
            v = info.max if identity > 0 else info.min
        return x.new_full(tuple(shape), v)
    return k


_EMPTY = {"ReduceMax": float("-inf"), "ReduceMin": float("inf"), "ReduceLogSumExp": float("-inf")}
for _name, (_fn, _since) in _REDUCTIONS.items():
    if _name in _EMPTY:
        _fn = _empty_aware(_fn, _EMPTY[_name])
    _attr_form, _input_form, _ = _reduction(_keep_dtype(_fn), _since)
    op(_name, since=1)(_attr_form)
    op(_name, since=_since)(_input_form)


def _arg(kind):
    def f(ctx, ins, at):
        x = ins[0]
        ax, keep = axis(at.i("axis", 0), x.ndim, ctx), bool(at.i("keepdims", 1))
        if at.i("select_last_index", 0):  # the last of equal values: search the flipped axis
            i = (R.argmax if kind == "max" else R.argmin)(M.flip(x, ax), dim=ax, keepdim=keep)
            return (x.shape[ax] - 1) - i
        return (R.argmax if kind == "max" else R.argmin)(x, dim=ax, keepdim=keep)
    return f


op("ArgMax")(_arg("max"))
op("ArgMin")(_arg("min"))


# ====================================================================== matrix products

@op("MatMul")
def _matmul(ctx, ins, at):
    return matmul(ins[0], ins[1])


@op("Gemm", since=7)
def _gemm(ctx, ins, at):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if at.i("transA", 0):
        a = a.T
    if at.i("transB", 0):
        b = b.T
    y = matmul(a, b)
    alpha, beta = at.f("alpha", 1.0), at.f("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + (c * beta if beta != 1.0 else c)
    return y


@op("Einsum", since=12)
def _einsum(ctx, ins, at):
    from .einsum import einsum
    return einsum(at.s("equation"), ins, ctx)


@op("Constant", since=1)
def _constant(ctx, ins, at):
    for name, conv in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if name in at:
            if conv is None:
                return ctx.const(at.tensor("value", ctx.session.model.base_dir))
            a = at.by_name[name]
            vals = {"value_float": a.f, "value_int": a.i}.get(name)
            if vals is None:
                vals = at.floats(name) if name == "value_floats" else at.ints(name)
            return ctx.const(np.asarray(vals, conv))
    raise ValueError(f"ember: {ctx.where}: Constant node has no value attribute ember supports "
                     f"({sorted(at.by_name)})")



# ====================================================================== inverse trig (composed: no primitive)

def _atan(x):
    """atan to float32 precision from elementwise primitives: |x| > 1 folds to pi/2 - atan(1/|x|),
    one half-angle step brings the argument under tan(pi/8), where the odd series converges fast."""
    a = E.abs(x)
    big = a > 1.0
    t = E.where(big, 1.0 / E.maximum(a, 1e-30), a)
    t = t / (1.0 + E.sqrt(1.0 + t * t))  # atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))
    t2, term, total = t * t, t, t
    for k in range(1, 9):
        term = term * -t2
        total = total + term / (2 * k + 1)
    r = total * 2.0
    r = E.where(big, 1.5707963267948966 - r, r)
    return E.where(x < 0, -r, r)


@op("Atan", since=7)
def _atan_op(ctx, ins, at):
    return _atan(ins[0])


@op("Asin", since=7)
def _asin(ctx, ins, at):
    x = ins[0]  # asin x = atan(x / sqrt(1 - x^2)); +-1 map to +-pi/2 through atan(+-inf)
    return _atan(x / E.sqrt(1.0 - x * x))


@op("Acos", since=7)
def _acos(ctx, ins, at):
    return 1.5707963267948966 - _asin(ctx, ins, at)


# ====================================================================== bitwise (integers, from their bits)

def _bits(x):
    """x's bits, lowest first, as 0/1 tensors of x's dtype (two's complement; the top bit of a signed
    type is its sign)."""
    n = x.dtype.itemsize * 8
    signed = x.dtype.is_signed
    out = []
    for k in range(n - 1 if signed else n):
        q = prim_binary("floordiv", x, 1 << k)
        out.append(q - prim_binary("floordiv", q, 2) * 2)
    if signed:
        out.append(cast(x < 0, x.dtype))
    return out, signed


def _bitwise(combine):
    def f(ctx, ins, at):
        a, b = ins
        if a.dtype is D.bool_:
            return combine(a, b)
        ba, signed = _bits(a)
        bb, _ = _bits(b)
        out = None
        for k, (p, q) in enumerate(zip(ba, bb)):
            bit = cast(combine(p > 0, q > 0), a.dtype)
            weight = -(1 << k) if signed and k == len(ba) - 1 else 1 << k
            term = bit * weight
            out = term if out is None else out + term
        return out
    return f


op("BitwiseAnd", since=18)(_bitwise(E.logical_and))
op("BitwiseOr", since=18)(_bitwise(E.logical_or))
op("BitwiseXor", since=18)(_bitwise(E.logical_xor))


@op("BitwiseNot", since=18)
def _bitwise_not(ctx, ins, at):
    x = ins[0]
    if not x.dtype.is_signed:  # unsigned n bits: (2^n - 1) - x
        return ((1 << (8 * x.dtype.itemsize)) - 1) - x
    return -x - 1  # two's complement


def _swish_gate(x, alpha):
    """sigmoid(alpha x) as Swish's and SwiGLU's definitions write it, 1 / (1 + exp(-alpha x)): in a 16-bit float
    type each step rounds to that type, as the operators' reference computes it (the fused sigmoid, which
    rounds once, differs there by an ulp)."""
    if x.dtype.itemsize < 4 and x.dtype.is_float:
        return 1.0 / (E.exp(x * -alpha) + 1.0)
    return E.sigmoid(x * alpha)


@op("Swish", since=24)
def _swish(ctx, ins, at):
    x = ins[0]
    return x * _swish_gate(x, at.f("alpha", 1.0))


@op("SwiGLU", since=26)
def _swiglu(ctx, ins, at):
    a, b = ins
    return a * _swish_gate(a, at.f("alpha", 1.0)) * b


# ====================================================================== spectral

def _dft(ctx, at, x, length, ax, inverse, onesided):
    """DFT along `ax` of x (..., 1 | 2) (real, or real/imaginary pairs) as matmuls by cos/sin tables."""
    ax = ax % x.ndim
    if ax == x.ndim - 1:
        raise ValueError(f"ember: {ctx.where}: DFT axis {ax} is the complex axis")
    n = x.shape[ax]
    xr = M.movedim(M.narrow(x, -1, 0, 1), ax, -1)  # (..., 1, n) with the signal last
    xi = M.movedim(M.narrow(x, -1, 1, 1), ax, -1) if x.shape[-1] == 2 else None
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    bins = length // 2 + 1 if onesided else length
    take = (bins if inverse and onesided else length)  # input samples the transform reads
    sized(at, "dft_length", [take, bins], 8)  # (the float64 cos / sin tables)

    def fit(v):  # zero-pad or truncate the signal axis to `take`
        if v is None or v.shape[-1] == take:
            return v
        if v.shape[-1] > take:
            return M.narrow(v, -1, 0, take)
        return prim_pad(v, ((0, 0),) * (v.ndim - 1) + ((0, take - v.shape[-1]),), 0.0)
    xr, xi = fit(xr), fit(xi)
    j = np.arange(take)[:, None]
    k = np.arange(length if inverse else bins)[None, :]
    ang = 2 * np.pi * j * k / length
    cos, sin = ctx.const(np.cos(ang), x.dtype.np), ctx.const(np.sin(ang), x.dtype.np)
    if not inverse:
        re = matmul(xr, cos) + (matmul(xi, sin) if xi is not None else 0.0)
        im = -matmul(xr, sin) + (matmul(xi, cos) if xi is not None else 0.0)
    elif not onesided:
        re = (matmul(xr, cos) - (matmul(xi, sin) if xi is not None else 0.0)) / float(length)
        im = (matmul(xr, sin) + (matmul(xi, cos) if xi is not None else 0.0)) / float(length)
    else:  # irfft: the Hermitian spectrum's missing half counted twice
        c = np.full((take, 1), 2.0)
        c[0] = 1.0
        if length % 2 == 0 and take > length // 2:
            c[length // 2] = 1.0
        cw, sw = ctx.const(c * np.cos(ang), x.dtype.np), ctx.const(c * np.sin(ang), x.dtype.np)
        re = (matmul(xr, cw) - (matmul(xi, sw) if xi is not None else 0.0)) / float(length)
        return M.movedim(re, -1, ax)
    return M.cat([M.movedim(re, -1, ax), M.movedim(im, -1, ax)], -1)


@op("DFT", since=17)
def _dft17(ctx, ins, at):
    length = host_ints(ins[1])[0] if len(ins) > 1 and ins[1] is not None else None
    return _dft(ctx, at, ins[0], length, at.i("axis", 1), at.i("inverse", 0), at.i("onesided", 0))


@op("DFT", since=20)
def _dft20(ctx, ins, at):
    length = host_ints(ins[1])[0] if len(ins) > 1 and ins[1] is not None and ins[1].numel() else None
    ax = host_ints(ins[2])[0] if len(ins) > 2 and ins[2] is not None else -2
    return _dft(ctx, at, ins[0], length, ax, at.i("inverse", 0), at.i("onesided", 0))


@op("STFT", since=17)
def _stft(ctx, ins, at):
    """Frames of the signal (batch, length, 1 | 2), each windowed, through one DFT along the frame axis."""
    x, step = ins[0], host_ints(ins[1])[0]
    window = ins[2] if len(ins) > 2 else None
    frame = host_ints(ins[3])[0] if len(ins) > 3 and ins[3] is not None else window.shape[0]
    if step <= 0 or frame <= 0:
        raise ValueError(f"ember: {ctx.where}: STFT frame_step {step} and frame_length {frame} must be positive")
    n_frames = (x.shape[1] - frame) // step + 1
    sized(at, "frame_step", [x.shape[0], max(n_frames, 0), frame, x.shape[-1]], x.dtype.itemsize)
    frames = M.stack([M.narrow(x, 1, f * step, frame) for f in range(n_frames)], 1)  # (B, F, frame, c)
    if window is not None:
        frames = frames * M.reshape(cast(window, x.dtype), 1, 1, frame, 1)
    return _dft(ctx, at, frames, frame, 2, 0, at.i("onesided", 1))


@op("MelWeightMatrix", since=17)
def _mel_weight_matrix(ctx, ins, at):
    """The (dft_length // 2 + 1, num_mel_bins) triangular mel filterbank, from scalars (a constant)."""
    n_mel, n_fft, rate = (host_ints(t)[0] for t in ins[:3])
    sized(at, "dft_length and num_mel_bins", [n_fft // 2 + 1, n_mel], 8)
    lo, hi = (float(np.asarray(t.numpy()).reshape(-1)[0]) for t in ins[3:5])
    mel = lambda f: 2595 * np.log1p(f / 700) / np.log(10)  # noqa: E731
    pts = np.arange(n_mel + 2) * ((mel(hi) - mel(lo)) / (n_mel + 2)) + mel(lo)
    bins = (((n_fft + 1) * (700 * np.expm1(pts / 2595 * np.log(10)))) // rate).astype(int)
    out = np.zeros((n_fft // 2 + 1, n_mel))
    for i in range(n_mel):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return cast(ctx.const(out.astype(np.float32)), ember_dtype(at.i("output_datatype", 1), ctx.where))


# ====================================================================== ai.onnx.ml (numeric ones)

@op("Binarizer", since=1, domain="ai.onnx.ml")
def _binarizer(ctx, ins, at):
    x = ins[0]
    return cast(x > at.f("threshold", 0.0), x.dtype)


@op("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def _array_feature_extractor(ctx, ins, at):
    x, idx = ins
    picked = I.index_select(x, x.ndim - 1, M.reshape(cast(idx, D.int64), -1))
    return M.reshape(picked, 1, -1) if x.ndim == 1 else picked
