"""Elementwise fusion for the WebGPU backend: a chain of elementwise ops becomes one generated kernel.

An elementwise primitive (unary, binary, where, cast: everything that goes through `_map`) does not
dispatch at once. It returns a GArray whose storage is a `LazyStorage`: a buffer taken from the pool
plus the pending expression (WGSL over its leaf inputs and scalar words). A later elementwise op whose
input is such a pending result, read whole (same shape, contiguous, offset 0), inlines the expression
instead of reading the buffer; so `silu(g) * u` or `x * sigmoid(x)` after a conv's bias is one kernel.
Anything else that touches the buffer (a matmul, a norm, a copy, a readback) asks for its `handle`,
which runs the pending kernel first: the result is always the same as dispatching each op.

Row kernels can take a pending input too: `norm` (layer_norm / rms_norm) computes a pending
residual add in its first pass and writes it to its buffer (residual add + norm: one kernel).

Two rules keep it correct:
- per-op rounding is kept: an inlined value is converted to its stored word type exactly as a load
  would (`f32(...)` of an f16 word, the fix_* of int8/uint8/f16/bf16 words inside the expression);
- an in-place write (copy_into, the KV cache's) first runs every pending kernel that reads the
  buffer it writes (`_flush_readers`).
Leaves are capped at the 6 storage bindings left beside meta and out (WebGPU's default limit is 8),
scalars at the 5 parameter words of common.wgsl, and expressions at a length past which the chain is
cut (compile time). `EMBER_WEBGPU_FUSE=0` (or `backend.fuse = False`) dispatches each op (bench_webgpu.py).
"""
from __future__ import annotations

import re
import weakref

from .buffers import GArray, Storage, compute_type, contiguous_strides

_MAX_LEAVES = 6    # + meta + out = 8 storage bindings (WebGPU's default maxStorageBuffersPerShaderStage)
_MAX_SCALARS = 5   # prm[3..7] (common.wgsl)
_MAX_EXPR = 3000   # characters of WGSL: a longer chain is materialized and restarted
_VAR = re.compile(r"\b[abc]\b")
_TOK = re.compile(r"@([LS])(\d+)@")
_HANDLE = Storage.handle  # the slot the property below wraps


class LazyStorage(Storage):
    """A pooled buffer whose contents are still a pending expression (`node`); reading `handle` runs it."""

    __slots__ = ("node",)

    def __init__(self, pool, nbytes, node):
        self.node = None
        Storage.__init__(self, pool, nbytes)
        self.node = node

    @property
    def handle(self):
        node = self.node
        if node is not None:
            node.run(self)
        return _HANDLE.__get__(self)

    @handle.setter
    def handle(self, h):
        _HANDLE.__set__(self, h)


class Pending:
    """out = expr, over leaves (GArrays with their views over `shape`) and scalar words.

    expr is WGSL in tokens @L<k>@ (leaf k, already in its compute type) and @S<j>@ (scalar j); its
    value is the stored word (fix and f16 conversion included)."""

    __slots__ = ("backend", "shape", "dtype", "wt", "expr", "leaves", "views", "scalars")

    def __init__(self, backend, shape, dtype, wt, expr, leaves, views, scalars):
        self.backend, self.shape, self.dtype, self.wt = backend, shape, dtype, wt
        self.expr, self.leaves, self.views, self.scalars = expr, leaves, views, scalars

    def run(self, storage):
        self.backend._materialize(self, storage)

    def reads(self, storage):
        return any(x.storage is storage for x in self.leaves)


def pending(x):
    """x's pending node when x reads a whole pending result in its natural layout, else None."""
    st = x.storage
    node = getattr(st, "node", None)
    if not isinstance(node, Pending) or x.offset != 0 or x.shape != node.shape or x.strides != contiguous_strides(x.shape):
        return None
    return node


