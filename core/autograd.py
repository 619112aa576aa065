"""Reverse-mode autograd: one backward rule per primitive, written next to its forward.

`prim_*` functions run a primitive on the tensors' backend and, when gradients are being
recorded, attach a node whose `backward(grad)` returns one gradient per input, composed from
Tensor ops (so every composed op differentiates for free). The engine walks nodes in reverse
topological order and accumulates into leaf `.grad`.
"""
from __future__ import annotations

import math

from . import kernels as _kernels

_GRAD = [True]  # module-level flag: a list so hot paths read it without attribute lookups


def is_grad_enabled() -> bool:
    return _GRAD[0]


class no_grad:
    """Context manager / decorator that turns off gradient recording."""

    _flag = False

    def __enter__(self):
        self._prev = _GRAD[0]
        _GRAD[0] = self._flag

    def __exit__(self, *exc):
        _GRAD[0] = self._prev

    def __call__(self, fn):
        def wrapper(*a, **k):
            with self.__class__():
                return fn(*a, **k)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


class enable_grad(no_grad):
    _flag = True


class set_grad_enabled(no_grad):
    def __init__(self, mode: bool):
        self._flag = bool(mode)
        self._prev = _GRAD[0]
        _GRAD[0] = self._flag

    def __enter__(self):
        pass


class TensorBase:
    """The fields autograd reads and rebinds on every tensor: a backend array, its device, and
    (when recording) the Node that produced it. tensor.Tensor subclasses this with the API; the
    ops below the Tensor class test `isinstance(v, TensorBase)` and make outputs with `x._new(array)`."""

    __slots__ = ("_data", "device", "requires_grad", "grad", "_ctx", "__weakref__")


def snapshot(t):
    """A new handle on t's current value and graph position, so t itself can be rebound in place
    (x += y, x[i] = v) without making its own graph point back at it."""
    s = t._new(t._data)
    s.requires_grad, s._ctx = t.requires_grad, t._ctx
    return s


def rebind(t, out):
    """In-place update: t takes out's value and graph position."""
    t._data, t._ctx, t.requires_grad = out._data, out._ctx, out.requires_grad
    return t


class Node:
    """A recorded primitive application: inputs (Tensors or None) and what backward needs."""

    __slots__ = ("inputs", "saved", "kind", "arg")

    def __init__(self, kind, inputs, arg=None, saved=None):
        self.kind, self.inputs, self.arg, self.saved = kind, inputs, arg, saved

    def backward(self, g):
        return _BACKWARD[self.kind](self, g)


def _frozen(t):
    # Nodes keep leaf parameters by identity (their .grad is the result) and everything else as
    # a snapshot, so a later in-place rebind (x += 1, x[i] = v) cannot change a recorded value.
    return t if t is None or (t._ctx is None and t.requires_grad) else snapshot(t)


def _record(out, kind, inputs, arg=None, saved=None):
    if _GRAD[0]:
        for t in inputs:
            if t is not None and t.requires_grad:
                out.requires_grad = True
                out._ctx = Node(kind, tuple([_frozen(t) for t in inputs]), arg, saved)
                break
    return out


# ============================================================================ primitives
# Outputs are made with `x._new(array)` (a plain Tensor on x's device). Every tensor's device has
# its backend loaded (making the tensor needed it), so the prims read `device._backend` directly.

def prim_unary(op, x):
    out = x._new(x.device._backend.unary(op, x._data))
    if _GRAD[0] and x.requires_grad and x.dtype.is_float:
        _record(out, "unary", (x,), op, out._data)  # the raw array: saving `out` would be a ref cycle
    return out


def prim_binary(op, a, b):
    """b is a Tensor of a's dtype/device or a Python scalar."""
    bt = isinstance(b, TensorBase)
    out = a._new(a.device._backend.binary(op, a._data, b._data if bt else b))
    if _GRAD[0] and (a.requires_grad or (bt and b.requires_grad)) and op not in _NO_GRAD_BINARY:
        _record(out, "binary", (a, b if bt else None), (op, None if bt else b), out._data)
    return out


_NO_GRAD_BINARY = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "floordiv"))


