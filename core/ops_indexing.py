"""Indexing: __getitem__/__setitem__, gather/scatter families, one_hot — from slice, reshape,
index_select, gather and scatter primitives."""
from __future__ import annotations

import numbers

import numpy as np

from . import autograd as A
from .autograd import TensorBase  # (isinstance checks: tensor.Tensor subclasses it)
from . import dtypes as D
from .ops_movement import norm_dim


def _check_index(idx, size, what, negative):
    """The smallest index (None where there is none), after checking every one is in range."""
    d = idx._data
    if d.__class__ is np.ndarray:  # host indices: numpy's own min and max, no tensor reductions
        if not d.size:
            return None
        lo, hi = int(d.min()), int(d.max())
    else:
        if idx.numel() == 0:
            return None
        lo, hi = int(idx.min().item()), int(idx.max().item())
    if lo < (-size if negative else 0) or hi >= size:
        bad = hi if hi >= size else lo
        valid = f"[{-size}, {size - 1}]" if negative else f"[0, {size - 1}]"
        raise IndexError(f"ember: {what}: index {bad} is out of bounds for size {size} (valid: {valid})")
    return lo


def _long_index(idx, size, what, device=None, negative=False):
    """Validate indices into a dimension of `size`; returns an int64 tensor (on `device`: like torch, index
    tensors may live on the CPU while the indexed tensor is on a GPU). With `negative` (indexing,
    take_along_dim, index_fill), -1 means the last element, as in torch; elsewhere (index_select,
    gather, scatter, index_add, embedding) torch refuses negative indices, and so does ember."""
    if device is not None and idx.device != device:
        # check (and wrap) on the index's own device, then move it: a host index for a GPU tensor
        # costs the GPU no readback (a decode step feeds its token this way)
        return _long_index(idx, size, what, negative=negative).to(device)
    if idx.dtype is D.bool_:
        raise IndexError(f"ember: {what}: boolean index used where integer indices are expected")
    if idx.dtype.is_float:
        raise IndexError(f"ember: {what}: indices must be integers, got {idx.dtype}")
    idx = A.prim_cast(idx, D.int64)
    lo = _check_index(idx, size, what, negative)
    if negative and lo is not None and lo < 0:
        idx = A.prim_where(idx < 0, idx + size, idx)
    return idx


def index_select(x, dim, index, what="index_select"):
    d = norm_dim(dim, x.ndim)
    if index.ndim > 1:
        raise IndexError(f"ember: {what}: index must be 1-D, got shape {index.shape}")
    index = _long_index(index.reshape(-1), x.shape[d], what, x.device)
    return A.prim_index_select(x, d, index)


def gather(x, dim, index):
    return _gather(x, dim, index, "gather", negative=False)


def _gather(x, dim, index, what, negative):
    d = norm_dim(dim, x.ndim)
    if index.ndim != x.ndim:
        raise ValueError(f"ember: {what} index has {index.ndim} dims, input has {x.ndim}")
    for i, (a, b) in enumerate(zip(index.shape, x.shape)):
        if i != d and a > b:
            raise ValueError(f"ember: {what} index shape {index.shape} exceeds input shape {x.shape} at dim {i}")
    index = _long_index(index, x.shape[d], what, x.device, negative)
    if any(i != d and a != b for i, (a, b) in enumerate(zip(index.shape, x.shape))):
        x = A.prim_slice(x, [0] * x.ndim, [b if i == d else a for i, (a, b) in enumerate(zip(index.shape, x.shape))],
                         [1] * x.ndim)
    return A.prim_gather(x, d, index)


def take_along_dim(x, indices, dim):
    d = norm_dim(dim, x.ndim)
    indices = indices.expand(*[s if i == d else max(s, t) for i, (s, t) in enumerate(zip(indices.shape, x.shape))])
    return _gather(x, dim, indices, "take_along_dim", negative=True)


def _scatter(x, dim, index, src, reduce):
    d = norm_dim(dim, x.ndim)
    index = _long_index(index, x.shape[d], "scatter", x.device)
    if not isinstance(src, TensorBase):
        src = x.new_full(index.shape, src)
    elif src.device != x.device:
        raise ValueError(f"ember: scatter: src on {src.device}, input on {x.device}")
    src = A.prim_cast(src, x.dtype)
    if src.shape != index.shape:
        src = A.prim_slice(src, [0] * src.ndim, list(index.shape), [1] * src.ndim)
    return A.prim_scatter(x, d, index, src, reduce)


