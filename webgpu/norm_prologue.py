"""A decode step's norm computed inside the matvec that reads it: RMSNorm / LayerNorm as a matvec prologue.

In decoding, a norm's output (a few rows of `dim` floats) is read by one matvec (qkv, gate/up, the head). So
on webgpu a norm over at most 8 float32 rows does not dispatch: it returns a `LazyStorage` whose node is a
`PendingNorm`. A matvec whose input is such a pending norm (quant.wgsl's qmatvec, for quantized and, as
decode_f32, float32 weights) computes it in its prologue: every workgroup reads x once into workgroup memory,
computes each row's statistics there (the rows are small) and norms it in place. When the norm's own input is
a pending elementwise result (the residual add x + attn), the prologue computes that from its leaves too, and
exactly one workgroup writes the sum to the add's buffer, so the residual stream is materialized as before.
The kernel stays within the device's storage bindings and workgroup memory, or the norm is dispatched.

Anything else that reads a pending norm runs the norm kernel first (norm.wgsl, via `handle`): the result is
always what dispatching the norm would give, up to the order of the f32 sums of squares.
"""
from __future__ import annotations

from ember import dtypes as D

from .buffers import GArray, contiguous_strides
from .fusion import LazyStorage, pending

_MAX_ROWS = 8  # qmatvec's accumulators: a norm over more rows (prefill) dispatches at once


class PendingNorm:
    """out = norm(x) (rms or layer), weight w and bias b (GArrays or None), not yet computed."""

    __slots__ = ("backend", "x", "w", "b", "eps", "rms", "shape")

    def __init__(self, backend, x, w, b, eps, rms):
        self.backend, self.x, self.w, self.b, self.eps, self.rms = backend, x, w, b, eps, rms
        self.shape = x.shape

    def run(self, storage):
        storage.node = None
        self.backend._pending.discard(storage)
        out = GArray(storage, self.shape, contiguous_strides(self.shape), 0, D.float32)
        self.backend._norm_into(out, self.x, self.w, self.b, self.eps, self.rms)
        self.x = self.w = self.b = None

    def reads(self, storage):
        node = pending(self.x)
        return self.x.storage is storage or any(t is not None and t.storage is storage for t in (self.w, self.b)) \
            or (node is not None and node.reads(storage))


class NormPrologueMixin:
    """Mixed into WebGPUBackend: `_lazy_norm` defers a decode-sized norm, `_norm_matvec` fuses it."""

    def _lazy_norm(self, x, w, b, eps, rms):
        """A pending norm(x), or None where it is not deferred (fusion off, many rows, not all float32)."""
        n = x.shape[-1] if x.shape else 0
        rows = x.size // max(n, 1)
        if not (self.fuse and self.decode_fusion and 0 < rows <= _MAX_ROWS and n and n % 32 == 0
                and x.size <= self._stage_cap()) or \
                any(t is not None and t.dtype is not D.float32 for t in (x, w, b)):
            return None
        node = PendingNorm(self, x, w, b, eps, rms)
        st = LazyStorage(self.pool, self._nbytes(x.size, D.float32), node)
        self._pending.add(st)
        return GArray(st, x.shape, contiguous_strides(x.shape), 0, D.float32)

    def _bindings_left(self, used):
        """Storage bindings a kernel may still add to `used` (the device's limit: 8 by default, more where the
        adapter has them and the device asked for them, as adapter_native / adapter_browser do)."""
        return int(self.adapter.limits.get("max-storage-buffers-per-shader-stage", 8)) - used

    def _norm_matvec(self, x, k, extra=0):
        """For a matvec reading x (..., k) (and `extra` more bindings: a bias): when x is a whole pending norm,
        the kernel pieces computing it: dict(xs, x_off, xv, pro, rw, xmeta, eps) (quant.wgsl's PRO / XV), else None."""
        node = getattr(x.storage, "node", None)
        if not isinstance(node, PendingNorm) or x.offset or x.size != _size(node.shape) \
                or node.shape[-1] != k or x.strides != contiguous_strides(x.shape) or x.size > self._stage_cap():
            return None
        src = node.x
        add = pending(src)
        lines = None
        params = sum(t is not None for t in (node.w, node.b))
        if add is not None and add.dtype is D.float32 and \
                len(add.leaves) + params + 1 <= self._bindings_left(3 + extra):  # prm, out, weight; the sum's buffer
            lines = self._matvec_prologue(src, k, name="xr", node=add)
        if lines is None and 1 + params > self._bindings_left(3 + extra):
            return None
        if lines is not None:  # x + a computed here from its leaves; workgroup 0 writes it to src's buffer
            xr, xs, xmeta = lines
            src.storage.node = None
            self._pending.discard(src.storage)
            x_off = 0
        else:
            if not self._dense(src):  # a dense view is read at its offset (k's columns of a q | k | v result)
                src = self.contiguous(src)
            xr, xs, xmeta, x_off = "fn xr(j: u32) -> f32 { return f32(in1[j]); }", [src], [], src.offset
            add = None
        extra, terms = [], ""
        for t, name in ((node.w, "w"), (node.b, "b")):
            if t is not None:
                extra.append(self.contiguous(t))
                terms += f" * f32(in{len(xs) + len(extra)}[c])" if name == "w" else \
                    f" + f32(in{len(xs) + len(extra)}[c])"
        rw = ()
        if add is not None:
            extra.append(src)
            rw = (len(xs) + len(extra),)
        mean = "0.0" if node.rms else "wg_sum(lid, s) / f32(K)"
        at = "xst[m * K + c]"
        # x is read once into workgroup memory (sized to x) and normed there; the matvec then reads xst
        xv = (xr + "\nvar<workgroup> nst: array<f32, 16>;  // per row: mean, 1 / sqrt(var + eps)\n"
              f"var<workgroup> xst: array<f32, {-(-x.size // 64) * 64}>;\n"
              "fn xv(j: u32) -> f32 { return xst[j - prm[4]]; }")
        write = "" if add is None else (f"if (wid.x == 0u && wid.y == 0u) {{ for (var r = lid; r < M * K; r = r + 64u) "
                                        f"{{ in{rw[0]}[r] = xst[r]; }} }} ")
        pro = ("for (var r = lid; r < M * K; r = r + 64u) { xst[r] = xr(prm[4] + r); } workgroupBarrier(); " + write
               + "for (var m = 0u; m < M; m = m + 1u) { var s = 0.0; "
               + ("" if node.rms else f"for (var c = lid; c < K; c = c + 64u) {{ s = s + {at}; }} ")
               + f"let mu = {mean}; var q = 0.0; "
               f"for (var c = lid; c < K; c = c + 64u) {{ let d = {at} - mu; q = q + d * d; }} "
               "let inv = 1.0 / sqrt(wg_sum(lid, q) / f32(K) + bitcast<f32>(prm[6])); "
               "if (lid == 0u) { nst[2u * m] = mu; nst[2u * m + 1u] = inv; } } workgroupBarrier(); "
               "for (var r = lid; r < M * K; r = r + 64u) { let m = r / K; let c = r % K; "
               f"xst[r] = (xst[r] - nst[2u * m]) * nst[2u * m + 1u]{terms}; }} workgroupBarrier(); ")
        return dict(xs=xs + extra, x_off=x_off, xv=xv, pro=pro, rw=rw, xmeta=xmeta, eps=self._bits(node.eps, D.float32))


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n