def prim_where(c, a, b):
    out = a._new(a.device._backend.where(c._data, a._data, b._data))
    if _GRAD[0] and (a.requires_grad or b.requires_grad):
        _record(out, "where", (a, b), None, c)
    return out


def prim_cast(x, dtype):
    if x.dtype is dtype:
        return x
    out = x._new(x.device._backend.cast(x._data, dtype))
    if _GRAD[0] and x.requires_grad and dtype.is_float and x.dtype.is_float:
        _record(out, "cast", (x,), x.dtype)
    return out


def prim_reduce(op, x, axes, keepdim):
    out = x._new(x.device._backend.reduce(op, x._data, axes, keepdim))
    if _GRAD[0] and x.requires_grad:
        _record(out, "reduce", (x,), (op, axes, keepdim), out._data)
    return out


def prim_arg_reduce(op, x, axis, keepdim):
    return x._new(x.device._backend.arg_reduce(op, x._data, axis, keepdim))


def prim_argsort(x, axis, descending):
    return x._new(x.device._backend.argsort(x._data, axis, descending))


def prim_cumsum(x, axis):
    out = x._new(x.device._backend.cumsum(x._data, axis))
    if _GRAD[0] and x.requires_grad:
        _record(out, "cumsum", (x,), axis)
    return out


def prim_reshape(x, shape):
    return _to_shape(x, shape, "reshape", x.device._backend.reshape)


def prim_permute(x, order):
    out = x._new(x.device._backend.permute(x._data, tuple(order)))
    if _GRAD[0] and x.requires_grad:
        _record(out, "permute", (x,), tuple(order))
    return out


def prim_expand(x, shape):
    return _to_shape(x, shape, "expand", x.device._backend.expand)


def _to_shape(x, shape, op, run):
    """x itself where it has the shape already, else run(data, shape), recording op (its backward takes x.shape)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    out = x._new(run(x._data, shape))
    if _GRAD[0] and x.requires_grad:
        _record(out, op, (x,), x.shape)
    return out


def prim_slice(x, starts, stops, steps):
    out = x._new(x.device._backend.slice(x._data, starts, stops, steps))
    if _GRAD[0] and x.requires_grad:
        _record(out, "slice", (x,), (x.shape, tuple(starts), tuple(steps)))
    return out


def prim_pad(x, pads, value):
    out = x._new(x.device._backend.pad(x._data, tuple(pads), value))
    if _GRAD[0] and x.requires_grad:
        _record(out, "pad", (x,), tuple(pads))
    return out


def prim_cat(xs, axis):
    dev = xs[0].device
    out = xs[0]._new(dev._backend.cat([t._data for t in xs], axis))
    if _GRAD[0] and any(t.requires_grad for t in xs):
        _record(out, "cat", tuple(xs), axis)
    return out


def prim_contiguous(x):
    out = x._new(x.device._backend.contiguous(x._data))
    if _GRAD[0] and x.requires_grad:
        _record(out, "identity", (x,))
    return out


def prim_matmul(a, b):
    out = a._new(a.device._backend.matmul(a._data, b._data))
    if _GRAD[0] and (a.requires_grad or b.requires_grad):
        _record(out, "matmul", (a, b))
    return out


def prim_conv(x, w, stride, padding, dilation, groups):
    out = x._new(x.device._backend.conv(x._data, w._data, stride, padding, dilation, groups))
    if _GRAD[0] and (x.requires_grad or w.requires_grad):
        _record(out, "conv", (x, w), (stride, padding, dilation, groups))
    return out


def prim_gather(x, axis, idx):
    out = x._new(x.device._backend.gather(x._data, axis, idx._data))
    if _GRAD[0] and x.requires_grad:
        _record(out, "gather", (x,), axis, idx)
    return out


def prim_index_select(x, axis, idx):
    out = x._new(x.device._backend.index_select(x._data, axis, idx._data))
    if _GRAD[0] and x.requires_grad:
        _record(out, "index_select", (x,), axis, idx)
    return out


def prim_scatter(x, axis, idx, src, reduce):
    out = x._new(x.device._backend.scatter(x._data, axis, idx._data, src._data, reduce))
    if _GRAD[0] and (x.requires_grad or src.requires_grad):
        _record(out, "scatter", (x, src), (axis, reduce), idx)
    return out


def prim_to_device(x, device):
    """Copy to another device through host memory (the storage array, so bfloat16 bits survive)."""
    out = x._new(device.backend.from_numpy(x._storage_numpy(), x.dtype))
    out.device = device
    if _GRAD[0] and x.requires_grad:
        _record(out, "to_device", (x,), x.device)
    return out


def fused_kernel(name, x, *params):
    """The device's kernel for the registry op `name` (ember.kernels) as a callable over backend arrays, when it has
    one and no gradient is being recorded through x or params (Tensors or None); else None: the caller composes."""
    if _GRAD[0] and (x.requires_grad or any(p is not None and p.requires_grad for p in params)):
        return None
    return _kernels.bound(name, x.device._backend)


def prim_fused(kernel, x, *args):
    """A fused kernel's output as a Tensor like x (no graph: fused_kernel gives kernels only without gradients)."""
    return x._new(kernel(x._data, *args))