def scatter(x, dim, index, src=None, value=None, reduce=None):
    if reduce not in (None, "add", "sum"):
        raise ValueError(f"ember: scatter reduce {reduce!r} is not supported (None or 'add')")
    return _scatter(x, dim, index, src if src is not None else value, "add" if reduce else None)


def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


def index_add(x, dim, index, source, alpha=1):
    d = norm_dim(dim, x.ndim)
    index = _long_index(index, x.shape[d], "index_add", x.device)
    shape = [1] * source.ndim
    shape[d] = index.shape[0]
    full_idx = A.prim_expand(A.prim_reshape(index, shape), source.shape)
    return A.prim_scatter(x, d, full_idx, A.prim_cast(source * alpha if alpha != 1 else source, x.dtype), "add")


def index_fill(x, dim, index, value):
    d = norm_dim(dim, x.ndim)
    index = _long_index(index, x.shape[d], "index_fill", x.device, negative=True)
    shape = [1] * x.ndim
    shape[d] = index.shape[0]
    tgt = list(x.shape)
    tgt[d] = index.shape[0]
    full_idx = A.prim_expand(A.prim_reshape(index, shape), tgt)
    return A.prim_scatter(x, d, full_idx, x.new_full(tgt, value), None)


def one_hot(t, num_classes=-1):
    if t.dtype.is_float:
        raise TypeError("ember: one_hot needs an integer tensor")
    if num_classes < 0:
        num_classes = int(t.max().item()) + 1
    _check_index(t, num_classes, "one_hot", negative=False)
    from .tensor import arange
    return (t.unsqueeze(-1) == arange(num_classes, device=t.device)).long()


def nonzero(x, as_tuple=False):
    idx = np.argwhere(x.numpy() != 0).astype(np.int64)  # data-dependent shape: a host sync, as torch
    from .tensor import tensor
    if as_tuple:
        return tuple(tensor(idx[:, i], device=x.device) for i in range(x.ndim))
    return tensor(idx.reshape(-1, x.ndim), device=x.device)


def masked_select(x, mask):
    from .ops_movement import broadcast_shapes
    shp = broadcast_shapes(x.shape, mask.shape)
    x, mask = x.expand(*shp), mask.expand(*shp)
    return getitem(x.reshape(-1), nonzero(mask.reshape(-1)).reshape(-1))


# ================================================================= __getitem__

def _expand_key(x, key):
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis
                 and not (isinstance(k, TensorBase) and k.dtype is D.bool_))
    n_real += sum(k.ndim for k in key if isinstance(k, TensorBase) and k.dtype is D.bool_)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("ember: an index can only have a single ellipsis")
    if n_real > x.ndim:
        raise IndexError(f"ember: too many indices ({n_real}) for a tensor with {x.ndim} dims")
    out = []
    for k in key:
        if k is Ellipsis:
            out += [slice(None)] * (x.ndim - n_real)
        else:
            out.append(k)
    out += [slice(None)] * (x.ndim - sum(1 for k in out if k is not None) - sum(
        k.ndim - 1 for k in out if isinstance(k, TensorBase) and k.dtype is D.bool_))
    return out


