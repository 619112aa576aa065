"""Movement ops composed from reshape/permute/expand/slice/pad/cat (torch names and semantics)."""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import autograd as A


def norm_dim(d, ndim, what="dim"):
    if d.__class__ is int:
        if 0 <= d < ndim:
            return d
        if -ndim <= d < 0:
            return d + ndim
    if not isinstance(d, numbers.Integral):
        raise TypeError(f"ember: {what} must be an int, got {type(d).__name__}")
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"ember: {what} {d} out of range for a tensor with {ndim} dims")
    return d + n if d < 0 else d


def _size_args(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


_INTS = {int}  # (sizes all Python ints: a set of their types, no per-size Python frame)


def reshape(x, *shape):
    d = x._data
    if d.__class__ is np.ndarray and not (A._GRAD[0] and x.requires_grad) and set(map(type, shape)) == _INTS:
        try:  # a host array recording no gradient: numpy's reshape is the primitive's (a view where it can be)
            return x._new(d.reshape(shape))
        except ValueError:
            pass  # (the checks below name the shapes)
    shape = list(_size_args(shape))
    n = x.numel()
    if shape.count(-1) > 1:
        raise ValueError("ember: reshape: only one dimension can be -1")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or n % known:
            raise ValueError(f"ember: cannot reshape tensor of shape {x.shape} into {tuple(shape)}")
        shape[shape.index(-1)] = n // known
    if math.prod(shape) != n:
        raise ValueError(f"ember: cannot reshape tensor of shape {x.shape} ({n} elements) into {tuple(shape)}")
    return A.prim_reshape(x, shape)


def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = norm_dim(start_dim, x.ndim), norm_dim(end_dim, x.ndim)
    shp = x.shape
    return A.prim_reshape(x, shp[:s] + (math.prod(shp[s:e + 1]),) + shp[e + 1:])


def unflatten(x, dim, sizes):
    d = norm_dim(dim, x.ndim)
    return reshape(x, *(x.shape[:d] + tuple(sizes) + x.shape[d + 1:]))


def permute(x, *dims):
    d = x._data
    if d.__class__ is np.ndarray and len(dims) == d.ndim > 1 and not (A._GRAD[0] and x.requires_grad):
        try:  # a host array recording no gradient: numpy's transpose is the primitive's (it checks the order)
            return x._new(d.transpose(dims))
        except (ValueError, TypeError):
            pass  # (the checks below name the dims)
    dims = _size_args(dims)
    if len(dims) != x.ndim:
        raise ValueError(f"ember: permute needs {x.ndim} dims, got {dims}")
    dims = tuple(norm_dim(d, x.ndim) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"ember: permute dims {dims} are not a permutation")
    if dims == tuple(range(x.ndim)):
        return x
    return A.prim_permute(x, dims)


def transpose(x, d0, d1):
    d = x._data
    if d.__class__ is np.ndarray and d.ndim >= 2 and d0.__class__ is int and d1.__class__ is int and \
            -d.ndim <= d0 < d.ndim and -d.ndim <= d1 < d.ndim and not (A._GRAD[0] and x.requires_grad):
        return x._new(d.swapaxes(d0, d1))
    if x.ndim < 2 and d0 in (0, -1) and d1 in (0, -1):
        return x
    d0, d1 = norm_dim(d0, x.ndim), norm_dim(d1, x.ndim)
    if d0 == d1:
        return x
    order = list(range(x.ndim))
    order[d0], order[d1] = order[d1], order[d0]
    return A.prim_permute(x, order)


def t(x):
    return x if x.ndim < 2 else transpose(x, 0, 1)


def unsqueeze(x, dim):
    d = norm_dim(dim, x.ndim + 1)
    s = x.shape
    return A.prim_reshape(x, s[:d] + (1,) + s[d:])


def squeeze(x, dim=None):
    s = x.shape
    if dim is None:
        return A.prim_reshape(x, tuple(v for v in s if v != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    dims = {norm_dim(d, x.ndim) for d in dims}
    return A.prim_reshape(x, tuple(v for i, v in enumerate(s) if not (i in dims and v == 1)))


def expand(x, *shape):
    shape = _size_args(shape)
    if len(shape) < x.ndim:
        raise ValueError(f"ember: expand to {shape} has fewer dims than the tensor's {x.shape}")
    lead = len(shape) - x.ndim
    out = []
    for i, s in enumerate(shape):
        if i < lead:
            if s < 0:
                raise ValueError(f"ember: expand: -1 not allowed for new leading dim in {shape}")
            out.append(s)
            continue
        cur = x.shape[i - lead]
        if s == -1 or s == cur:
            out.append(cur)
        elif cur == 1:
            out.append(s)
        else:
            raise ValueError(f"ember: cannot expand shape {x.shape} to {shape}")
    return A.prim_expand(x, out)


def expand_as(x, other):
    return expand(x, other.shape)


def broadcast_shapes(*shapes):
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, v in enumerate(s):
            j = nd - len(s) + i
            if out[j] == 1:
                out[j] = v
            elif v != 1 and v != out[j]:
                raise ValueError(f"ember: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast")
    return tuple(out)


def broadcast_to(x, shape):
    return expand(x, shape)


_ALL = slice(None)


def narrow(x, dim, start, length):
    a = x._data
    if a.__class__ is np.ndarray and dim.__class__ is int and start.__class__ is int and length.__class__ is int \
            and -a.ndim <= dim < a.ndim and not (A._GRAD[0] and x.requires_grad):
        dm = dim % a.ndim  # a host array recording no gradient: numpy's basic slice is the primitive's (a view)
        n = a.shape[dm]
        s = start + n if start < 0 else start
        if 0 <= s <= n and 0 <= length and s + length <= n:
            return x._new(a[(_ALL,) * dm + (slice(s, s + length),)])
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    if start < 0:
        start += n
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise IndexError(f"ember: narrow({dim}, {start}, {length}) out of range for size {n}")
    starts, stops, steps = [0] * x.ndim, list(x.shape), [1] * x.ndim
    starts[d], stops[d] = start, start + length
    return A.prim_slice(x, starts, stops, steps)


def chunk(x, chunks, dim=0):
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    size = -(-n // chunks) if chunks > 0 else 0
    if size == 0:
        return [x]
    return [narrow(x, d, s, min(size, n - s)) for s in range(0, n, size)]


def split(x, split_size_or_sections, dim=0):
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(split_size_or_sections, numbers.Integral):
        s = int(split_size_or_sections)
        return [narrow(x, d, o, min(s, n - o)) for o in range(0, n, s)] or [x]
    sizes = list(split_size_or_sections)
    if sum(sizes) != n:
        raise ValueError(f"ember: split sizes {sizes} do not sum to dim size {n}")
    out, o = [], 0
    for s in sizes:
        out.append(narrow(x, d, o, s))
        o += s
    return out


def unbind(x, dim=0):
    d = norm_dim(dim, x.ndim)
    return [squeeze(narrow(x, d, i, 1), d) for i in range(x.shape[d])]


def cat(tensors, dim=0):
    if tensors.__class__ in (list, tuple) and len(tensors) == 2:  # hot path (KV-cache appends)
        a, b = tensors
        ad, bd = a._data, b._data
        if ad.__class__ is np.ndarray and bd.__class__ is np.ndarray and ad.dtype is bd.dtype and ad.ndim == bd.ndim \
                and dim.__class__ is int and -ad.ndim <= dim < ad.ndim and a.device is b.device and \
                not (A._GRAD[0] and (a.requires_grad or b.requires_grad)):
            d = dim % ad.ndim
            if ad.shape[:d] == bd.shape[:d] and ad.shape[d + 1:] == bd.shape[d + 1:]:  # host arrays: the primitive
                return a._new(a.device._backend.cat([ad, bd], d))
        sa, sb = a.shape, b.shape
        if a.dtype is b.dtype and a.device is b.device and len(sa) == len(sb) and sa and sb:
            d = norm_dim(dim, len(sa))
            if sa[:d] == sb[:d] and sa[d + 1:] == sb[d + 1:]:
                return A.prim_cat([a, b], d)
    tensors = [t for t in tensors]
    if not tensors:
        raise ValueError("ember: cat() needs at least one tensor")
    # torch skips legacy empty 1-D tensors of shape (0,)
    ts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    ref = ts[0]
    d = norm_dim(dim, ref.ndim)
    dt = ref.dtype
    for t in ts[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape)) if i != d):
            raise ValueError(f"ember: cat: shapes {ref.shape} and {t.shape} differ outside dim {d}")
        if t.device != ref.device:
            raise ValueError(f"ember: cat: tensors on different devices ({ref.device} and {t.device})")
        if t.dtype is not dt:
            from .dtypes import promote
            dt = promote(dt, t.dtype)
    ts = [A.prim_cast(t, dt) for t in ts]
    return ts[0] if len(ts) == 1 else A.prim_cat(ts, d)


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("ember: stack() needs at least one tensor")
    s = tensors[0].shape
    for t in tensors:
        if t.shape != s:
            raise ValueError(f"ember: stack expects tensors of equal shape, got {s} and {t.shape}")
    d = norm_dim(dim, len(s) + 1)
    return cat([unsqueeze(t, d) for t in tensors], d)


def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([t if t.ndim > 1 else unsqueeze(t, 0) for t in tensors], 0)


def flip(x, *dims):
    dims = _size_args(dims)
    dims = {norm_dim(d, x.ndim) for d in dims}
    if not dims:
        return x
    starts = [s - 1 if i in dims else 0 for i, s in enumerate(x.shape)]
    stops = [-1 if i in dims else s for i, s in enumerate(x.shape)]
    steps = [-1 if i in dims else 1 for i in range(x.ndim)]
    return A.prim_slice(x, starts, stops, steps)


def roll(x, shifts, dims=None):
    if dims is None:
        return reshape(roll(flatten(x), shifts, 0), *x.shape)
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    for s, d in zip(shifts, dims):
        d = norm_dim(d, x.ndim)
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = cat([narrow(x, d, n - s, s), narrow(x, d, 0, n - s)], d)
    return x


def repeat(x, *sizes):
    sizes = _size_args(sizes)
    if len(sizes) < x.ndim:
        raise ValueError(f"ember: repeat needs at least {x.ndim} sizes, got {sizes}")
    x = reshape(x, *((1,) * (len(sizes) - x.ndim) + x.shape))
    # (a, b) -> (1, a, 1, b) -> expand (ra, a, rb, b) -> (ra*a, rb*b)
    inter = []
    for s in x.shape:
        inter += [1, s]
    y = A.prim_reshape(x, inter)
    exp = []
    for r, s in zip(sizes, x.shape):
        exp += [r, s]
    y = A.prim_expand(y, exp)
    return A.prim_reshape(A.prim_contiguous(y), tuple(r * s for r, s in zip(sizes, x.shape)))


def repeat_interleave(x, repeats, dim=None):
    if dim is None:
        x, dim = flatten(x), 0
    d = norm_dim(dim, x.ndim)
    y = unsqueeze(x, d + 1)
    shp = list(y.shape)
    shp[d + 1] = repeats
    y = A.prim_expand(y, shp)
    out = list(x.shape)
    out[d] *= repeats
    return A.prim_reshape(A.prim_contiguous(y), out)


def _tri_mask(x, diagonal, upper):
    from .tensor import arange
    r, c = x.shape[-2], x.shape[-1]
    i = reshape(arange(r, device=x.device), r, 1)
    j = reshape(arange(c, device=x.device), 1, c)
    return (j - i >= diagonal) if upper else (j - i <= diagonal)


def tril(x, diagonal=0):
    return x.where(_tri_mask(x, diagonal, False), x.new_zeros(()))


def triu(x, diagonal=0):
    return x.where(_tri_mask(x, diagonal, True), x.new_zeros(()))


def movedim(x, source, destination):
    s, d = norm_dim(source, x.ndim), norm_dim(destination, x.ndim)
    order = [i for i in range(x.ndim) if i != s]
    order.insert(d, s)
    return permute(x, *order)


def unfold(x, dimension, size, step):
    """torch.Tensor.unfold: sliding windows of `size` along `dimension`, appended as the last dim."""
    d = norm_dim(dimension, x.ndim)
    n = (x.shape[d] - size) // step + 1
    parts = [unsqueeze(A.prim_slice(x, [0] * d + [k] + [0] * (x.ndim - d - 1),
                                     list(x.shape[:d]) + [k + step * (n - 1) + 1] + list(x.shape[d + 1:]),
                                     [1] * d + [step] + [1] * (x.ndim - d - 1)), -1) for k in range(size)]
    return cat(parts, -1)