# ============================================================================ backward rules
# Each takes (node, g) and returns a tuple of gradients aligned with node.inputs.

def unbroadcast(g, shape):
    """Sum g down to `shape` (reverse of numpy broadcasting)."""
    if g.shape == shape:
        return g
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(i + extra for i, s in enumerate(shape) if s == 1 and g.shape[i + extra] != 1)
    if axes:
        g = prim_reduce("sum", g, axes, True)
    return prim_reshape(g, shape)


def _bw_unary(n, g):
    op, x = n.arg, n.inputs[0]
    y = x._new(n.saved)
    if op == "neg":
        return (-g,)
    if op == "exp":
        return (g * y,)
    if op == "log":
        return (g / x,)
    if op == "sin":
        return (g * x.cos(),)
    if op == "cos":
        return (-g * x.sin(),)
    if op == "sqrt":
        return (g / (y * 2),)
    if op == "rsqrt":
        return (g * y * y * y * -0.5,)
    if op == "tanh":
        return (g * (1 - y * y),)
    if op == "erf":
        return (g * (-(x * x)).exp() * (2 / math.sqrt(math.pi)),)
    if op == "abs":
        return (g * x.sign(),)
    if op == "sigmoid":
        return (g * y * (1 - y),)
    if op == "recip":
        return (-g * y * y,)
    return (g.zeros_like(),)  # sign, floor, ceil, round: zero almost everywhere (as torch)


def _bw_binary(n, g):
    (op, scalar), (a, b) = n.arg, n.inputs
    y = a._new(n.saved)
    bv = b if b is not None else scalar
    ga = gb = None
    if op == "add":
        ga, gb = g, g
    elif op == "sub":
        ga, gb = g, -g
    elif op == "mul":
        ga, gb = g * bv, (g * a if b is not None else None)
    elif op == "div":
        ga = g / bv
        if b is not None:
            gb = -g * a / (b * b)
    elif op == "pow":
        ga = g * bv * a.pow(bv - 1) if b is not None else g * (a.pow(scalar - 1) * scalar if scalar != 0 else 0.0)
        if b is not None:
            # d/db a^b = a^b log a; define 0 where a == 0 (torch gives 0 there for b > 0)
            gb = g * y * a.where(a != 0, 1.0).log()
    elif op in ("maximum", "minimum"):
        if b is None:
            m = (a > scalar) if op == "maximum" else (a < scalar)
            ga = g * (m + (a == scalar) * 0.5).to(g.dtype)
        else:
            win = (a > b) if op == "maximum" else (a < b)
            tie = (a == b).to(g.dtype) * 0.5
            ga = g * (win.to(g.dtype) + tie)
            gb = g * ((~win).to(g.dtype) - tie)
    elif op == "fmod":
        ga = g
        if b is not None:
            gb = -g * (a / b).trunc()
    ga = None if ga is None or a is None else unbroadcast(ga, a.shape)
    gb = None if gb is None or b is None else unbroadcast(gb, b.shape)
    return ga, gb


def _bw_where(n, g):
    c = n.saved
    a, b = n.inputs
    z = g.zeros_like()
    return unbroadcast(prim_where(c, g, z), a.shape), unbroadcast(prim_where(c, z, g), b.shape)


