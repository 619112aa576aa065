"""ONNX neural-network operators on ember Tensors: convolution, pooling, normalization, softmax, resize.

Pooling is composed from strided slices (one per kernel offset) so it runs on any backend and in
any rank; convolution uses the conv primitive, asymmetric padding padding the input first.
"""
from __future__ import annotations

import itertools

import numpy as np

from .. import ops_elementwise as E
from .. import ops_indexing as I
from .. import dtypes as D
from .. import ops_movement as M
from .. import ops_reduce as R
from ..autograd import conv_transpose, fused_kernel, prim_fused, prim_pad, prim_unary
from ..linalg import matmul
from ..nn.functional import conv_act, conv_nd, layer_norm, repeat_factor, upsample_nearest_composed
from .guard import sized
from .registry import op
from .values import axis, cast, host

# ====================================================================== convolution


def _auto_pads(at, in_sp, k, s, d, ctx):
    """ONNX pads [b1, b2, ..., e1, e2, ...] for this input, honouring auto_pad."""
    n = len(in_sp)
    mode = at.s("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        return at.ints("pads", [0] * (2 * n))
    if mode == "VALID":
        return [0] * (2 * n)
    begin, end = [], []
    for i in range(n):
        out = -(-in_sp[i] // s[i])
        total = max((out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i], 0)
        small, big = total // 2, total - total // 2
        b, e = (small, big) if mode == "SAME_UPPER" else (big, small)
        begin.append(b)
        end.append(e)
    return begin + end


def _pad_input(x, pads, value=0.0):
    n = len(pads) // 2
    if not any(pads):
        return x
    spec = [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)]
    return prim_pad(x, tuple(spec), value)


_MEMO_MAX = 16  # per node: a model fed ever new shapes recomputes, its memo never grows past this


def _conv_args(ctx, at, x, w):
    """(stride, padding, dilation, groups, pads or None) of a Conv on x's spatial shape and w's kernel: ONNX's
    attributes resolved once per node and shape (a streaming model convolves every chunk alike). pads is None
    where they are symmetric (padding holds them), else the ONNX pads the input gets first (padding is 0)."""
    key = (x.shape, w.shape)
    args = at.memo.get(key)
    if args is None:
        n = x.ndim - 2
        k = at.ints("kernel_shape", list(w.shape[2:]))
        s, d = at.ints("strides", [1] * n), at.ints("dilations", [1] * n)
        pads = _auto_pads(at, x.shape[2:], k, s, d, ctx)
        sym = pads[:n] == pads[n:]
        args = (tuple(s), tuple(pads[:n]) if sym else (0,) * n, tuple(d), at.i("group", 1), None if sym else pads)
        if len(at.memo) >= _MEMO_MAX:
            at.memo.clear()
        at.memo[key] = args
    return args


@op("Conv")
def _conv(ctx, ins, at):
    return _conv_step(ctx, ins, at, None)


def _conv_step(ctx, ins, at, act):
    """act(Conv(...)): nn.functional's conv_nd / conv_act (the backend's fused conv + bias (+ activation) where it
    has one: YOLO's every layer) the first time this node sees x's shape and dtype and these w and b (checked
    there); later runs with the same ones call that kernel directly, looked up each run in the registry."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    fast = at.memo.get("conv_fast")
    if fast is not None and fast[0] == x.shape and fast[1] is x.dtype and fast[2] is w and fast[3] is b:
        k = fused_kernel(fast[4], x, w, b)
        if k is not None:
            return prim_fused(k, x if fast[6] is None else _pad_input(x, fast[6]), *fast[5])
    shape = x.shape
    s, p, d, g, pads = _conv_args(ctx, at, x, w)
    if pads is not None:
        x = _pad_input(x, pads)
    y = conv_nd(x, w, b, s, p, d, g, x.ndim - 2) if act is None else conv_act(x, w, b, s, p, d, g, act)
    # what conv_nd / conv_act hand these kernels without a fallback (their checks passed: no error above)
    if x.ndim in (3, 4) and x.ndim == w.ndim and x.dtype is w.dtype and (b is None or b.dtype is x.dtype):
        bias = None if b is None else b._data
        name, args = ("conv_bias", (w._data, bias, s, p, d, g)) if act is None and b is not None else \
            ("conv_bias_act", (w._data, bias, s, p, d, g, act))
        at.memo["conv_fast"] = (shape, x.dtype, w, b, name, args, pads)
    return y


def conv_act_step(act):
    """A Conv whose one reader was Relu or SiLU (fuse.py): act(Conv(...)), the activation in the backend's
    conv_bias_act epilogue where it has one (nn.functional.conv_act; else the conv, then the activation)."""
    def step(ctx, ins, at):
        return _conv_step(ctx, ins, at, act)
    step.__name__ = f"_conv_{act}"
    return step


@op("ConvTranspose")
def _conv_transpose(ctx, ins, at):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    n = x.ndim - 2
    k = at.ints("kernel_shape", list(w.shape[2:]))
    s, d = at.ints("strides", [1] * n), at.ints("dilations", [1] * n)
    op_ = at.ints("output_padding", [0] * n)
    in_sp = x.shape[2:]
    full = [(in_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 for i in range(n)]
    out_shape = at.ints("output_shape")
    mode = at.s("auto_pad", "NOTSET")
    if out_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        target = out_shape[-n:] if out_shape is not None else [in_sp[i] * s[i] for i in range(n)]
        total = [full[i] + op_[i] - target[i] for i in range(n)]
        half = [int(t / 2) for t in total]  # C division: an output_shape past the full output pads the end
        if mode == "SAME_UPPER" or (out_shape is not None and mode != "SAME_LOWER"):
            begin = half
        else:
            begin = [t - h for t, h in zip(total, half)]
        pads = begin + [total[i] - begin[i] for i in range(n)]
    elif mode == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = at.ints("pads", [0] * (2 * n))
    y = conv_transpose(x, w, tuple(s), (0,) * n, (0,) * n, tuple(d), at.i("group", 1))  # (N, O, *full)
    key = [slice(None), slice(None)]
    extra = []
    for i in range(n):
        stop = full[i] - pads[n + i] + op_[i]
        key.append(slice(pads[i], min(stop, full[i])))
        extra.append(max(stop - full[i], 0))
    y = y[tuple(key)]
    if any(extra):  # output_padding past the last input's reach: zeros (plus the bias)
        y = prim_pad(y, ((0, 0), (0, 0)) + tuple((0, e) for e in extra), 0.0)
    if b is not None:
        y = y + M.reshape(b, 1, -1, *([1] * n))
    return y


# ====================================================================== pooling

def _pool_out(sp, k, s, d, pads, ceil_mode):
    """The windows along each spatial axis (ONNX's output shape of a pool)."""
    n = len(k)
    out = []
    for i in range(n):
        span = sp[i] + pads[i] + pads[i + n] - ((k[i] - 1) * d[i] + 1)
        o = (-(-span // s[i]) if ceil_mode else span // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= sp[i] + pads[i]:
            o -= 1  # the last window must start inside the input or its left padding
        out.append(max(o, 0))
    return out


def _windows(x, k, s, d, pads, ceil_mode, fill, overhang=None):
    """Yield one strided view per kernel offset, each (N, C, *out): the pool's inputs. The pads hold
    `fill`; the cells a ceil_mode window reaches past them hold `overhang` (default: `fill`)."""
    n = len(k)
    sp = x.shape[2:]
    out = _pool_out(sp, k, s, d, pads, ceil_mode)
    # extra right padding so every window of the ceil-mode output is in bounds
    need = [(out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - (sp[i] + pads[i] + pads[i + n]) for i in range(n)]
    xp = _pad_input(x, pads, fill)
    if any(v > 0 for v in need):
        xp = _pad_input(xp, [0] * n + [max(v, 0) for v in need], fill if overhang is None else overhang)
    for off in itertools.product(*[range(ki) for ki in k]):
        key = [slice(None), slice(None)]
        for i in range(n):
            st = off[i] * d[i]
            key.append(slice(st, st + (out[i] - 1) * s[i] + 1, s[i]))
        yield xp[tuple(key)]


def _pool_params(at, x, ctx, kernel=None):
    n = x.ndim - 2
    k = kernel or at.ints("kernel_shape")
    s = at.ints("strides", [1] * n)
    d = at.ints("dilations", [1] * n)
    pads = _auto_pads(at, x.shape[2:], k, s, d, ctx)
    return k, s, d, pads, bool(at.i("ceil_mode", 0))


def _max_by_axis(x, k, s, d, pads, ceil_mode, low):
    """The max pool one spatial axis at a time (max is separable): sum(k) windows instead of prod(k) (YOLOv8s's
    5x5 SPPF pools: 8 maximum passes instead of 24, ~3x faster)."""
    n = len(k)
    for i in range(n):
        if k[i] == 1 and s[i] == 1 and pads[i] == pads[i + n] == 0:
            continue
        one = [1] * n
        ki, si, di = one[:i] + [k[i]] + one[i + 1:], one[:i] + [s[i]] + one[i + 1:], one[:i] + [d[i]] + one[i + 1:]
        pi = [0] * (2 * n)
        pi[i], pi[i + n] = pads[i], pads[i + n]
        y = None
        for win in _windows(x, ki, si, di, pi, ceil_mode, low):
            y = win if y is None else E.maximum(y, win)
        x = y
    return x


@op("MaxPool")
def _maxpool(ctx, ins, at):
    x = ins[0]
    k, s, d, pads, ceil = _pool_params(at, x, ctx)
    values_only = len(at.node.output) < 2 or not at.node.output[1]
    kern = fused_kernel("max_pool2d", x) if values_only and x.ndim == 4 else None
    if kern is not None:  # the backend's pass over each window (YOLO's SPPF: nn.functional's registry op)
        out = _pool_out(x.shape[2:], k, s, d, pads, ceil)
        if min(out) > 0:
            return prim_fused(kern, x, tuple(k), tuple(s), tuple(pads[:2]), tuple(d), tuple(out))
    low = -np.inf if x.dtype.is_float else np.iinfo(x.dtype.np).min
    y = _max_by_axis(x, k, s, d, pads, ceil, low)
    if values_only:
        return y
    # Indices: the flat position (row-major, or column-major with storage_order=1) of each window's
    # first maximum, windowed exactly as the values were
    sp = x.shape[2:]
    pos = np.arange(int(np.prod(sp)), dtype=np.int64).reshape(sp)
    if at.i("storage_order", 0):
        pos = np.arange(int(np.prod(sp)), dtype=np.int64).reshape(sp[::-1]).T
    pos_t = ctx.const(pos.astype(np.float64 if x.dtype is D.float64 else np.float32).reshape((1, 1) + tuple(sp)))
    best, idx = None, None
    for win, p in zip(_windows(x, k, s, d, pads, ceil, low), _windows(pos_t, k, s, d, pads, ceil, -1.0)):
        if best is None:
            best, idx = win, M.expand(p, *win.shape)
        else:
            better = win > best
            best, idx = E.where(better, win, best), E.where(better, p, idx)
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * int(np.prod(sp))).reshape(x.shape[0], x.shape[1],
                                                                                         *([1] * len(sp)))
    return [y, cast(idx, D.int64) + ctx.const(base)]


@op("AveragePool")
def _avgpool(ctx, ins, at):
    x = ins[0]
    k, s, d, pads, ceil = _pool_params(at, x, ctx)
    total = None
    for win in _windows(x, k, s, d, pads, ceil, 0.0):
        total = win if total is None else total + win
    # divisor: the window cells inside the input (count_include_pad=0) or inside input + pads
    n = len(k)
    ones = M.expand(ctx.const(np.ones((1, 1) + tuple(x.shape[2:]), x.dtype.np)), 1, 1, *x.shape[2:])
    pad_fill = 1.0 if at.i("count_include_pad", 0) else 0.0  # pads count or not; the ceil overhang never
    count = None
    for win in _windows(ones, k, s, d, pads, ceil, pad_fill, overhang=0.0):
        count = win if count is None else count + win
    return total / count


@op("LpPool", since=11)
def _lppool(ctx, ins, at):
    x, p = ins[0], at.i("p", 2)
    k, s, d, pads, ceil = _pool_params(at, x, ctx)
    total = None
    for win in _windows(E.abs(x) ** p, k, s, d, pads, ceil, 0.0):
        total = win if total is None else total + win
    return total ** (1.0 / p)


def _global(reduce):
    def f(ctx, ins, at):
        x = ins[0]
        return reduce(x, tuple(range(2, x.ndim)))
    return f


op("GlobalAveragePool")(_global(lambda x, a: R.mean(x, dim=a, keepdim=True)))
op("GlobalMaxPool")(_global(lambda x, a: R.amax(x, dim=a, keepdim=True)))


@op("GlobalLpPool", since=2)
def _global_lp(ctx, ins, at):
    x, p = ins[0], at.i("p", 2)
    return R.sum(E.abs(x) ** p, dim=tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)


# ====================================================================== normalization

def _per_channel(v, ndim):
    return M.reshape(v, 1, -1, *([1] * (ndim - 2)))


@op("BatchNormalization", since=9)
def _batchnorm(ctx, ins, at):
    x, scale, bias, mean, var = ins[:5]
    eps = at.f("epsilon", 1e-5)
    if at.i("training_mode", 0):  # batch statistics; running ones updated by momentum
        axes = (0,) + tuple(range(2, x.ndim))
        b_mean = R.mean(x, dim=axes)
        b_var = R.mean((x - _per_channel(b_mean, x.ndim)) ** 2, dim=axes)
        m = at.f("momentum", 0.9)
        inv = E.rsqrt(b_var + eps) * scale
        y = x * _per_channel(inv, x.ndim) + _per_channel(bias - b_mean * inv, x.ndim)
        return [y, mean * m + b_mean * (1 - m), var * m + b_var * (1 - m)]
    inv = E.rsqrt(var + eps) * scale
    return x * _per_channel(inv, x.ndim) + _per_channel(bias - mean * inv, x.ndim)


@op("InstanceNormalization", since=6)
def _instancenorm(ctx, ins, at):
    x, scale, bias = ins
    axes = tuple(range(2, x.ndim))
    mean = R.mean(x, dim=axes, keepdim=True)
    var = R.mean((x - mean) * (x - mean), dim=axes, keepdim=True)
    y = (x - mean) * E.rsqrt(var + at.f("epsilon", 1e-5))
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


@op("LayerNormalization", since=17)
def _layernorm(ctx, ins, at):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    ax = axis(at.i("axis", -1), x.ndim, ctx)
    eps = at.f("epsilon", 1e-5)
    if ax == x.ndim - 1 and not any(at.node.output[1:]) and x.dtype is D.float32 and scale.dtype is D.float32 \
            and tuple(scale.shape) == (x.shape[-1],) and (bias is None or tuple(bias.shape) == (x.shape[-1],)):
        # over the last axis with no mean / inverse std wanted (every transformer export): the backend's
        # fused layer norm, one pass where the composition below takes nine
        return layer_norm(x, x.shape[-1], scale, bias, eps)
    axes = tuple(range(ax, x.ndim))
    xf = cast(x, D.float32) if not x.dtype.is_float or x.dtype.itemsize < 4 else x  # stash_type float32
    mean = R.mean(xf, dim=axes, keepdim=True)
    var = R.mean((xf - mean) * (xf - mean), dim=axes, keepdim=True)
    inv = E.rsqrt(var + eps)
    y = cast((xf - mean) * inv, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y, mean, inv]


@op("GroupNormalization", since=18)
def _groupnorm(ctx, ins, at):
    x, scale, bias = ins
    g, eps = at.i("num_groups"), at.f("epsilon", 1e-5)
    n, c = x.shape[:2]
    xg = M.reshape(x, n, g, -1)
    mean = R.mean(xg, dim=2, keepdim=True)
    var = R.mean((xg - mean) * (xg - mean), dim=2, keepdim=True)
    y = M.reshape((xg - mean) * E.rsqrt(var + eps), *x.shape)
    if ctx.opset < 21 and scale.shape[0] == g:  # opset 18: scale and bias per group
        scale, bias = M.repeat_interleave(scale, c // g), M.repeat_interleave(bias, c // g)
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


@op("LRN")
def _lrn(ctx, ins, at):
    x = ins[0]
    size, alpha, beta, bias = at.i("size"), at.f("alpha", 1e-4), at.f("beta", 0.75), at.f("bias", 1.0)
    sq = x * x
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = prim_pad(sq, ((0, 0), (lo, hi)) + ((0, 0),) * (x.ndim - 2), 0.0)
    c = x.shape[1]
    total = None
    for i in range(size):
        win = M.narrow(padded, 1, i, c)
        total = win if total is None else total + win
    return x / (total * (alpha / size) + bias) ** beta


@op("MeanVarianceNormalization", since=9)
def _mvn(ctx, ins, at):
    x = ins[0]
    axes = tuple(axis(a, x.ndim, ctx) for a in at.ints("axes", [0, 2, 3]))
    mean = R.mean(x, dim=axes, keepdim=True)
    var = R.mean(x * x, dim=axes, keepdim=True) - mean * mean
    return (x - mean) / (E.sqrt(var) + 1e-9)


@op("LpNormalization")
def _lpnorm(ctx, ins, at):
    x = ins[0]
    ax, p = axis(at.i("axis", -1), x.ndim, ctx), at.i("p", 2)
    norm = R.sum(E.abs(x), dim=ax, keepdim=True) if p == 1 else E.sqrt(R.sum(x * x, dim=ax, keepdim=True))
    return E.where(norm == 0, 0.0, x / E.where(norm == 0, 1.0, norm))  # an all-zero slice stays zero


# ====================================================================== softmax family

def _coerced(fn):
    """Opsets before 13 flatten the input to 2-D at `axis` (default 1) and apply along the second."""
    def f(ctx, ins, at):
        x = ins[0]
        ax = axis(at.i("axis", 1), x.ndim, ctx)
        y = fn(M.reshape(x, int(np.prod(x.shape[:ax])), -1), 1)
        return M.reshape(y, *x.shape)
    return f


def _hardmax(x, ax):
    idx = R.argmax(x, dim=ax, keepdim=True)
    r = M.reshape(_arange(x, ax), *[x.shape[ax] if i == ax else 1 for i in range(x.ndim)])
    return cast(r == idx, x.dtype)


def _arange(x, ax):
    return x.new_tensor(np.arange(x.shape[ax], dtype=np.int64))


for _name, _fn in {"Softmax": R.softmax, "LogSoftmax": R.log_softmax, "Hardmax": _hardmax}.items():
    op(_name, since=1)(_coerced(lambda x, a, _fn=_fn: _fn(x, a)))
    op(_name, since=13)(lambda ctx, ins, at, _fn=_fn: _fn(ins[0], axis(at.i("axis", -1), ins[0].ndim, ctx)))


# ====================================================================== resize

def _source_coords(n_in, n_out, scale, roi, at):
    """Each output sample's coordinate in the input along one axis (float64), by coordinate_transformation_mode."""
    coord = at.s("coordinate_transformation_mode", "half_pixel")
    o = np.arange(n_out, dtype=np.float64)
    if coord == "asymmetric":
        src = o / scale
    elif coord == "align_corners":  # the unrounded output length n_in * scale, as the reference
        span = n_in * scale - 1
        src = o * (n_in - 1) / span if n_out > 1 and span > 0 else np.zeros_like(o)
    elif coord == "pytorch_half_pixel":
        src = (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)
    elif coord == "tf_crop_and_resize":
        start, end = roi
        src = (start * (n_in - 1) + o * (end - start) * (n_in - 1) / (n_out - 1) if n_out > 1
               else np.full_like(o, 0.5 * (start + end) * (n_in - 1)))
    elif coord == "half_pixel_symmetric":
        adj = n_out / (scale * n_in)
        center = n_in / 2
        src = center * (1 - adj) + (o + 0.5) / scale - 0.5
    else:  # half_pixel
        src = (o + 0.5) / scale - 0.5
    return src


def _nearest(src, n_in, at):
    """The input sample each output takes in nearest mode, by nearest_mode."""
    nm = at.s("nearest_mode", "round_prefer_floor")
    if nm == "floor":
        idx = np.floor(src)
    elif nm == "ceil":
        idx = np.ceil(src)
    elif nm == "round_prefer_ceil":
        idx = np.floor(src + 0.5)
    else:
        idx = np.ceil(src - 0.5)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _resize_axis(x, ax, n_out, scale, roi, mode, at, ctx):
    """Resample axis `ax` of x to n_out samples (separable: nearest, linear and cubic all are)."""
    n_in = x.shape[ax]
    src = _source_coords(n_in, n_out, scale, roi, at)
    coord = at.s("coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        return I.index_select(x, ax, ctx.const(_nearest(src, n_in, at)))
    if mode in ("linear", "cubic") and at.i("antialias", 0) and scale < 1:
        taps = _antialias_taps(src, n_in, scale, mode, at.f("cubic_coeff_a", -0.75), at.i("exclude_outside", 0))
    elif mode == "linear":
        if coord != "tf_crop_and_resize":
            src = np.clip(src, 0, n_in - 1)
        lo = np.floor(src)
        frac = src - lo
        taps = [(lo, 1 - frac), (lo + 1, frac)]
    else:  # cubic
        a = at.f("cubic_coeff_a", -0.75)
        lo = np.floor(src)
        t = src - lo
        def w(z):
            z = np.abs(z)
            return np.where(z <= 1, (a + 2) * z ** 3 - (a + 3) * z ** 2 + 1,
                            np.where(z < 2, a * z ** 3 - 5 * a * z ** 2 + 8 * a * z - 4 * a, 0.0))
        taps = [(lo + j, w(t - j)) for j in (-1, 0, 1, 2)]
        if at.i("exclude_outside", 0):
            inside = [((i >= 0) & (i <= n_in - 1)) for i, _ in taps]
            total = sum(wt * m for (_, wt), m in zip(taps, inside))
            taps = [(i, wt * m / total) for (i, wt), m in zip(taps, inside)]
    out = None
    shape = [1] * x.ndim
    shape[ax] = n_out
    outside = None
    if coord == "tf_crop_and_resize":
        outside = (src < 0) | (src > n_in - 1)
    for i, wt in taps:
        sel = I.index_select(x, ax, ctx.const(np.clip(i, 0, n_in - 1).astype(np.int64)))
        term = sel * ctx.const(wt.reshape(shape).astype(x.dtype.np))
        out = term if out is None else out + term
    if outside is not None and outside.any():
        keep = ctx.const(~outside.reshape(shape))
        out = E.where(keep, out, out * 0 + at.f("extrapolation_value", 0.0))
    return out


def _antialias_taps(src, n_in, scale, mode, a, exclude_outside):
    """Downsampling with antialias=1: the linear (triangle) or cubic kernel stretched by 1/scale, each
    output's weights normalized to 1; taps past the edges read the edge (as ONNX's reference does)."""
    floor = np.floor(src)
    ratio = np.where(src == floor, 1.0, src - floor)
    if mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        offs = np.arange(start, 2 - start)
        coeffs = np.clip(1 - np.abs((offs[None, :] - ratio[:, None]) * scale), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        offs = np.arange(start, 2 - start)
        z = np.abs(scale * (offs[None, :] - ratio[:, None]))
        coeffs = np.where(z <= 1, (a + 2) * z ** 3 - (a + 3) * z ** 2 + 1,
                          np.where(z < 2, a * z ** 3 - 5 * a * z ** 2 + 8 * a * z - 4 * a, 0.0))
    coeffs = coeffs / coeffs.sum(1, keepdims=True)
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = src + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return [(idx[:, j], coeffs[:, j]) for j in range(n)]


@op("Resize", since=10)
def _resize(ctx, ins, at):
    x = ins[0]
    if ctx.opset < 11:  # Resize-10: (X, scales)
        roi, scales, sizes = None, ins[1], None
    else:
        roi = ins[1] if len(ins) > 1 else None
        scales = ins[2] if len(ins) > 2 else None
        sizes = ins[3] if len(ins) > 3 else None
    mode = at.s("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"ember: {ctx.where}: Resize mode {mode!r}")
    n = x.ndim
    axes = at.ints("axes", list(range(n)))
    axes = [axis(a, n, ctx) for a in axes]
    roi_v = host(roi).astype(np.float64).reshape(-1) if roi is not None and np.prod(roi.shape) else None
    sc = host(scales).astype(np.float64).reshape(-1) if scales is not None and np.prod(scales.shape) else None
    sz = [int(v) for v in host(sizes).reshape(-1)] if sizes is not None and np.prod(sizes.shape) else None
    if sz is not None:
        policy = at.s("keep_aspect_ratio_policy", "stretch")
        in_dims = [x.shape[a] for a in axes]
        if policy != "stretch":
            r = [s / d for s, d in zip(sz, in_dims)]
            ratio = min(r) if policy == "not_larger" else max(r)
            sz = [int(np.floor(d * ratio + 0.5)) for d in in_dims]
            sc = np.array([ratio] * len(axes))
        else:
            sc = np.array([s / d for s, d in zip(sz, in_dims)])
    else:
        sz = [int(np.floor(x.shape[a] * s)) if np.isfinite(s) else -1 for a, s in zip(axes, sc)]
    out = list(x.shape)
    for j, a in enumerate(axes):
        out[a] = sz[j]
    sized(at, "sizes" if sizes is not None else "scales", out, x.dtype.itemsize)
    todo = [(j, a) for j, a in enumerate(axes) if not (
        sz[j] == x.shape[a] and sc[j] == 1.0 and at.s("coordinate_transformation_mode", "") != "tf_crop_and_resize")]
    rois = [(roi_v[j], roi_v[j + len(axes)]) if roi_v is not None and len(roi_v) == 2 * len(axes) else (0.0, 1.0)
            for j in range(len(axes))]
    if mode == "nearest" and x.ndim == 4 and todo and all(a >= 2 for _, a in todo):
        f = _whole_factors(x, todo, sz, sc, rois, at)
        if f is not None:  # every pixel a block (YOLO's neck): the registry's upsample_nearest
            kern = fused_kernel("upsample_nearest", x)
            return prim_fused(kern, x, f) if kern is not None else upsample_nearest_composed(x, f)
    for j, a in todo:
        x = _resize_axis(x, a, sz[j], sc[j], rois[j], mode, at, ctx)
    return x


def _whole_factors(x, todo, sz, sc, rois, at):
    """(fh, fw) where nearest resizing repeats each input row and column a whole number of times (the indices are
    0 0 1 1 ...), else None."""
    f = [1, 1]
    for j, a in todo:
        n_in = x.shape[a]
        f[a - 2] = repeat_factor(_nearest(_source_coords(n_in, sz[j], sc[j], rois[j], at), n_in, at), n_in)
        if f[a - 2] is None:
            return None
    return tuple(f)


@op("Upsample", since=9)
def _upsample(ctx, ins, at):
    x, scales = ins[0], host(ins[1]).astype(np.float64).reshape(-1)
    sized(at, "scales", [int(np.floor(d * s)) if np.isfinite(s) else -1 for d, s in zip(x.shape, scales)],
          x.dtype.itemsize)
    mode = at.s("mode", "nearest")
    for a, s in enumerate(scales):
        n_out = int(np.floor(x.shape[a] * s))
        if n_out != x.shape[a]:
            x = _resize_axis(x, a, n_out, s, None, mode, _Asym(), ctx)
    return x


class _Asym:
    """Upsample's fixed choices, read through Resize's attribute getters."""

    def s(self, name, default=None):
        return {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}.get(name, default)

    def f(self, name, default=None):
        return default

    def i(self, name, default=None):
        return default



@op("RMSNormalization", since=23)
def _rmsnorm(ctx, ins, at):
    x, scale = ins
    ax = axis(at.i("axis", -1), x.ndim, ctx)
    xf = cast(x, D.float32) if x.dtype.itemsize < 4 else x  # stash_type float32
    axes = tuple(range(ax, x.ndim))
    inv = E.rsqrt(R.mean(xf * xf, dim=axes, keepdim=True) + at.f("epsilon", 1e-5))
    return cast(xf * inv, x.dtype) * scale


# ====================================================================== losses

def _nll(ctx, logp, target, weight, at):
    """NegativeLogLikelihoodLoss on (N, C, *d) log-probabilities and (N, *d) class targets."""
    ignore = at.i("ignore_index")
    reduction = at.s("reduction", "mean")
    target = cast(target, D.int64)
    valid = target != ignore if ignore is not None else None
    safe = E.where(valid, target, target * 0) if valid is not None else target
    picked = M.squeeze(I.gather(logp, 1, M.unsqueeze(safe, 1)), 1)  # (N, *d)
    w = I.index_select(weight, 0, M.reshape(safe, -1)).reshape(*safe.shape) if weight is not None else None
    if valid is not None:
        mask = cast(valid, logp.dtype)
        w = mask if w is None else w * mask
    loss = -picked if w is None else -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return R.sum(loss)
    return R.sum(loss) / R.sum(w) if w is not None else R.mean(loss)


@op("NegativeLogLikelihoodLoss", since=12)
def _nll_loss(ctx, ins, at):
    return _nll(ctx, ins[0], ins[1], ins[2] if len(ins) > 2 else None, at)


@op("SoftmaxCrossEntropyLoss", since=12)
def _sce_loss(ctx, ins, at):
    logp = R.log_softmax(ins[0], 1)
    return [_nll(ctx, logp, ins[1], ins[2] if len(ins) > 2 else None, at), logp]


@op("CausalConvWithState", since=27)
def _causal_conv_with_state(ctx, ins, at):
    """Depthwise causal 1-d conv over (B, C, L) with the last k-1 inputs carried as state; optional SiLU."""
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    past = ins[3] if len(ins) > 3 else None
    n, c, _ = x.shape
    k = w.shape[2]
    if past is None:
        padded = prim_pad(x, ((0, 0), (0, 0), (k - 1, 0)), 0.0) if k > 1 else x
    else:
        padded = M.cat([cast(past, x.dtype), x], 2)
    y = conv_nd(padded, w, b, (1,), (0,), (1,), c, 1)
    if at.s("activation", "none") in ("silu", "swish"):
        y = cast(E.silu(cast(y, D.float32)), x.dtype)
    state = M.narrow(padded, 2, padded.shape[2] - (k - 1), k - 1)
    return [y, state]


# ====================================================================== grid sampling

def _reflect(v, lo, hi):
    """Fold coordinates into [lo, hi] by reflecting at the near border (repeatedly)."""
    rng = hi - lo
    below, above = lo - v, v - hi
    d = E.where(below > 0, below, E.where(above > 0, above, v * 0.0))
    n = E.floor(d / rng)
    r = d - n * rng
    even = (n - E.floor(n / 2.0) * 2.0) == 0
    from_below = E.where(even, lo + r, hi - r)
    from_above = E.where(even, hi - r, lo + r)
    return E.where(below > 0, from_below, E.where(above > 0, from_above, v))


def _cubic_weights(t):
    a = -0.75
    def w(x):
        x = E.abs(x)
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return E.where(x <= 1, near, far)
    return [w(t + 1), w(t), w(1 - t), w(2 - t)]


@op("GridSample", since=16)
def _grid_sample(ctx, ins, at):
    """Sample X (N, C, *S) at grid (N, *O, nd) coordinates in [-1, 1] (x first): nearest, (bi/tri)linear
    or bicubic taps, each a gather from the flattened image, with zeros/border/reflection padding."""
    x, grid = ins
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(at.s("mode", "linear"), at.s("mode", "linear"))
    pad = at.s("padding_mode", "zeros")
    align = bool(at.i("align_corners", 0))
    n, c = x.shape[:2]
    sp = list(x.shape[2:])
    nd = len(sp)
    out_sp = list(grid.shape[1:-1])
    work = D.float64 if x.dtype is D.float64 or grid.dtype is D.float64 else D.float32
    g = cast(grid, work)
    taps_per_dim = []
    for d in range(nd):
        size = sp[d]
        v = M.squeeze(M.narrow(g, -1, nd - 1 - d, 1), -1)  # (N, *O)
        v = (v + 1) / 2.0 * (size - 1) if align else ((v + 1) * size - 1) / 2.0
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            v = prim_unary("round", v)
        if pad == "border":
            v = E.clamp(v, 0.0, size - 1.0)
        elif pad == "reflection":
            v = _reflect(v, lo, hi)
        if mode == "nearest":
            taps = [(v, None)]
        else:
            f = E.floor(v)
            t = v - f
            taps = ([(f, 1.0 - t), (f + 1.0, t)] if mode == "linear"
                    else [(f + float(j - 1), wj) for j, wj in enumerate(_cubic_weights(t))])
        dim_taps = []
        for idx, w in taps:
            if pad == "zeros":
                ok = cast(E.logical_and(idx >= 0, idx <= size - 1), work)
                w = ok if w is None else w * ok
            elif pad == "reflection":
                idx = E.trunc(_reflect(idx, lo, hi))
            dim_taps.append((cast(E.clamp(idx, 0.0, size - 1.0), D.int64), w))
        taps_per_dim.append(dim_taps)
    flat_x = M.reshape(x, n, c, -1)
    strides = [int(np.prod(sp[d + 1:])) for d in range(nd)]
    total = None
    for combo in itertools.product(*taps_per_dim):
        flat, weight = None, None
        for (idx, w), st in zip(combo, strides):
            term = idx * st
            flat = term if flat is None else flat + term
            if w is not None:
                weight = w if weight is None else weight * w
        gathered = I.gather(flat_x, 2, M.expand(M.reshape(flat, n, 1, -1), n, c, int(np.prod(out_sp))))
        val = cast(gathered, work)
        if weight is not None:
            val = val * M.reshape(weight, n, 1, -1)
        total = val if total is None else total + val
    return cast(M.reshape(total, n, c, *out_sp), x.dtype)


@op("MaxUnpool", since=9)
def _max_unpool(ctx, ins, at):
    """Each value back at its flat index (as MaxPool's Indices give it) in a zero tensor."""
    x, idx = ins[0], ins[1]
    k = at.ints("kernel_shape")
    n = len(k)
    s, pads = at.ints("strides", [1] * n), at.ints("pads", [0] * (2 * n))
    inferred = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * s[i] - (pads[i] + pads[n + i]) + k[i] for i in range(n)]
    flat = x.new_zeros((int(np.prod(inferred)),))
    y = M.reshape(I.scatter(flat, 0, M.reshape(cast(idx, D.int64), -1), M.reshape(x, -1)), *inferred)
    if len(ins) > 2 and ins[2] is not None:
        want = [int(v) for v in host(ins[2]).reshape(-1)]
        extra = tuple((0, w - h) for w, h in zip(want, inferred))
        if any(e for _, e in extra):
            y = prim_pad(y, extra, 0.0)
    return y


@op("AffineGrid", since=20)
def _affine_grid(ctx, ins, at):
    """theta (N, 2, 3) | (N, 3, 4) applied to the normalized [-1, 1] grid of `size` -> (N, *S, nd)."""
    theta, size = ins[0], [int(v) for v in host(ins[1]).reshape(-1)]
    sp = size[2:]
    sized(at, "size", [theta.shape[0], *sp, len(sp) + 1], 8)  # (the float64 grid made on the host)
    align = at.i("align_corners", 0)
    axes = []
    for dim in sp:
        if align:
            a = np.linspace(-1.0, 1.0, dim) if dim > 1 else np.array([-1.0])
        else:
            a = (np.arange(dim) * 2.0 + 1.0) / dim - 1.0
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial dim (D,) H, W
    homo = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(int(np.prod(sp)))], 1)  # (P, nd+1): x, y, (z), 1
    grid = matmul(ctx.const(homo, theta.dtype.np), M.transpose(theta, 1, 2))  # (N, P, nd)
    return M.reshape(grid, theta.shape[0], *sp, len(sp))


@op("Col2Im", since=18)
def _col2im(ctx, ins, at):
    """Sum each column's entries into the image positions its block covers (the inverse of im2col)."""
    x = ins[0]
    img = [int(v) for v in host(ins[1]).reshape(-1)]
    block = [int(v) for v in host(ins[2]).reshape(-1)]
    n = len(img)
    dil = at.ints("dilations", [1] * n)
    pads = at.ints("pads", [0] * (2 * n))
    st = at.ints("strides", [1] * n)
    padded = [img[i] + pads[i] + pads[n + i] for i in range(n)]
    outs = [(padded[i] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(n)]
    sized(at, "image_shape", [x.shape[0], x.shape[1] // max(int(np.prod(block)), 1), *padded], x.dtype.itemsize)
    sized(at, "block_shape", [int(np.prod(block)), *outs, n], 8)  # (the host index grids)
    kpos = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1).reshape(-1, n)
    lpos = np.stack(np.meshgrid(*[np.arange(o) for o in outs], indexing="ij"), -1).reshape(-1, n)
    coord = kpos[:, None, :] * np.array(dil) + lpos[None, :, :] * np.array(st)  # (K, L, n) in the padded image
    flat = np.ravel_multi_index(tuple(coord[..., i] for i in range(n)), padded)  # (K, L)
    batch, ck, cols = x.shape
    c = ck // int(np.prod(block))
    idx = np.broadcast_to(flat.reshape(1, 1, -1), (batch, c, flat.size))
    acc = x.new_zeros((batch, c, int(np.prod(padded))))
    y = I.scatter_add(acc, 2, ctx.const(np.ascontiguousarray(idx)), M.reshape(x, batch, c, -1))
    y = M.reshape(y, batch, c, *padded)
    key = (slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + img[i]) for i in range(n))
    return y[key]


@op("DeformConv", since=19)
def _deform_conv(ctx, ins, at):
    """2-D deformable convolution: each kernel tap samples the input bilinearly (zeros outside) at its
    grid position plus a learned offset, scaled by the mask; the samples are then one grouped matmul."""
    x, w, offset = ins[:3]
    b = ins[3] if len(ins) > 3 else None
    mask = ins[4] if len(ins) > 4 else None
    if x.ndim != 4:
        raise ValueError(f"ember: {ctx.where}: DeformConv supports 2-D inputs, got {x.shape}")
    n, c, h, wd = x.shape
    o = w.shape[0]
    kh, kw = at.ints("kernel_shape", list(w.shape[2:]))
    sh, sw = at.ints("strides", [1, 1])
    dh, dw = at.ints("dilations", [1, 1])
    pads = at.ints("pads", [0, 0, 0, 0])
    g, og = at.i("group", 1), at.i("offset_group", 1)
    oh, ow = offset.shape[2:]
    off = M.reshape(offset, n, og, kh, kw, 2, oh, ow)
    hb = ctx.const((-pads[0] + sh * np.arange(oh)[None, :] + dh * np.arange(kh)[:, None]).reshape(1, 1, kh, 1, oh, 1),
                   x.dtype.np)
    wb = ctx.const((-pads[1] + sw * np.arange(ow)[None, :] + dw * np.arange(kw)[:, None]).reshape(1, 1, 1, kw, 1, ow),
                   x.dtype.np)
    ph = M.squeeze(M.narrow(off, 4, 0, 1), 4) + hb  # (N, OG, KH, KW, OH, OW)
    pw = M.squeeze(M.narrow(off, 4, 1, 1), 4) + wb
    per = c // og
    flat_x = M.reshape(x, n, c, h * wd)
    cols = None
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = E.floor(ph) + dy, E.floor(pw) + dx
            weight = (1.0 - E.abs(ph - yy)) * (1.0 - E.abs(pw - xx))
            ok = E.logical_and(E.logical_and(yy >= 0, yy <= h - 1), E.logical_and(xx >= 0, xx <= wd - 1))
            weight = weight * cast(ok, x.dtype)
            flat = cast(E.clamp(yy, 0.0, h - 1.0) * wd + E.clamp(xx, 0.0, wd - 1.0), D.int64)
            idx = M.reshape(M.repeat_interleave(flat, per, 1), n, c, -1)       # each channel: its group's
            val = I.gather(flat_x, 2, idx) * M.reshape(M.repeat_interleave(weight, per, 1), n, c, -1)
            cols = val if cols is None else cols + val
    if mask is not None:
        cols = cols * M.reshape(M.repeat_interleave(M.reshape(mask, n, og, kh, kw, oh, ow), per, 1), n, c, -1)
    cols = M.reshape(cols, n, g, (c // g) * kh * kw, oh * ow)
    y = matmul(M.reshape(w, 1, g, o // g, -1), cols)  # (N, g, O/g, P)
    y = M.reshape(y, n, o, oh, ow)
    return y + M.reshape(b, 1, -1, 1, 1) if b is not None else y


def _roi_taps(y, size):
    """RoiAlign's bilinear taps along one axis for sample coordinates y: (low, high, weight_low, weight_high)
    with samples beyond [-1, size] dropped (weights 0) and the last row/column clamped."""
    out = (y < -1.0) | (y > size)
    y = np.maximum(y, 0.0)
    low = np.floor(y).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    y = np.where(edge, low, y)
    frac = y - low
    return low, high, np.where(out, 0.0, 1.0 - frac), np.where(out, 0.0, frac)


@op("RoiAlign", since=10)
def _roi_align(ctx, ins, at):
    """Average or max of bilinear samples over each ROI bin. The sample grid depends on the ROI boxes (read
    on the host, they are few); the samples are gathers from the feature map on its device."""
    x, rois, batch_idx = ins[0], host(ins[1]).astype(np.float64), host(ins[2]).astype(np.int64).reshape(-1)
    n, c, h, w = x.shape
    ph, pw = at.i("output_height", 1), at.i("output_width", 1)
    ratio, scale = at.i("sampling_ratio", 0), at.f("spatial_scale", 1.0)
    half = at.s("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    avg = at.s("mode", "avg") == "avg"
    flat = M.reshape(x, n, c, h * w)
    outs = []
    for r, (box, b) in enumerate(zip(rois, batch_idx)):
        x0, y0, x1, y1 = box * scale - (0.5 if half else 0.0)
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else int(np.ceil(rh / ph))
        gw = ratio if ratio > 0 else int(np.ceil(rw / pw))
        ys = y0 + (np.arange(ph)[:, None] + (np.arange(gh)[None, :] + 0.5) / gh) * (rh / ph)  # (PH, GH)
        xs = x0 + (np.arange(pw)[:, None] + (np.arange(gw)[None, :] + 0.5) / gw) * (rw / pw)  # (PW, GW)
        ylo, yhi, wylo, wyhi = _roi_taps(ys, h)
        xlo, xhi, wxlo, wxhi = _roi_taps(xs, w)
        # a sample off either axis weighs 0: its weights are products of the two axes' weights
        taps = []
        for yi, wy in ((ylo, wylo), (yhi, wyhi)):
            for xi, wx in ((xlo, wxlo), (xhi, wxhi)):
                pos = yi[:, None, :, None] * w + xi[None, :, None, :]   # (PH, PW, GH, GW)
                wt = wy[:, None, :, None] * wx[None, :, None, :]
                taps.append((pos, wt))
        src = flat[int(b)]  # (C, H*W)
        vals = []
        for pos, wt in taps:
            g = I.index_select(src, 1, ctx.const(pos.reshape(-1)))
            vals.append(g * ctx.const(wt.reshape(1, -1), x.dtype.np))
        if avg:
            total = vals[0] + vals[1] + vals[2] + vals[3]
            y = R.sum(M.reshape(total, c, ph, pw, gh * gw), dim=3) / float(max(gh * gw, 1))
        else:
            m = E.maximum(E.maximum(vals[0], vals[1]), E.maximum(vals[2], vals[3]))
            y = R.amax(M.reshape(m, c, ph, pw, gh * gw), dim=3)
        outs.append(y)
    return M.stack(outs, 0) if outs else x.new_zeros((0, c, ph, pw))