def _basic_getitem(x, key):
    """Ints and slices only: one slice primitive plus a reshape that drops the int dims."""
    shape = x.shape
    if len(key) > len(shape):
        raise IndexError(f"ember: too many indices ({len(key)}) for a tensor with {len(shape)} dims")
    starts, stops, steps, out = [], [], [], []
    for d, k in enumerate(key):
        n = shape[d]
        if k.__class__ is int:
            if not -n <= k < n:
                raise IndexError(f"ember: index {k} is out of bounds for dim {d} with size {n}")
            k %= n
            starts.append(k), stops.append(k + 1), steps.append(1)
        else:
            s, e, st = k.indices(n)
            if st <= 0:
                raise ValueError("ember: slice step must be positive (use flip for reversal), as torch")
            e = max(e, s)
            starts.append(s), stops.append(e), steps.append(st)
            out.append(-(-(e - s) // st))
    for n in shape[len(key):]:
        starts.append(0), stops.append(n), steps.append(1)
        out.append(n)
    if starts.count(0) != len(starts) or stops != list(shape) or steps.count(1) != len(steps):
        x = A.prim_slice(x, starts, stops, steps)
    return A.prim_reshape(x, tuple(out))


def _host_basic(x, key):
    """x[key] for ints and slices of positive step on a host (numpy) array recording no gradient: numpy's view
    (the same view the slice and reshape primitives make), or None where the full path must check or record."""
    d = x._data
    if d.__class__ is not np.ndarray or A._GRAD[0] and x.requires_grad:
        return None
    shape, at, ellipsis = d.shape, 0, False
    for k in key:
        if k.__class__ is int:
            if at >= len(shape) or not -shape[at] <= k < shape[at]:
                return None
        elif k is Ellipsis and not ellipsis:  # x[..., :n]: the keys after it index the last dims
            ellipsis, at = True, len(shape) - (len(key) - 1 - at) - 1
            if at < -1:
                return None
        elif k.__class__ is not slice or k.step is not None and (k.step.__class__ is not int or k.step <= 0) \
                or at >= len(shape):
            return None
        at += 1
    return x._new(d[key] if ellipsis else d[key + (Ellipsis,)])


def getitem(x, key):
    kc = key.__class__
    if kc is int or kc is slice:
        out = _host_basic(x, (key,))
        if out is not None:
            return out
    elif kc is tuple:
        out = _host_basic(x, key)
        if out is not None:
            return out
    if kc is int or kc is slice:
        return _basic_getitem(x, (key,))
    if kc is tuple:
        if all(k.__class__ is int or k.__class__ is slice for k in key):
            return _basic_getitem(x, key)
        if all(k.__class__ is int or k.__class__ is slice or k is Ellipsis for k in key) and \
                sum(k is Ellipsis for k in key) == 1:  # (identity tests: == on a Tensor is elementwise)
            i = next(j for j, k in enumerate(key) if k is Ellipsis)  # x[..., :n]: expand into full slices
            fill = len(x.shape) - (len(key) - 1)
            if fill >= 0:
                return _basic_getitem(x, key[:i] + (slice(None),) * fill + key[i + 1:])
    from .tensor import tensor
    key = _expand_key(x, key)
    # 1) basic indexing: slices, ints, None -> one slice + reshape; collect advanced indices
    starts, stops, steps = [], [], []
    adv = []  # (position in result-before-adv dims, index tensor)
    dim = 0
    kept = []  # result dims: ('dim', source dim) or ('new',)
    for k in key:
        if k is None:
            kept.append(None)
            continue
        if isinstance(k, (list, np.ndarray)) or (isinstance(k, TensorBase)):
            k = k if isinstance(k, TensorBase) else tensor(np.asarray(k), device=x.device)
            if k.dtype is D.bool_:
                if k.shape != x.shape[dim:dim + k.ndim]:
                    raise IndexError(f"ember: boolean index of shape {k.shape} does not match indexed shape "
                                     f"{x.shape[dim:dim + k.ndim]} at dim {dim}")
                nz = nonzero(k, as_tuple=True)
                for j, t in enumerate(nz):
                    starts.append(0)
                    stops.append(x.shape[dim])
                    steps.append(1)
                    adv.append((len(kept), t, x.shape[dim]))
                    kept.append(("adv", dim))
                    dim += 1
                continue
            starts.append(0)
            stops.append(x.shape[dim])
            steps.append(1)
            adv.append((len(kept), k, x.shape[dim]))
            kept.append(("adv", dim))
            dim += 1
            continue
        size = x.shape[dim]
        if isinstance(k, slice):
            s, e, st = k.indices(size)
            if st <= 0:
                raise ValueError("ember: slice step must be positive (use flip for reversal), as torch")
            starts.append(s)
            stops.append(max(e, s))
            steps.append(st)
            kept.append(("dim", dim))
        elif isinstance(k, numbers.Integral) or (isinstance(k, TensorBase) and k.ndim == 0):
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"ember: index {i} is out of bounds for dim {dim} with size {size}")
            i %= size
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:
            raise IndexError(f"ember: unsupported index type {type(k).__name__}")
        dim += 1
    y = x
    if any(s != 0 for s in starts) or any(e != sz for e, sz in zip(stops, x.shape)) or any(st != 1 for st in steps):
        y = A.prim_slice(x, starts, stops, steps)
    shp = []
    for kk in kept:
        if kk is None:
            shp.append(1)
        else:
            shp.append(y.shape[kk[1]])
    y = A.prim_reshape(y, tuple(shp))
    if not adv:
        return y
    return _advanced(y, adv)


def _advanced(y, adv):
    """y has one dim per kept entry; adv: [(dim in y, index tensor, size)]."""
    from .ops_movement import broadcast_shapes
    pos = [p for p, _, _ in adv]
    idxs = [_long_index(t, size, "index", y.device, negative=True) for _, t, size in adv]
    bshape = broadcast_shapes(*[t.shape for t in idxs])
    idxs = [t.expand(*bshape) for t in idxs]
    adjacent = pos == list(range(pos[0], pos[0] + len(pos)))
    if not adjacent:  # torch/numpy: the advanced dims go first
        rest = [i for i in range(y.ndim) if i not in pos]
        y = y.permute(*(pos + rest))
        pos = list(range(len(pos)))
    p0 = pos[0]
    sizes = [y.shape[p] for p in pos]
    # flatten the indexed dims into one and compute the linear index
    lin = idxs[0]
    for t, s in zip(idxs[1:], sizes[1:]):
        lin = lin * s + t
    total = 1
    for s in sizes:
        total *= s
    y = A.prim_reshape(y, y.shape[:p0] + (total,) + y.shape[p0 + len(pos):])
    out = A.prim_index_select(y, p0, A.prim_reshape(lin, (lin.numel(),)))
    return A.prim_reshape(out, y.shape[:p0] + bshape + y.shape[p0 + 1:])


def copy_into(dst, src, starts):
    """dst[s0:s0 + src.shape[0], s1:s1 + src.shape[1], ...] = src, in place; returns dst. The backend's
    copy_into writes dst's buffer where it can (cpu, cuda, webgpu: views of dst then see the write, as
    after torch's `dst.narrow(...).copy_(src)`); otherwise, and while recording gradients, it is the
    composed `dst[slices] = src`. A preallocated KV cache writes each new token's row this way."""
    starts = tuple(int(a) for a in starts)
    if src.ndim != dst.ndim or len(starts) != dst.ndim:
        raise ValueError(f"ember: copy_into: src of shape {src.shape} and starts {starts} must match the "
                         f"{dst.ndim} dims of dst {dst.shape}")
    for d, (a, n, size) in enumerate(zip(starts, src.shape, dst.shape)):
        if a < 0 or a + n > size:
            raise IndexError(f"ember: copy_into: src of shape {src.shape} at starts {starts} does not fit dst "
                             f"of shape {dst.shape} (dim {d}: {a} + {n} > {size})")
    if src.device != dst.device:
        raise ValueError(f"ember: copy_into: src is on {src.device}, dst on {dst.device}")
    src = A.prim_cast(src, dst.dtype)
    f = A.fused_kernel("copy_into", dst, src)
    if f is None:
        return copy_into_composed(dst, src, starts)
    if src.numel():
        dst._data = f(dst._data, src._data, starts)  # no graph: the kernel runs only without gradients
    return dst


def copy_into_composed(dst, src, starts):
    """dst[slices] = src as a scatter into a copy that replaces dst's data: the kernels' reference (and the path
    that records gradients)."""
    setitem(dst, tuple(slice(a, a + n) for a, n in zip(starts, src.shape)), src)
    return dst


def setitem(x, key, value):
    """x[key] = value, written as a scatter into a copy that then replaces x's data."""
    from .tensor import arange, tensor
    if x.requires_grad and x._ctx is None and A.is_grad_enabled():
        raise RuntimeError("ember: in-place assignment to a leaf tensor that requires grad")
    n = x.numel()
    pos = getitem(arange(n, device=x.device).reshape(*x.shape), key)  # flat positions selected
    if not isinstance(value, TensorBase):
        value = tensor(value, dtype=x.dtype, device=x.device)
    value = A.prim_cast(value, x.dtype).expand(*pos.shape)
    flat = A.prim_reshape(A.snapshot(x), (n,))
    out = A.prim_scatter(flat, 0, A.prim_reshape(pos, (pos.numel(),)),
                         A.prim_reshape(value.contiguous(), (pos.numel(),)), None)
    A.rebind(x, A.prim_reshape(out, x.shape))