def _bw_cast(n, g):
    return (prim_cast(g, n.arg),)


def _bw_reduce(n, g):
    (op, axes, keepdim), x = n.arg, n.inputs[0]
    y = x._new(n.saved)
    kshape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if not keepdim:
        g, y = prim_reshape(g, kshape), prim_reshape(y, kshape)
    if op == "sum":
        return (prim_expand(g, x.shape),)
    if op in ("max", "min"):  # ties share the gradient evenly (torch.amax semantics)
        m = (x == y).to(g.dtype)
        return (m * g / m.sum(axes, keepdim=True),)
    if op == "prod":
        # product of all others; exact where one element is zero, via exclusive products
        return (_prod_grad(x, y, axes, g),)
    raise NotImplementedError(op)


def _prod_grad(x, y, axes, g):
    """d prod / dx_i = product of the others, zero-safe: y / x where no zero is reduced, the
    product of the non-zeros at a lone zero, and 0 where two or more zeros are reduced."""
    z = x == 0
    nz = z.sum(axes, keepdim=True)
    pnz = prim_reduce("prod", x.where(~z, 1.0), axes, True)
    only = (nz == 1) & z
    return (y / x.where(~z, 1.0)).where(nz == 0, pnz.where(only, 0.0)) * g


def _bw_cumsum(n, g):
    ax = n.arg
    return (g.flip(ax).cumsum(ax).flip(ax),)


def _bw_reshape(n, g):
    return (prim_reshape(g, n.arg),)


def _bw_permute(n, g):
    order = n.arg
    inv = [0] * len(order)
    for i, p in enumerate(order):
        inv[p] = i
    return (prim_permute(g, inv),)


def _bw_expand(n, g):
    return (unbroadcast(g, n.arg),)


def _bw_slice(n, g):
    in_shape, starts, steps = n.arg
    for ax, (st, step) in enumerate(zip(starts, steps)):
        L = g.shape[ax]
        if step < 0:  # reverse, then treat as a positive step starting at the lowest index touched
            g = g.flip(ax)
            st, step = st + step * (L - 1), -step
        if step > 1 and L > 0:  # interleave zeros: (.., L, ..) -> (.., L*step, ..) then trim
            z = g.zeros_like()
            parts = [g.unsqueeze(ax + 1)] + [z.unsqueeze(ax + 1)] * (step - 1)
            shp = list(g.shape)
            shp[ax] = L * step
            g = prim_cat(parts, ax + 1).reshape(shp)
            g = g.narrow(ax, 0, (L - 1) * step + 1)
        pads = [(0, 0)] * g.ndim
        pads[ax] = (st if L else 0, in_shape[ax] - (st if L else 0) - g.shape[ax])
        g = prim_pad(g, pads, 0.0)
    return (g,)


def _bw_pad(n, g):
    pads = n.arg
    starts = [p[0] for p in pads]
    stops = [s - p[1] for s, p in zip(g.shape, pads)]
    return (prim_slice(g, starts, stops, [1] * g.ndim),)


def _bw_cat(n, g):
    ax, out, o = n.arg, [], 0
    for t in n.inputs:
        out.append(g.narrow(ax, o, t.shape[ax]))
        o += t.shape[ax]
    return tuple(out)


def _bw_identity(n, g):
    return (g,)


def _bw_matmul(n, g):
    a, b = n.inputs
    ga = unbroadcast(prim_matmul(g, b.transpose(-1, -2)), a.shape) if a.requires_grad else None
    gb = unbroadcast(prim_matmul(a.transpose(-1, -2), g), b.shape) if b.requires_grad else None
    return ga, gb


def _bw_conv(n, g):
    x, w = n.inputs
    stride, padding, dilation, groups = n.arg
    gx = conv_input_grad(g, w, x.shape, stride, padding, dilation, groups) if x.requires_grad else None
    gw = conv_weight_grad(g, x, w.shape, stride, padding, dilation, groups) if w.requires_grad else None
    return gx, gw


def _bw_to_device(n, g):
    return (prim_to_device(g, n.arg),)


def _bw_gather(n, g):
    x, idx = n.inputs[0], n.saved
    return (prim_scatter(g.new_zeros(x.shape), n.arg, idx, g, "add"),)


