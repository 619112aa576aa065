"""The WebGPU backend's heavy primitives: reductions, sorting, matmul, conv, indexing, fused ops.

A mixin of WebGPUBackend (backend.py holds the plumbing these use: _new, _run, _view_meta,
pipelines, views). Row kernels want the reduced axis last and contiguous: `_rows` moves it.
"""
from __future__ import annotations

import math

import numpy as np

from ember import dtypes as D

from .buffers import GArray, compute_type

_INIT = {("sum", "f32"): "0.0", ("prod", "f32"): "1.0", ("max", "f32"): "-f_inf()", ("min", "f32"): "f_inf()",
         ("sum", "i32"): "0", ("prod", "i32"): "1", ("max", "i32"): "i32(-2147483648)", ("min", "i32"): "2147483647",
         ("sum", "u32"): "0u", ("prod", "u32"): "1u", ("max", "u32"): "0u", ("min", "u32"): "0xffffffffu"}
_NAN = {"f32": "is_nan", "i32": "never_i", "u32": "never_u"}
_HALF = ("f16", "bf16x2", "f16x2")  # 16-bit float words (native or packed)


def _row_groups(rows):
    return (rows, 1, 1) if rows <= 65535 else (65535, -(-rows // 65535), 1)


class ComputeMixin:
    # ------------------------------------------------------------------ helpers
    def _rows(self, x, axes):
        """x with `axes` moved last and made contiguous -> (array, kept shape, row length)."""
        keep = [d for d in range(len(x.shape)) if d not in axes]
        xp = self.contiguous(self.permute(x, keep + list(axes)))
        kept = tuple(x.shape[d] for d in keep)
        return xp, kept, math.prod(x.shape[d] for d in axes)

    def _last_axis(self, x, axis, fn):
        """Run a row kernel `fn(contiguous x with axis last)` and move the axis back (a view)."""
        nd = len(x.shape)
        if axis == nd - 1:
            return fn(self.contiguous(x))
        order = [d for d in range(nd) if d != axis] + [axis]
        y = fn(self.contiguous(self.permute(x, order)))
        return self.permute(y, [order.index(d) for d in range(nd)])

    # ------------------------------------------------------------------ reductions
    def reduce(self, op, x, axes, keepdim):
        wt, _, fix = self._word(x.dtype)
        axes = tuple(sorted(axes))
        xr, kept, n = self._rows(x, axes)
        out_shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdim else kept
        rows = math.prod(kept)
        out = self._new(out_shape, x.dtype)
        if rows == 0:
            return out
        if n == 0:
            if op in ("max", "min"):
                raise ValueError(f"ember: {op} over an empty axis of a {x.shape} tensor")
            self._fill(out, 0 if op == "sum" else 1)
            return out
        ct = compute_type(wt)
        prop = "true" if (ct == "f32" and op in ("max", "min")) else "false"
        p = self.pipelines.get("reduce", "reduce", wt, [wt], T=ct, OP=op, INIT=_INIT[(op, ct)], NAN=_NAN[ct],
                               NANVAL="f_nan()" if ct == "f32" else f"{ct}(0)", PROPAGATE=prop, FIX=fix or "")
        self._run(p, [rows, n], out, [xr], _row_groups(rows))
        return out

    def arg_reduce(self, op, x, axis, keepdim):
        wt = self._word(x.dtype)[0]
        xr, kept, n = self._rows(x, (axis,))
        if n == 0:
            raise ValueError(f"ember: {op} over an empty axis of a {x.shape} tensor")
        out = self._new(kept, D.int64)
        rows = math.prod(kept)
        if rows:
            ct = compute_type(wt)
            p = self.pipelines.get("reduce", "arg_reduce", "i32", [wt], T=ct, NAN=_NAN[ct],
                                   CMP=">" if op == "argmax" else "<")
            self._run(p, [rows, n], out, [xr], _row_groups(rows))
        if keepdim:
            out = self.reshape(out, tuple(1 if d == axis else s for d, s in enumerate(x.shape)))
        return out

    def cumsum(self, x, axis):
        wt, _, fix = self._word(x.dtype)

        def run(xc):
            out = self._new(xc.shape, x.dtype)
            n = xc.shape[-1] if xc.shape else 1
            rows = xc.size // max(n, 1)
            if xc.size:
                p = self.pipelines.get("reduce", "cumsum", wt, [wt], T=compute_type(wt), FIX=fix or "")
                self._run(p, [rows, n], out, [xc], self._groups(rows))
            return out
        return self._last_axis(x, axis, run)

    def argsort(self, x, axis, descending):
        wt = self._word(x.dtype)[0]

        def run(xc):
            out = self._new(xc.shape, D.int64)
            n = xc.shape[-1] if xc.shape else 1
            if xc.size:
                p = self.pipelines.get("reduce", "argsort", "i32", [wt], T=compute_type(wt), NAN=_NAN[compute_type(wt)],
                                       CMP=">" if descending else "<")
                self._run(p, [xc.size // n, n], out, [xc], self._groups(xc.size))
            return out
        return self._last_axis(x, axis, run)

    # ------------------------------------------------------------------ matmul
    def _batched(self, x, bshape):
        """x expanded to bshape + its 2 matrix dims, batch dims merged into one stride."""
        full = tuple(bshape) + x.shape[-2:]
        v = self.expand(x, full)
        st = [s for n, s in zip(bshape, v.strides) if n != 1]
        ns = [n for n in bshape if n != 1]
        ok = all(st[i] == st[i + 1] * ns[i + 1] for i in range(len(st) - 1))
        if not ok:
            v = self.contiguous(v)
            st = [v.strides[len(bshape) - 1]] if bshape else []
        return v, (st[-1] if st else 0)

    def matmul(self, a, b, bias=None, out_dtype=None, f16_products=True):
        """a @ b (+ bias (N,) added to every row before the store's one rounding: the linear primitive).
        out_dtype (default a's): float operands of other float dtypes are read in their own words, so a
        16-bit attention's scores come out as float32 without casting q and k first. f16_products False:
        f32 products even under f16 compute (convolutions, as conv_gemm.py says)."""
        od = out_dtype or a.dtype
        wt, _, fix = self._word(od)
        wa, wb = self._wt(a), self._wt(b)
        M, K = a.shape[-2:]
        N = b.shape[-1]
        if b.shape[-2] != K:
            raise ValueError(f"ember: matmul shapes {a.shape} @ {b.shape} do not align")
        if self.fuse:  # a decode row that is still pending (a norm, GELU): computed in a matvec
            y = self._f32_matvec(a, b, bias)
            if y is not None:
                return y
        bshape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        B = math.prod(bshape)
        out = self._new(bshape + (M, N), od)
        if out.size == 0:
            return out
        if K == 0:
            self._fill(out, 0)
            return out if bias is None else self.binary("add", out, bias)
        if B > 65535:
            raise ValueError(f"ember: webgpu matmul batch {B} exceeds maxComputeWorkgroupsPerDimension (65535)")
        av, asb = self._batched(a, bshape)
        bv, bsb = self._batched(b, bshape)
        meta = [M, N, K, av.offset, asb, av.strides[-2], av.strides[-1],
                bv.offset, bsb, bv.strides[-2], bv.strides[-1]]
        ct = compute_type(wt)
        lt = self._mul_type(wa) if wa == wb and f16_products else ct  # f16 products only between two f16 operands
        floats = all(w in ("f32",) + _HALF for w in (wa, wb))
        vec = self._vec4_layout(meta, K, N) if (floats and self.matmul_kernel == "auto") else None
        ins, extra, add = [av, bv], [], ""
        if bias is not None:
            if bias.strides[0] != 1 and N > 1:  # read at an offset as it is, copied only when strided
                bias = self.contiguous(bias)
            ins, extra, add = ins + [bias], [wt], f" + {ct}(in2[prm[11] + n + j])"
        if vec is not None:  # 16-byte loads: the fast path for contiguous activations and weights
            meta, bk = vec
            p = self.pipelines.get("matmul_vec4", "matmul_vec4", wt, [f"vec4<{wa}>", f"vec4<{wb}>"] + extra, T=ct, L=lt,
                                   DOT="dot" if lt == ct else "dotw", FIX=fix or "", BK="true" if bk else "false",
                                   BIAS=add)
            t = 32
        else:
            kind = "tiled" if self.matmul_kernel == "auto" else self.matmul_kernel
            p = self.pipelines.get("matmul", f"matmul_{kind}", wt, [wa, wb] + extra, T=ct, L=lt, FIX=fix or "",
                                   BIAS=add)
            t = 64 if kind == "tiled" else 32  # output tile edge per workgroup
        if bias is not None:
            meta = meta + [bias.offset]
        groups = (-(-N // t), -(-M // t), B)
        self._run(p, meta, out, ins, groups)
        return out

    def _linear(self, x, w, b):
        """x (..., in) @ w.T + b in one dispatch (the bias is the matmul's epilogue), where the composed
        form is a matmul and an add kernel (or an add pending until the next op reads it)."""
        return self.matmul(x, self.permute(w, [1, 0]), bias=b)

    @staticmethod
    def _vec4_layout(meta, K, N):
        """meta in vec4 units when A runs along k and B along k or n in aligned 4-blocks, else None."""
        _, _, _, ao, asb, asm, ask, bo, bsb, bsk, bsn = meta
        if K % 4 or N % 4 or ask != 1 or any(v % 4 for v in (ao, asb, asm, bo, bsb)):
            return None
        if bsk == 1 and bsn % 4 == 0:
            bk = True
        elif bsn == 1 and bsk % 4 == 0:
            bk = False
        else:
            return None
        return meta[:3] + [ao // 4, asb // 4, asm // 4, 1, bo // 4, bsb // 4, bsk // 4 if not bk else 1,
                           bsn // 4 if bk else 1], bk

    # ------------------------------------------------------------------ conv
    def conv(self, x, w, stride, padding, dilation, groups):
        wt, _, fix = self._word(x.dtype)
        if compute_type(wt) != "f32":
            raise TypeError(f"ember: webgpu conv needs a float tensor, got {x.dtype.name}")
        nd = len(x.shape) - 2
        if nd > 3:
            raise ValueError(f"ember: webgpu conv supports 1-3 spatial dims, got input {x.shape}")
        x, w = self.contiguous(x), self.contiguous(w)
        n, c = x.shape[:2]
        o, k = w.shape[0], w.shape[2:]
        sp = x.shape[2:]
        osp = tuple((sp[i] + 2 * padding[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nd))
        if any(v <= 0 for v in osp):
            raise ValueError(f"ember: conv input spatial size {tuple(sp)} (padded by {tuple(padding)}) is smaller "
                             f"than the dilated kernel {tuple(dilation[i] * (k[i] - 1) + 1 for i in range(nd))}")
        if self.conv_kernel == "gemm" and math.prod((n, o) + osp):  # im2col on the GPU + tiled matmul
            return self._conv_gemm(x, w, stride, padding, dilation, groups, osp)
        out = self._new((n, o) + osp, x.dtype)
        total = out.size
        if total == 0:
            return out

        def p3(t, fill):
            return [fill] * (3 - nd) + list(t)
        meta = ([total, n, c, o, groups] + p3(sp, 1) + p3(osp, 1) + p3(k, 1) + p3(stride, 1)
                + p3(padding, 0) + p3(dilation, 1))
        p = self.pipelines.get("conv", "conv", wt, [wt, wt], FIX=fix or "")
        self._run(p, meta, out, [x, w], self._groups(total))
        return out

    # ------------------------------------------------------------------ indexing
    def _index_meta(self, shape, views, axis_stride):
        return self._view_meta(math.prod(shape), shape, views, [0, axis_stride])

    def gather(self, x, axis, idx):
        idx = self._dev(idx)
        out = self._new(idx.shape, x.dtype)
        if out.size == 0:
            return out
        wt = self._word(x.dtype)[0]
        xst = list(x.strides)
        xst[axis] = 0
        views = [(idx.offset, idx.strides), (x.offset, tuple(xst))]
        p = self.pipelines.get("index", "gather", wt, [wt, "i32"])
        self._run(p, self._index_meta(idx.shape, views, x.strides[axis]), out, [x, idx], self._groups(out.size))
        return out

    def index_select(self, x, axis, idx):
        idx = self._dev(idx)
        shape = list(x.shape)
        shape[axis] = idx.shape[0]
        st = [0] * len(shape)
        st[axis] = idx.strides[0]
        return self.gather(x, axis, GArray(idx.storage, tuple(shape), tuple(st), idx.offset, idx.dtype))

    def scatter(self, x, axis, idx, src, reduce):
        wt, _, fix = self._word(x.dtype)
        idx, src = self._dev(idx), self._dev(src)
        if wt in _HALF and reduce is not None:  # no 16-bit atomics: accumulate in float32 words
            f = D.float32
            return self.cast(self.scatter(self.cast(x, f), axis, idx, self.cast(src, f), reduce), x.dtype)
        out = self._new(x.shape, x.dtype)
        self._copy_into(out, x)
        if idx.size == 0:
            return out
        ost = list(out.strides)
        ost[axis] = 0
        views = [(idx.offset, idx.strides), (src.offset, src.strides[:len(idx.shape)]), (0, tuple(ost))]
        meta = self._index_meta(idx.shape, views, out.strides[axis])
        if reduce is None:
            p = self.pipelines.get("index", "scatter_set", wt, [wt, "i32"], ADD="")
        else:
            add = ("loop { let old = atomicLoad(&out[t]); "
                   "let r = atomicCompareExchangeWeak(&out[t], old, bitcast<u32>(bitcast<f32>(old) + in0[w.y])); "
                   "if (r.exchanged) { break; } }") if wt == "f32" else "atomicAdd(&out[t], in0[w.y]);"
            p = self.pipelines.get("index", "scatter_add", "u32" if wt == "f32" else wt, [wt, "i32"],
                                   atomic_out=True, ADD=add)
        self._run(p, meta, out, [src, idx], self._groups(idx.size))
        if reduce is not None and fix:  # sums of rounded values need rounding again
            out = self._map(x.dtype, "a", [out])
        return out

    # ------------------------------------------------------------------ fused row ops
    def _dummy(self):
        d = getattr(self, "_dummy_arr", None)
        if d is None:
            d = self._dummy_arr = self._new((1,), D.float32)
        return d

    def _float_rows(self, x, what):
        wt, _, fix = self._word(x.dtype)
        if compute_type(wt) != "f32":
            raise TypeError(f"ember: webgpu {what} needs a float tensor, got {x.dtype.name}")
        return fix or ""

    def _wt(self, x):
        return self._word(x.dtype)[0]

    def _softmax(self, x, axis, log=False):
        fix = self._float_rows(x, "softmax")

        def run(xc):
            out = self._new(xc.shape, x.dtype)
            n = xc.shape[-1] if xc.shape else 1
            rows = xc.size // max(n, 1)
            if rows and n:
                p = self.pipelines.get("norm", "softmax", self._wt(x), [self._wt(x)], FIX=fix,
                                       LOG="true" if log else "false")
                self._run(p, [rows, n], out, [xc], _row_groups(rows))
            return out
        return self._last_axis(x, axis, run)

    def _norm(self, x, w, b, eps, rms):
        self._float_rows(x, "rms_norm" if rms else "layer_norm")
        lazy = self._lazy_norm(x, w, b, eps, rms)  # a decode step's norm: computed by the matvec reading it
        if lazy is not None:
            return lazy
        out = self._new(x.shape, x.dtype)
        self._norm_into(out, x, w, b, eps, rms)
        return out

    def _norm_into(self, out, x, w, b, eps, rms):
        fix = self._float_rows(x, "rms_norm" if rms else "layer_norm")
        n = x.shape[-1]
        rows = x.size // max(n, 1)
        if rows and n:
            flags = (1 if w is not None else 0) | (2 if b is not None else 0)
            ins = [self.contiguous(w) if w is not None else self._dummy(),
                   self.contiguous(b) if b is not None else self._dummy()]
            node = self._norm_prologue(x) if self.fuse else None
            meta = [rows, n, self._bits(eps, D.float32), flags]
            pre, rw, inc = "", (), ()
            if node is not None:  # x is a pending residual add: computed here, written to its buffer (fusion.py)
                x.storage.node = None
                self._pending.discard(x.storage)
                loads, expr = self._leaf_loads(node, index="j", first=3, sbase=4)
                pre = ("for (var r = lid; r < n; r = r + 256u) { let j = base + r; "
                       + " ".join(loads) + f" in0[j] = {expr}; }}")
                rw, inc, meta = (0,), ("elementwise",), meta + [bits for _, bits in node.scalars]
                ins += node.leaves
                node.leaves = node.views = ()
            else:
                x = self.contiguous(x)
            ins = [x] + ins
            p = self.pipelines.get("norm", "norm", self._wt(x), [self._wt(t) for t in ins], rw=rw, include=inc, FIX=fix,
                                   RMS="true" if rms else "false", PRE=pre)
            self._run(p, meta, out, ins, _row_groups(rows))

    def _attention(self, q, k, v, mask, scale, causal):
        """softmax(q k^T * scale + mask) v in three kernels: QK^T matmul, fused scale+mask+causal softmax over
        score rows, PV matmul. (The one-kernel online-softmax form, attention.wgsl, is the registry's flash_attention
        op, chosen by its tuning rule: fused.choose_flash.)"""
        self._float_rows(q, "attention")
        # scores and probabilities in float32 words whatever q's dtype; 16-bit q, k, v are read in their own
        # words (native float16: f16 q.k products) and the output rounded once, by the PV matmul's store
        f = D.float32
        nd = len(q.shape)
        s = self.matmul(q, self.permute(k, list(range(nd - 2)) + [nd - 1, nd - 2]), out_dtype=f)  # (..., L, S)
        L, S = s.shape[-2:]
        bshape = s.shape[:-2]
        rows = s.size // max(S, 1)
        p_ = self._new(s.shape, f)
        if rows and S:
            flags, mview, mb = (8 if causal else 0), self._dummy(), 0
            mrow = mcol = moff = 0
            if mask is not None:
                mview, mb = self._batched(self.expand(mask, s.shape), bshape)
                flags |= 4
                mrow, mcol, moff = mview.strides[-2], mview.strides[-1], mview.offset
            meta = [rows, S, self._bits(scale, D.float32), flags, mrow, mb, L, 0, moff, mcol]  # causal: top-left aligned (torch)
            pipe = self.pipelines.get("norm", "attn_softmax", "f32", ["f32", self._wt(mview)], FIX="")
            self._run(pipe, meta, p_, [s, mview], _row_groups(rows))
        return self.matmul(p_, v, out_dtype=q.dtype)
