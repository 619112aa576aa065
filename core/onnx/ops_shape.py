"""ONNX shape, movement, indexing and creation operators on ember Tensors.

Shape-like inputs (shape, axes, starts, pads, repeats) are read on the host: they are small and
decide the output's shape, which every backend needs before it can run.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_indexing as I
from .. import ops_movement as M
from .. import ops_reduce as R
from ..autograd import prim_index_select, prim_pad
from ..device import CPU
from ..tensor import tensor
from .guard import sized
from .wire import OnnxFormatError
from .registry import op
from .values import axis, cast, host, host_ints

# ====================================================================== shape

@op("Shape")
def _shape(ctx, ins, at):
    dims = list(ins[0].shape)
    n = len(dims)
    start, end = at.i("start", 0), at.i("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return ctx.const(np.array(dims[start:end], np.int64))


@op("Size")
def _size(ctx, ins, at):
    return ctx.const(np.array(int(np.prod(ins[0].shape)), np.int64).reshape(()))


def _reshape_to(x, shape, allowzero, ctx):
    out = []
    for i, d in enumerate(shape):
        out.append(x.shape[i] if d == 0 and not allowzero else d)
    if out.count(-1) > 1:
        raise ValueError(f"ember: {ctx.where}: Reshape to {shape}: at most one -1")
    return M.reshape(x, *out)


@op("Reshape", since=1)
def _reshape_attr(ctx, ins, at):
    return _reshape_to(ins[0], at.ints("shape", []), 0, ctx)


@op("Reshape", since=5)
def _reshape(ctx, ins, at):
    shape = _same_inputs(at, ins)  # (the same shape tensor on the same input shape as the last run: its target)
    if shape is None:
        shape = _keep(at, ins, _reshape_to(ins[0], host_ints(ins[1]), at.i("allowzero", 0), ctx).shape)
    return M.reshape(ins[0], *shape)


@op("Flatten")
def _flatten(ctx, ins, at):
    x = ins[0]
    a = at.i("axis", 1)
    a = a + x.ndim if a < 0 else a
    outer = int(np.prod(x.shape[:a]))
    return M.reshape(x, outer, int(np.prod(x.shape[a:])))


@op("Transpose")
def _transpose(ctx, ins, at):
    x = ins[0]
    perm = at.memo.get(("perm", x.ndim))
    if perm is None:  # (checked once per node and rank)
        perm = tuple(at.ints("perm", list(range(x.ndim))[::-1]))
        M.permute(x, *perm)
        at.memo[("perm", x.ndim)] = perm
    return M.permute(x, *perm)


def _squeeze(x, axes, ctx):
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = sorted({axis(a, x.ndim, ctx) for a in axes})
    shape = [d for i, d in enumerate(x.shape) if i not in axes]
    return M.reshape(x, *shape)


def _unsqueeze(x, axes, ctx):
    n = x.ndim + len(axes)
    axes = sorted(axis(a, n, ctx) for a in axes)
    shape, it = [], iter(x.shape)
    for i in range(n):
        shape.append(1 if i in axes else next(it))
    return M.reshape(x, *shape)


def _same_inputs(at, ins):
    """What this node's operator kept from its last run (_keep) when x (ins[0]) has the same shape and its other
    inputs (read on the host: axes, starts, indices ...) are the very tensors it read then (constants, or a
    host step's cached value: every run of a streaming model), else None."""
    m = at.memo.get("same")
    if m is None or m[0] != ins[0].shape:
        return None
    kept = m[1]
    if len(kept) != len(ins) - 1:
        return None
    for i, a in enumerate(kept, 1):
        if a is not ins[i]:
            return None
    return m[2]


def _keep(at, ins, value):
    at.memo["same"] = (ins[0].shape, tuple(ins[1:]), value)  # (one entry per node: the last run's)
    return value


def _squeeze13(ctx, ins, at):
    x = ins[0]
    shape = _same_inputs(at, ins)
    if shape is None:
        axes = host_ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None
        shape = _keep(at, ins, _squeeze(x, axes, ctx).shape)
    return M.reshape(x, *shape)


def _unsqueeze13(ctx, ins, at):
    x = ins[0]
    shape = _same_inputs(at, ins)
    if shape is None:
        shape = _keep(at, ins, _unsqueeze(x, host_ints(ins[1]), ctx).shape)
    return M.reshape(x, *shape)


op("Squeeze", since=1)(lambda ctx, ins, at: _squeeze(ins[0], at.ints("axes"), ctx))
op("Squeeze", since=13)(_squeeze13)
op("Unsqueeze", since=1)(lambda ctx, ins, at: _unsqueeze(ins[0], at.ints("axes"), ctx))
op("Unsqueeze", since=13)(_unsqueeze13)


@op("Concat", since=4)
def _concat(ctx, ins, at):
    if len(ins) == 2 and ins[0] is not None and ins[1] is not None:  # (two inputs, neither empty: most Concats)
        ax = axis(at.i("axis"), ins[0].ndim, ctx)
        if ins[0].shape[ax] and ins[1].shape[ax]:
            return M.cat(ins, ax)
    xs = [x for x in ins if x is not None]
    ax = axis(at.i("axis"), xs[0].ndim, ctx)
    xs = [x for x in xs if x.shape[ax] != 0] or xs[:1]
    return M.cat(xs, ax) if len(xs) > 1 else xs[0]


def _split(x, ax, sizes, n_out):
    if sizes is None:
        d = x.shape[ax]
        chunk = -(-d // n_out)
        sizes = [min(chunk, d - i * chunk) for i in range(n_out)]
    outs, start = [], 0
    for s in sizes:
        outs.append(M.narrow(x, ax, start, s))
        start += s
    return outs


@op("Split", since=2)
def _split_attr(ctx, ins, at):
    x = ins[0]
    return _split(x, axis(at.i("axis", 0), x.ndim, ctx), at.ints("split"), len(ctx_outputs(at)))


@op("Split", since=13)
def _split_in(ctx, ins, at):
    x = ins[0]
    sizes = host_ints(ins[1]) if len(ins) > 1 and ins[1] is not None else None
    n = at.i("num_outputs", len(ctx_outputs(at)))
    return _split(x, axis(at.i("axis", 0), x.ndim, ctx), sizes, n)


def ctx_outputs(at):
    return at.node.output


def _slice(x, starts, ends, axes, steps, ctx):
    flips, key = _slice_key(x, starts, ends, axes, steps, ctx)
    if flips:
        x = M.flip(x, *flips)
    return x[key]


def _slice_key(x, starts, ends, axes, steps, ctx):
    """(axes to flip first, the basic index that slices the flipped x)."""
    axes = list(range(len(starts))) if axes is None else [axis(a, x.ndim, ctx) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    key = [slice(None)] * x.ndim
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        n = x.shape[a]
        if st == 0:
            raise ValueError(f"ember: {ctx.where}: Slice step 0 on axis {a}")
        s, e, st = slice(s, e, st).indices(n)
        if st < 0:  # walk the flipped axis forwards: index i -> n - 1 - i
            s, e, st = n - 1 - s, n - 1 - e, -st
            flips.append(a)
        key[a] = slice(s, max(e, s), st)
    return flips, tuple(key)


@op("Slice", since=1)
def _slice_attr(ctx, ins, at):
    return _slice(ins[0], at.ints("starts"), at.ints("ends"), at.ints("axes"), None, ctx)


@op("Slice", since=10)
def _slice_in(ctx, ins, at):
    x = ins[0]
    got = _same_inputs(at, ins)
    if got is None:
        opt = [host_ints(v) if v is not None else None for v in (list(ins[3:5]) + [None, None])[:2]]
        got = _keep(at, ins, _slice_key(x, host_ints(ins[1]), host_ints(ins[2]), opt[0], opt[1], ctx))
    flips, key = got
    if flips:
        x = M.flip(x, *flips)
    return x[key]


@op("Expand", since=8)
def _expand(ctx, ins, at):
    x, shape = ins[0], host_ints(ins[1])
    out = M.broadcast_shapes(tuple(x.shape), tuple(shape))  # ONNX broadcasts both ways
    sized(at, "shape", out, x.dtype.itemsize)
    return M.expand(x, *out) if tuple(out) != tuple(x.shape) else x


@op("Tile", since=6)
def _tile(ctx, ins, at):
    reps = host_ints(ins[1])
    x = ins[0]
    if len(reps) == x.ndim:
        sized(at, "repeats", [d * r for d, r in zip(x.shape, reps)], x.dtype.itemsize)
    return M.repeat(x, *reps)


_PAD_MODES = {"constant", "reflect", "edge", "wrap"}


def _pad(ctx, at, x, pads, value, mode, axes=None):
    return _padded(x, _pad_plan(ctx, at, x, pads, value, mode, axes))


def _pad_plan(ctx, at, x, pads, value, mode, axes):
    """How a Pad pads x: (the crop of negative pads or None, mode, value, ((before, after) per axis) for a constant
    pad or [(axis, source index)] for the others), checked against the tensor limit."""
    n = x.ndim
    axes = list(range(n)) if axes is None else [axis(a, n, ctx) for a in axes]
    k = len(axes)
    before, after = [0] * n, [0] * n
    for j, a in enumerate(axes):
        before[a], after[a] = pads[j], pads[j + k]
    if mode not in _PAD_MODES:
        raise ValueError(f"ember: {ctx.where}: Pad mode {mode!r} is not one of {sorted(_PAD_MODES)}")
    sized(at, "pads", [max(d + b + a, 0) for d, b, a in zip(x.shape, before, after)], x.dtype.itemsize)
    crop, shape = None, list(x.shape)
    if min(before) < 0 or min(after) < 0:  # negative pads crop
        crop = tuple(slice(-b if b < 0 else 0, x.shape[i] + a if a < 0 else None)
                     for i, (b, a) in enumerate(zip(before, after)))
        shape = [len(range(*c.indices(d))) for c, d in zip(crop, x.shape)]
        before, after = [max(b, 0) for b in before], [max(a, 0) for a in after]
    if mode == "constant":
        return crop, mode, value, tuple(zip(before, after)) if any(before) or any(after) else None
    # (each index is in range by construction: no check per run)
    return crop, mode, value, [(i, _pad_index(ctx, at, mode, before[i], after[i], shape[i]))
                               for i in range(n) if before[i] or after[i]]


def _padded(x, plan):
    crop, mode, value, how = plan
    if crop is not None:
        x = x[crop]
    if mode == "constant":
        return x if how is None else prim_pad(x, how, value)
    for i, idx in how:
        x = prim_index_select(x, i, idx)
    return x


_MEMO_MAX = 16  # per node: a model fed ever new shapes recomputes, its memo never grows past this


def _pad_index(ctx, at, mode, b, a, d):
    """The source index of each output cell along one axis of an edge / wrap / reflect Pad, kept per node (a
    streaming model pads every chunk alike: Silero's STFT)."""
    key = ("pad", mode, b, a, d, ctx.device)
    idx = at.memo.get(key)
    if idx is None:
        idx = np.arange(-b, d + a)
        if mode == "edge":
            idx = np.clip(idx, 0, d - 1)
        elif mode == "wrap":
            idx = idx % d
        else:  # reflect, without repeating the edge
            period = 2 * (d - 1) if d > 1 else 1
            idx = np.abs(idx) % period
            idx = np.where(idx >= d, period - idx, idx)
        if len(at.memo) >= _MEMO_MAX:
            at.memo.clear()
        idx = at.memo[key] = ctx.const(idx.astype(np.int64))
    return idx


@op("Pad", since=2)
def _pad_attr(ctx, ins, at):
    return _pad(ctx, at, ins[0], at.ints("pads"), at.f("value", 0.0), at.s("mode", "constant"))


@op("Pad", since=11)
def _pad_in(ctx, ins, at):
    x = ins[0]
    plan = _same_inputs(at, ins)  # (the same pads, value and axes tensors on the same input shape: its plan)
    if plan is None:
        value = 0
        if len(ins) > 2 and ins[2] is not None:
            v = host(ins[2]).reshape(-1)
            value = v[0].item() if v.size else 0
        axes = host_ints(ins[3]) if len(ins) > 3 and ins[3] is not None else None
        plan = _keep(at, ins, _pad_plan(ctx, at, x, host_ints(ins[1]), value, at.s("mode", "constant"), axes))
    return _padded(x, plan)


# ====================================================================== indexing

def _positive(idx, n):
    """Negative indices count from the end (ONNX); computed on the device."""
    return E.where(idx < 0, idx + n, idx)


@op("Gather")
def _gather(ctx, ins, at):
    x, idx = ins
    if x.device is CPU and idx.device is CPU:
        # indices on the CPU (token ids, a state's layer, a dim of a shape): made positive in numpy, not by 3 ops
        one = _same_inputs(at, ins)
        if one is not None:  # the same one index into the same shape as the last run: the same view
            d = x._data
            if one[3] is not None and d.__class__ is np.ndarray:  # (a 0-d index: numpy's basic index is that view)
                return x._new(d[one[3]])
            return M.reshape(M.narrow(x, one[2], one[0], 1), *one[1])
        ax = axis(at.i("axis", 0), x.ndim, ctx)
        i = host(idx).astype(np.int64)
        if i.size and i.min() < 0:
            i = np.where(i < 0, i + x.shape[ax], i)
        if i.size == 1 and 0 <= i.item() < x.shape[ax]:  # one index: a view, no index_select
            key = (slice(None),) * ax + (i.item(),) if i.ndim == 0 else None
            one = _keep(at, ins, (i.item(), (*x.shape[:ax], *i.shape, *x.shape[ax + 1:]), ax, key))
            return M.reshape(M.narrow(x, ax, one[0], 1), *one[1])
        idx = tensor(i)
    else:
        ax = axis(at.i("axis", 0), x.ndim, ctx)
        idx = _positive(cast(idx, D.int64), x.shape[ax])
    flat = I.index_select(x, ax, M.reshape(idx, -1))
    return M.reshape(flat, *x.shape[:ax], *idx.shape, *x.shape[ax + 1:])


@op("GatherElements", since=11)
def _gather_elements(ctx, ins, at):
    x, idx = ins
    ax = axis(at.i("axis", 0), x.ndim, ctx)
    return I.gather(x, ax, _positive(cast(idx, D.int64), x.shape[ax]))


def _flat_nd_index(x_shape, idx, batch_dims, ctx):
    """GatherND/ScatterND: (..., k) index tuples -> flat row numbers into x viewed as (rows, rest)."""
    k = idx.shape[-1]
    dims = x_shape[batch_dims:batch_dims + k]
    strides = np.cumprod((list(dims[1:]) + [1])[::-1])[::-1].astype(np.int64)
    idx = _positive(cast(idx, D.int64), ctx.const(np.array(dims, np.int64)))
    return R.sum(idx * ctx.const(strides), dim=-1), k


@op("GatherND", since=11)
def _gather_nd(ctx, ins, at):
    x, idx = ins
    got = _same_inputs(at, ins)  # the same index tensor (a shape chain's cached value) into the same shape
    if got is None:
        b = at.i("batch_dims", 0)
        rows, k = _flat_nd_index(x.shape, idx, b, ctx)  # (*idx.shape[:-1])
        nb = int(np.prod(x.shape[:b])) if b else 1
        rest = list(x.shape[b + k:])
        per = int(np.prod(x.shape[b:b + k]))
        rows = M.reshape(rows, nb, -1) + ctx.const((np.arange(nb, dtype=np.int64) * per)[:, None])
        got = _keep(at, ins, ((nb * per, *rest), M.reshape(rows, -1), (*idx.shape[:-1], *rest)))
    flat, rows, out = got
    return M.reshape(I.index_select(M.reshape(x, *flat), 0, rows), *out)  # x as (batch * indexed rows, *rest)


@op("ScatterND", since=11)
def _scatter_nd(ctx, ins, at):
    x, idx, upd = ins
    rows, k = _flat_nd_index(x.shape, idx, 0, ctx)
    rest = list(x.shape[k:])
    n_rows = int(np.prod(x.shape[:k]))
    xr = M.reshape(x, n_rows, -1)
    u = M.reshape(upd, -1, xr.shape[1])
    r = M.expand(M.reshape(rows, -1, 1), u.shape[0], xr.shape[1])
    red = at.s("reduction", "none")
    if red == "none":
        out = I.scatter(xr, 0, r, u)
    elif red == "add":
        out = I.scatter_add(xr, 0, r, u)
    else:
        out = _scatter_reduce(ctx, xr, 0, r, u, red)
    return M.reshape(out, *x.shape[:k], *rest)


@op("ScatterElements", since=11)
def _scatter_elements(ctx, ins, at):
    x, idx, upd = ins
    ax = axis(at.i("axis", 0), x.ndim, ctx)
    idx = _positive(cast(idx, D.int64), x.shape[ax])
    red = at.s("reduction", "none")
    if red == "add":
        return I.scatter_add(x, ax, idx, upd)
    if red == "none":
        return I.scatter(x, ax, idx, upd)
    return _scatter_reduce(ctx, x, ax, idx, upd, red)


def _scatter_reduce(ctx, x, ax, idx, upd, red):
    """Scatter with mul/max/min, exact under repeated indices: the updates go in rounds in which every
    target is written at most once (the k-th update of a target in round k; read on the host), each
    round's other updates parked in one extra slot past the end of `ax`, which is cut off after."""
    n = x.shape[ax]
    ih = host(idx).astype(np.int64)
    others = np.indices(ih.shape).reshape(ih.ndim, -1)
    others[ax] = ih.reshape(-1)
    target = np.ravel_multi_index(tuple(others), ih.shape[:ax] + (n,) + ih.shape[ax + 1:])
    order = np.argsort(target, kind="stable")
    rank = np.empty_like(order)
    sorted_t = target[order]
    first = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
    starts = np.repeat(first, np.diff(np.r_[first, sorted_t.size]))
    rank[order] = np.arange(sorted_t.size) - starts
    rank = rank.reshape(ih.shape)
    spec = tuple((0, 1) if i == ax else (0, 0) for i in range(x.ndim))
    out = prim_pad(x, spec, 0)
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        ir = ctx.const(np.where(rank == r, ih, n))
        if red == "mul":
            out = out * I.scatter(prim_pad(x * 0 + 1, spec, 1), ax, ir, upd)
        else:
            hit = I.scatter(prim_pad(x * 0, spec, 0).bool(), ax, ir, M.expand(upd.bool() | True, *upd.shape))
            val = I.scatter(out, ax, ir, upd)
            out = E.where(hit, (E.maximum if red == "max" else E.minimum)(out, val), out)
    return M.narrow(out, ax, 0, n)


op("Scatter", since=9)(_scatter_elements)


@op("Compress", since=9)
def _compress(ctx, ins, at):
    x, cond = ins
    keep = np.nonzero(host(cond).astype(bool))[0].astype(np.int64)
    if "axis" not in at:
        x, ax = M.reshape(x, -1), 0
    else:
        ax = axis(at.i("axis"), x.ndim, ctx)
    keep = keep[keep < x.shape[ax]]
    return I.index_select(x, ax, ctx.const(keep))


@op("NonZero", since=9)
def _nonzero(ctx, ins, at):
    a = host(ins[0])
    return ctx.const(np.array(np.nonzero(a), np.int64).reshape(a.ndim, -1))


@op("TopK", since=10)
def _topk(ctx, ins, at):
    x = ins[0]
    k = host_ints(ins[1])[0]
    ax = axis(at.i("axis", -1), x.ndim, ctx)
    largest = bool(at.i("largest", 1))
    # a stable sort keeps equal values in index order, as ONNX asks
    order = R.argsort(x, dim=ax, descending=largest, stable=True)
    idx = M.narrow(order, ax, 0, k)
    return [I.gather(x, ax, idx), idx]


@op("TopK", since=1)
def _topk_attr(ctx, ins, at):
    return _topk(ctx, [ins[0], ctx.const(np.array([at.i("k")], np.int64))], at)



@op("CumSum", since=11)
def _cumsum(ctx, ins, at):
    x = ins[0]
    ax = axis(host_ints(ins[1])[0], x.ndim, ctx)
    if at.i("reverse", 0):
        x = M.flip(x, ax)
    y = cast(R.cumsum(x, ax), x.dtype)
    if at.i("exclusive", 0):
        y = y - x
    return M.flip(y, ax) if at.i("reverse", 0) else y


@op("Trilu", since=14)
def _trilu(ctx, ins, at):
    x = ins[0]
    k = host_ints(ins[1])[0] if len(ins) > 1 and ins[1] is not None else 0
    return M.triu(x, k) if at.i("upper", 1) else M.tril(x, k)


@op("OneHot", since=9)
def _onehot(ctx, ins, at):
    idx, depth, values = ins
    d = int(host(depth).reshape(-1)[0])
    sized(at, "depth", list(idx.shape) + [d], values.dtype.itemsize)
    vals = values
    ax = at.i("axis", -1)
    idx = cast(idx, D.int64)
    idx = E.where(idx < 0, idx + d, idx)
    n = idx.ndim + 1
    ax = ax + n if ax < 0 else ax
    r = M.reshape(ctx.const(np.arange(d, dtype=np.int64)), *([1] * ax + [d] + [1] * (n - ax - 1)))
    hot = M.unsqueeze(idx, ax) == r
    return E.where(hot, vals[1], vals[0])


@op("EyeLike", since=9)
def _eyelike(ctx, ins, at):
    from .values import ember_dtype
    x = ins[0]
    n, m = x.shape
    a = np.eye(n, m, at.i("k", 0))
    out = ctx.const(a)
    return cast(out, ember_dtype(at.i("dtype"), ctx.where) if "dtype" in at else x.dtype)


@op("DepthToSpace", since=11)
def _depth_to_space(ctx, ins, at):
    x, b = ins[0], at.i("blocksize")
    n, c, h, w = x.shape
    if at.s("mode", "DCR") == "DCR":
        y = M.permute(M.reshape(x, n, b, b, c // (b * b), h, w), 0, 3, 4, 1, 5, 2)
    else:
        y = M.permute(M.reshape(x, n, c // (b * b), b, b, h, w), 0, 1, 4, 2, 5, 3)
    return M.reshape(y, n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def _space_to_depth(ctx, ins, at):
    x, b = ins[0], at.i("blocksize")
    n, c, h, w = x.shape
    order = (0, 1, 3, 5, 2, 4) if at.s("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    y = M.permute(M.reshape(x, n, c, h // b, b, w // b, b), *order)
    return M.reshape(y, n, c * b * b, h // b, w // b)


# ====================================================================== creation

@op("ConstantOfShape", since=9)
def _constant_of_shape(ctx, ins, at):
    shape = host_ints(ins[0])
    value = at.tensor("value")
    value = np.zeros(1, np.float32) if value is None else value.reshape(-1)
    return ctx.const(np.full(sized(at, "shape", shape, value.dtype.itemsize), value[0], value.dtype))


@op("Range", since=11)
def _range(ctx, ins, at):
    start, limit, delta = (host(v).reshape(()) for v in ins)
    span = (float(limit) - float(start)) / float(delta) if delta != 0 else float("nan")
    if not np.isfinite(span):
        raise OnnxFormatError(f"ember: {ctx.where}: Range({start}, {limit}, {delta}) has no finite length")
    n = max(int(np.ceil(span)), 0)
    sized(at, "(limit - start) / delta", [n], start.dtype.itemsize)
    return ctx.const((start + np.arange(n) * delta).astype(start.dtype))


@op("Dropout", since=1)
def _dropout(ctx, ins, at):
    """Inference (the default): the identity, the mask all true. training_mode true (opset 12+): each element kept
    with probability 1 - ratio and scaled by 1 / (1 - ratio), the mask drawn by numpy's generator (seeded by the
    `seed` attribute when the model sets one: an int here, a float on the Random* operators)."""
    x = ins[0]
    training = len(ins) > 2 and ins[2] is not None and bool(host(ins[2]).reshape(-1)[0])
    ratio = float(host(ins[1]).reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else at.f("ratio", 0.5)
    if not training or ratio == 0.0:
        return [x, M.expand(ctx.const(np.ones((), np.bool_)), *x.shape)]
    if not 0.0 <= ratio < 1.0:
        raise OnnxFormatError(f"ember: {ctx.where}: Dropout ratio {ratio} must be in [0, 1)")
    seed = at.i("seed")
    keep = ctx.const(np.random.default_rng(seed).random(x.shape) >= ratio)
    return [E.where(keep, x / (1.0 - ratio), x * 0), keep]


@op("CumProd", since=26)
def _cumprod(ctx, ins, at):
    """Inclusive/exclusive, forward/reverse running product: log2(n) doubling steps (Hillis-Steele),
    each a product with the sequence shifted by 2^k (ones shifted in)."""
    x = ins[0]
    ax = axis(host_ints(ins[1])[0], x.ndim, ctx)
    rev = at.i("reverse", 0)
    if rev:
        x = M.flip(x, ax)
    n = x.shape[ax]

    def shifted(y, k):
        spec = tuple((k, 0) if i == ax else (0, 0) for i in range(y.ndim))
        return M.narrow(prim_pad(y, spec, 1), ax, 0, n)

    y = shifted(x, 1) if at.i("exclusive", 0) else x
    k = 1
    while k < n:
        y = y * shifted(y, k)
        k *= 2
    return M.flip(y, ax) if rev else y


def _window(kind):
    def f(ctx, ins, at):
        size = host_ints(ins[0])[0]
        denom = size if at.i("periodic", 1) else size - 1
        t = 2 * np.pi * np.arange(size) / max(denom, 1)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(t)
        elif kind == "hamming":
            w = 25 / 46 - (1 - 25 / 46) * np.cos(t)
        else:
            w = 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)
        from .values import ember_dtype
        return cast(ctx.const(w.astype(np.float32)), ember_dtype(at.i("output_datatype", 1), ctx.where))
    return f


op("HannWindow", since=17)(_window("hann"))
op("HammingWindow", since=17)(_window("hamming"))
op("BlackmanWindow", since=17)(_window("blackman"))


@op("ReverseSequence", since=10)
def _reverse_sequence(ctx, ins, at):
    x, lens = ins[0], host(ins[1]).astype(np.int64).reshape(-1)
    b_ax, t_ax = at.i("batch_axis", 1), at.i("time_axis", 0)
    t = np.arange(x.shape[t_ax])[:, None]
    idx = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (time, batch)
    if b_ax < t_ax:
        idx = idx.T
    shape = [1] * x.ndim
    shape[t_ax], shape[b_ax] = x.shape[t_ax], x.shape[b_ax]
    full = np.broadcast_to(idx.reshape(shape), x.shape)
    return I.gather(x, t_ax, ctx.const(np.ascontiguousarray(full)))


@op("CenterCropPad", since=18)
def _center_crop_pad(ctx, ins, at):
    x, target = ins[0], host_ints(ins[1])
    axes = [axis(a, x.ndim, ctx) for a in at.ints("axes", list(range(x.ndim)))]
    for a, want in zip(axes, target):
        have = x.shape[a]
        if want < have:
            x = M.narrow(x, a, (have - want) // 2, want)
        elif want > have:
            sized(at, "shape", [want if i == a else d for i, d in enumerate(x.shape)], x.dtype.itemsize)
            before = (want - have) // 2
            x = prim_pad(x, tuple((before, want - have - before) if i == a else (0, 0) for i in range(x.ndim)), 0)
    return x


@op("TensorScatter", since=24)
def _tensor_scatter(ctx, ins, at):
    """Write `update` into the cache along `axis` at each batch row's write index (circular: modulo)."""
    cache, upd = ins[0], ins[1]
    ax = axis(at.i("axis", -2), cache.ndim, ctx)
    write = (host(ins[2]).astype(np.int64).reshape(-1) if len(ins) > 2 and ins[2] is not None
             else np.zeros(cache.shape[0], np.int64))
    seq, cap = upd.shape[ax], cache.shape[ax]
    shape = [1] * upd.ndim
    shape[0], shape[ax] = upd.shape[0], seq
    pos = write.reshape(-1, *([1] * (upd.ndim - 1))) + np.arange(seq).reshape([seq if i == ax else 1 for i in range(upd.ndim)])
    if at.s("mode", "linear") == "circular":
        pos = pos % cap
    idx = np.ascontiguousarray(np.broadcast_to(pos, upd.shape))
    return I.scatter(cache, ax, ctx.const(idx), upd)