def _bw_index_select(n, g):
    x, ax, idx = n.inputs[0], n.arg, n.saved
    shape = [1] * g.ndim
    shape[ax] = idx.shape[0]
    full_idx = prim_expand(prim_reshape(idx, shape), g.shape)
    return (prim_scatter(g.new_zeros(x.shape), ax, full_idx, g, "add"),)


def _bw_scatter(n, g):
    (ax, reduce), idx = n.arg, n.saved
    x, src = n.inputs
    gsrc = prim_gather(g, ax, idx) if src.requires_grad else None
    if reduce is None:  # overwritten positions get no gradient
        gx = prim_scatter(g, ax, idx, g.new_zeros(idx.shape), None)
    else:
        gx = g
    return gx, gsrc


# ---------------------------------------------------------------------------- conv backward
# The transposed convolution and conv's gradients, composed from the conv/pad/slice/cat
# primitives: a backend implements one `conv` and gets conv_transpose and training for free.

def _dilate(x, factors):
    """Insert (f - 1) zeros between elements along each spatial dim: L -> (L - 1) * f + 1."""
    for i, f in enumerate(factors):
        ax = 2 + i
        L = x.shape[ax]
        if f == 1 or L == 0:
            continue
        z = x.zeros_like().unsqueeze(ax + 1)
        parts = [x.unsqueeze(ax + 1)] + [z] * (f - 1)
        shp = list(x.shape)
        shp[ax] = L * f
        x = prim_cat(parts, ax + 1).reshape(*shp).narrow(ax, 0, (L - 1) * f + 1)
    return x


def _pad_or_crop(x, pads):
    """pads: [(left, right)] per spatial dim; negative values crop."""
    if all(l >= 0 and r >= 0 for l, r in pads):
        if any(l or r for l, r in pads):
            x = prim_pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads], 0.0)
        return x
    grow = [(max(l, 0), max(r, 0)) for l, r in pads]
    if any(l or r for l, r in grow):
        x = prim_pad(x, [(0, 0), (0, 0)] + grow, 0.0)
    starts = [0, 0] + [max(-l, 0) for l, _ in pads]
    stops = list(x.shape[:2]) + [x.shape[2 + i] - max(-r, 0) for i, (_, r) in enumerate(pads)]
    return prim_slice(x, starts, stops, [1] * x.ndim)


def conv_transpose(x, w, stride, padding, output_padding, dilation, groups):
    """x (N, Cin, *L), w (Cin, Cout // groups, *K) -> (N, Cout, *Lout), as torch.conv_transposeNd."""
    nd = x.ndim - 2
    k = w.shape[2:]
    cin, cout_g = w.shape[0], w.shape[1]
    g = groups
    if g == 1 and tuple(stride) == tuple(k) and not any(padding) and not any(output_padding) \
            and all(d == 1 for d in dilation):
        return _conv_transpose_blocks(x, w)
    xu = _dilate(x, stride)
    pads = [(dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
            for i in range(nd)]
    xu = _pad_or_crop(xu, pads)
    # (Cin, Cout/g, *K) -> (Cout, Cin/g, *K), flipped spatially
    wt = w.reshape(g, cin // g, cout_g, *k).transpose(1, 2).reshape(g * cout_g, cin // g, *k)
    wt = wt.flip(*range(2, 2 + nd))
    return prim_conv(xu, wt, (1,) * nd, (0,) * nd, tuple(dilation), g)


def _conv_transpose_blocks(x, w):
    """A transposed conv whose stride equals its kernel, unpadded (SAM's and YOLO's 2x2 upsamplers): each input
    position writes its own output block, so it is one matmul of x's channels with w as (Cin, Cout * prod(K))
    and a reshape, not a conv over an input dilated with zeros (which multiplies prod(K) times as many zeros)."""
    nd = x.ndim - 2
    n, cin, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    cout, k = w.shape[1], tuple(w.shape[2:])
    cols = x.permute(0, *range(2, 2 + nd), 1) @ w.reshape(cin, cout * math.prod(k))  # (N, *L, Cout * prod K)
    y = cols.reshape(n, *sizes, cout, *k)
    y = y.permute(0, 1 + nd, *[a for i in range(nd) for a in (1 + i, 2 + nd + i)])     # (N, Cout, L1, K1, ...)
    return y.reshape(n, cout, *[sizes[i] * k[i] for i in range(nd)])


def conv_input_grad(g, w, x_shape, stride, padding, dilation, groups):
    nd = len(x_shape) - 2
    k = w.shape[2:]
    op = [x_shape[2 + i] - ((g.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k[i] - 1) + 1)
          for i in range(nd)]
    return conv_transpose(g, w, stride, padding, op, dilation, groups)


def conv_weight_grad(g, x, w_shape, stride, padding, dilation, groups):
    nd = x.ndim - 2
    n, c = x.shape[:2]
    k = w_shape[2:]
    cg = c // groups
    if any(padding):
        x = prim_pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], 0.0)
    sp = x.shape[2:]
    # channels of x' are (group, batch): conv over the batch with dy as the kernel
    xr = x.reshape(n, groups, cg, *sp).permute(2, 1, 0, *range(3, 3 + nd)).reshape(cg, groups * n, *sp)
    gr = g.transpose(0, 1)                                            # (O, N, *Lout)
    dw = prim_conv(xr, gr, tuple(dilation), (0,) * nd, tuple(stride), groups)  # (Cg, O, *K')
    if tuple(dw.shape[2:]) != tuple(k):
        dw = prim_slice(dw, [0] * dw.ndim, list(dw.shape[:2]) + list(k), [1] * dw.ndim)
    return dw.transpose(0, 1)                                         # (O, Cg, *K)