class FusionMixin:
    """Mixed into WebGPUBackend: `_fused_map` builds pending results, `_materialize` dispatches them."""

    def _fused_map(self, shape, out_dtype, expr, inputs, scalar):
        """The pending result of `expr` (in a, b, c and the scalar's letter, its stored word's value)."""
        leaves, views, scalars, names = [], [], [], {}

        def leaf(x, view):
            k = next((i for i, (y, v) in enumerate(zip(leaves, views)) if y.storage is x.storage and v == view), None)
            if k is None:
                leaves.append(x)
                views.append(view)
                k = len(leaves) - 1
            return f"@L{k}@"

        subs = []
        for x in inputs:
            node = pending(x) if x.shape == shape else None
            if node is not None and _fits(node, leaves, views, scalars):
                lmap = [leaf(y, v) for y, v in zip(node.leaves, node.views)]
                smap = []
                for s in node.scalars:
                    scalars.append(s)
                    smap.append(f"@S{len(scalars) - 1}@")
                inner = _TOK.sub(lambda m: (lmap if m.group(1) == "L" else smap)[int(m.group(2))], node.expr)
                subs.append(f"{compute_type(node.wt)}({inner})")
            else:
                subs.append(leaf(x, (x.offset, self._bstrides(x, shape))))
        if scalar is not None:
            scalars.append(scalar)
            subs.append(f"@S{len(scalars) - 1}@")
        if len(leaves) > _MAX_LEAVES or len(scalars) > _MAX_SCALARS:
            return None
        body = _VAR.sub(lambda m: subs["abc".index(m.group(0))], expr)
        if len(body) > _MAX_EXPR:
            return None
        wt = self._word(out_dtype)[0]
        node = Pending(self, shape, out_dtype, wt, body, leaves, views, scalars)
        st = LazyStorage(self.pool, self._nbytes(max(1, _prod(shape)), out_dtype), node)
        self._pending.add(st)
        return GArray(st, shape, contiguous_strides(shape), 0, out_dtype)

    def _leaf_loads(self, node, flat_views=None, index="i", first=0, sbase=3):
        """WGSL `let` lines loading each leaf (l0, l1, ... from in<first>, ...) and scalar (s0, ... from
        prm[sbase], ...), and the expression in them."""
        loads = []
        for k, x in enumerate(node.leaves):
            at = index if flat_views is None or flat_views[k] else f"view_index({index}, {k}u)"
            loads.append(f"let l{k} = {compute_type(self._word(x.dtype)[0])}(in{first + k}[{at}]);")
        for j, (t, _) in enumerate(node.scalars):
            loads.append(f"let s{j} = bitcast<{t}>(prm[{sbase + j}]);")
        expr = _TOK.sub(lambda m: ("l" if m.group(1) == "L" else "s") + m.group(2), node.expr)
        return loads, expr

    def _materialize(self, node, storage):
        """Run a pending result's kernel into its own buffer."""
        from .backend import merge_dims
        storage.node = None
        self._pending.discard(storage)
        out = GArray(storage, node.shape, contiguous_strides(node.shape), 0, node.dtype)
        n = out.size
        if n:
            mshape, views = merge_dims(node.shape, list(node.views))
            cs = contiguous_strides(mshape)
            loads, expr = self._leaf_loads(node, [off == 0 and st == cs for off, st in views])
            wts = [self._word(x.dtype)[0] for x in node.leaves]
            p = self.pipelines.get("elementwise", "map", node.wt, wts, LOADS="\n    ".join(loads), EXPR=expr)
            self._run(p, self._view_meta(n, mshape, views, [b for _, b in node.scalars]), out, node.leaves,
                      self._groups(n))
        node.leaves = node.views = ()

    def _flush_readers(self, storage):
        """Run every pending kernel that reads `storage` (before an in-place write to it)."""
        for st in list(self._pending):
            if st.node is not None and st.node.reads(storage):
                st.handle  # noqa: B018  (runs it)

    def _matvec_prologue(self, x, k, name="xv", node=None):
        """(WGSL of fn `name`, leaves, meta words) for a kernel reading x (..., k) float32 as name(m * k + c): a
        pending x computed from its leaves (bound from in1, views in meta from word 8, then its scalar words);
        None when x is not one."""
        node = node or (pending(x) if self.fuse else None)
        if node is None or node.dtype.name != "float32" or node.shape[-1] != k or len(node.leaves) > _MAX_LEAVES - 1:
            return None
        rows = _row_views(node, k)
        if rows is None:
            return None
        lines = []
        for i, (leaf, (off, rs, cs)) in enumerate(zip(node.leaves, rows)):
            b = 8 + 3 * i
            lines.append(f"let l{i} = {compute_type(self._word(leaf.dtype)[0])}(in{1 + i}[bitcast<i32>(prm[{b}]) + "
                         f"i32(j / prm[2]) * bitcast<i32>(prm[{b + 1}]) + i32(j % prm[2]) * bitcast<i32>(prm[{b + 2}])]);")
        sb = 8 + 3 * len(node.leaves)
        lines += [f"let s{j} = bitcast<{t}>(prm[{sb + j}]);" for j, (t, _) in enumerate(node.scalars)]
        expr = _TOK.sub(lambda m: ("l" if m.group(1) == "L" else "s") + m.group(2), node.expr)
        xv = f"fn {name}(j: u32) -> f32 {{ " + " ".join(lines) + f" return f32({expr}); }}"
        meta = [w for r in rows for w in r] + [bits for _, bits in node.scalars]
        return xv, list(node.leaves), meta

    def _norm_prologue(self, x):
        """For a row kernel reading x: (node, loads, expr) when x is a pending result whose leaves are all
        read flat (contiguous, offset 0, x's shape), so the kernel can compute it and write it back; else None."""
        node = pending(x)
        if node is None or len(node.leaves) > _MAX_LEAVES - 3 or len(node.scalars) > 4:
            return None
        cs = contiguous_strides(node.shape)
        if not all(v == (0, cs) for v in node.views):
            return None
        return node


XV_PLAIN = "fn xv(j: u32) -> f32 { return in1[j]; }"


def _row_views(node, k):
    """Each leaf's view over node.shape as (offset, row stride, column stride) of an (M, k) matrix, or None."""
    out = []
    for off, st in node.views:
        lead, cs = st[:-1], st[-1]
        shape = node.shape[:-1]
        dims = [(n, s) for n, s in zip(shape, lead) if n != 1]
        rs = dims[-1][1] if dims else 0
        acc = rs
        for n, s in reversed(dims):                   # leading dims must merge into one row stride
            if s != acc:
                return None
            acc = s * n
        out.append((off, rs, cs))
    return out


def _fits(node, leaves, views, scalars):
    """Whether inlining node keeps the kernel within the binding and scalar limits."""
    new = sum(1 for y, v in zip(node.leaves, node.views)
              if not any(z.storage is y.storage and w == v for z, w in zip(leaves, views)))
    return len(leaves) + new <= _MAX_LEAVES and len(scalars) + len(node.scalars) < _MAX_SCALARS


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def new_pending_set():
    return weakref.WeakSet()