_BACKWARD = {
    "unary": _bw_unary, "binary": _bw_binary, "where": _bw_where, "cast": _bw_cast,
    "reduce": _bw_reduce, "cumsum": _bw_cumsum, "reshape": _bw_reshape, "permute": _bw_permute,
    "expand": _bw_expand, "slice": _bw_slice, "pad": _bw_pad, "cat": _bw_cat,
    "identity": _bw_identity, "matmul": _bw_matmul, "conv": _bw_conv, "gather": _bw_gather,
    "index_select": _bw_index_select, "scatter": _bw_scatter, "to_device": _bw_to_device,
    "custom": lambda n, g: n.arg(n, g),  # ember.custom_op: the op's own rule, recorded as the node's arg
}


# ============================================================================ engine

def backward(root, grad=None):
    """Accumulate d(root)/d(leaf) into every leaf's .grad. Graph nodes are the recorded Nodes
    (not tensor objects), so tensors rebound in place after recording do not disturb it."""
    if not root.requires_grad:
        raise RuntimeError("ember: backward() on a tensor that does not require grad "
                           "(no input had requires_grad=True, or it was computed under no_grad)")
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(f"ember: backward() needs a gradient argument for a non-scalar output of shape {root.shape}")
        grad = root.ones_like()
    elif grad.shape != root.shape:
        raise ValueError(f"ember: backward() gradient shape {grad.shape} != output shape {root.shape}")
    with no_grad():
        if root._ctx is None:
            _accumulate(root, grad)
            return
        order, seen = [], set()
        stack = [(root._ctx, False)]
        while stack:  # iterative DFS: long decode loops must not hit the recursion limit
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            for p in n.inputs:
                if p is not None and p.requires_grad and p._ctx is not None and id(p._ctx) not in seen:
                    stack.append((p._ctx, False))
        grads = {id(root._ctx): grad}
        for n in reversed(order):
            g = grads.pop(id(n), None)
            if g is None:
                continue
            for p, pg in zip(n.inputs, n.backward(g)):
                if p is None or pg is None or not p.requires_grad:
                    continue
                if pg.shape != p.shape:
                    pg = unbroadcast(pg, p.shape)
                if p._ctx is None:
                    _accumulate(p, pg)
                else:
                    k = id(p._ctx)
                    prev = grads.get(k)
                    grads[k] = pg if prev is None else prev + pg


def _accumulate(leaf, g):
    if g.dtype is not leaf.dtype:
        g = prim_cast(g, leaf.dtype)
    leaf.grad = g if leaf.grad is None else leaf.grad + g
