"""The WebGPU backend: every primitive of ember/primitives.py as WGSL compute kernels.

Arrays (buffers.GArray) stay on the GPU between ops; data crosses to the host only in
`to_numpy` / `to_numpy_async`. Movement ops (reshape of dense arrays, permute, expand, slice)
are zero-copy views; every kernel reads strided views directly. The adapter (native wgpu or
the browser's navigator.gpu) is picked at first use; `configure()` chooses power preference
and native backend before that. Nothing falls back to the CPU: quantized weights are uploaded
once as GGML blocks and decoded in WGSL (backend_quant.py); `counters()` reports dispatches and
bytes moved, so tests can assert that a decode step reads back only its logits.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ember import dtypes as D
from ember import settings
from ember.primitives import Backend

from . import kernels
from .adapter_choice import describe
from .backend_compute import ComputeMixin
from .backend_custom import CustomKernelMixin
from .backend_quant import QuantMixin
from .backend_f16 import Pack16Mixin
from .conv_gemm import ConvGemmMixin
from .fusion import FusionMixin, new_pending_set
from .norm_prologue import NormPrologueMixin
from .pack16 import PACKED
from .buffers import BufferPool, GArray, Storage, compute_type, contiguous_strides

MAXD = 8  # dims a view may have after merging (meta layout in common.wgsl)
_META_CACHE_MAX = 4096
_SETTINGS = {"power_preference": settings.get("EMBER_WEBGPU_POWER"), "backend": settings.get("EMBER_WEBGPU_BACKEND")}
_KIND = {"f32": "f", "f16": "f", "bf16x2": "f", "f16x2": "f", "i32": "i", "u32": "u"}
_CMP = {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}


def configure(power_preference="high-performance", backend=None):
    """Adapter choice for the next WebGPUBackend: power_preference 'high-performance' or
    'low-power'; backend (native only) 'vulkan', 'metal', 'd3d12' or 'gl'."""
    if power_preference not in ("high-performance", "low-power"):
        raise ValueError(f"ember: power_preference must be 'high-performance' or 'low-power', got {power_preference!r}")
    _SETTINGS.update(power_preference=power_preference, backend=backend)


_READY: list = []  # a page's adapter created ahead by init_async()


async def init_async(power_preference=None):
    """Create the page's GPU device without blocking (required where JSPI is missing); the
    next `ember.device("webgpu")` then uses it. A no-op outside the browser."""
    if sys.platform == "emscripten" and not _READY:
        from .adapter_browser import BrowserAdapter
        _READY.append(await BrowserAdapter.create(power_preference or _SETTINGS["power_preference"]))


def _make_adapter():
    if _READY:
        return _READY.pop()
    if sys.platform == "emscripten":
        from .adapter_browser import BrowserAdapter
        return BrowserAdapter(_SETTINGS["power_preference"])
    from .adapter_native import NativeAdapter
    return NativeAdapter(_SETTINGS["power_preference"], _SETTINGS["backend"])


def _groups(n, per_group=256):
    """Workgroup grid covering n items; 2-D once past the 65535-per-dimension limit."""
    g = max(1, -(-n // per_group))
    if g <= 65535:
        return (g, 1, 1)
    return (65535, -(-g // 65535), 1)


def merge_dims(shape, views):
    """Drop size-1 dims and merge dims that are contiguous in every view (fewer index steps)."""
    dims = [(s, [v[1][d] for v in views]) for d, s in enumerate(shape) if s != 1]
    out = []
    for s, st in dims:
        if out and all(p == q * s for p, q in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * s, st)
        else:
            out.append((s, st))
    return tuple(s for s, _ in out), [(v[0], tuple(st[k] for _, st in out)) for k, v in enumerate(views)]


class WebGPUBackend(ComputeMixin, QuantMixin, CustomKernelMixin, Pack16Mixin, FusionMixin, NormPrologueMixin,
                    ConvGemmMixin, Backend):
    name = "webgpu"
    _groups = staticmethod(_groups)

    def __init__(self, index=0):
        self.index = index
        self.adapter = _make_adapter()
        self.pool = BufferPool(self.adapter)
        self.pipelines = kernels.PipelineCache(self.adapter)
        self._meta: dict = {}
        # what crossed between host and GPU (counters(); tests assert a decode step stays on the GPU)
        self.dispatches = 0
        self.host_uploads = 0  # CPU arrays passed to primitives (see _dev)
        self.bytes_uploaded = 0
        self.bytes_read = 0
        self.readbacks = 0
        self.has_f16 = "shader-f16" in self.adapter.features
        self._init_words()  # dtype -> storage word (backend_f16.py)
        self.available = True
        # elementwise chains fused into one kernel each (fusion.py); 0 dispatches every op (bench: before/after)
        self.fuse = settings.get("EMBER_WEBGPU_FUSE")
        self._pending = new_pending_set()
        # a decode step's norm inside the matvec reading it, q/k/v in one matvec, rope + cache write + attention
        # in one kernel (norm_prologue.py, linears, rope_append_attention); 0: off (bench_webgpu.py: before/after)
        self.decode_fusion = settings.get("EMBER_WEBGPU_DECODE_FUSION")
        self._held_write = None  # a KV-cache write waiting to share its dispatch with the next one (_write_into)
        # "auto": vec4 loads when operands are aligned, else "tiled" (shared memory); "regs" (no
        # shared memory) suits CPU-emulated adapters: bench/bench_webgpu.py measures all three
        self.matmul_kernel = "auto"
        # threads per output column in the quantized matvec (1, 2, 4, ... 64; bench/bench_webgpu.py): 8 on a GPU;
        # 1 on a software adapter (lavapipe, SwiftShader), where each workgroup's barriers and the decode
        # prologue it repeats (norm_prologue.py) cost most: 64 columns a workgroup, 1.7x a decode step there
        self.qmatvec_split = 1 if getattr(self.adapter, "software", None) else 8
        # "gemm": im2col on the GPU + the tiled matmul (conv_gemm.py); "direct": conv.wgsl, one thread per output
        self.conv_kernel = "gemm"

    def __repr__(self):
        return f"WebGPUBackend({self.adapter.info})"

    @property
    def description(self):
        """The adapter, vendor/architecture, key limits, f16, whether `auto` skips it, and how float16/bfloat16
        are stored and computed (`ember info`)."""
        return describe(self.adapter.details, self.adapter.limits, self.adapter.features) + "; " + self.half_note()

    def supports(self, dtype):
        """float64 has no WGSL type; every other ember dtype is stored in 4-byte words."""
        return dtype in self.words

    # ============================================================== plumbing
    def _word(self, dtype):
        w = self.words.get(dtype)
        if w is None:
            raise TypeError(f"ember: webgpu has no {dtype.name} (WGSL lacks 64-bit floats); "
                            f"cast to float32 first (backend.supports(dtype) tells ahead)")
        return w

    def _dev(self, a):
        """The core sometimes hands a CPU index array (x[cpu_index]; torch allows it for CUDA too):
        upload it explicitly and count it, so no host data is ever read silently."""
        if isinstance(a, GArray):
            return a
        a = np.asarray(a)
        self.host_uploads += 1
        return self.from_numpy(a, D.FROM_NP[a.dtype] if a.dtype != np.uint16 else D.bfloat16)

    def _new(self, shape, dtype):
        shape = tuple(map(int, shape))
        st = Storage(self.pool, self._nbytes(math.prod(shape), dtype))
        if dtype in self.HALF_DTYPES:
            self._half_storages.add(st)  # set_pack16 refuses while any is alive (backend_f16.py)
        return GArray(st, shape, contiguous_strides(shape), 0, dtype)

    def _nbytes(self, n, dtype):
        size = np.dtype(self._word(dtype)[1]).itemsize * max(n, 1)
        return (size + 3) & ~3  # buffers and copies come in 4-byte units

    def _meta_handle(self, words):
        key = tuple(words)
        h = self._meta.get(key)
        if h is None:
            if len(self._meta) >= _META_CACHE_MAX:
                self.adapter.flush()
                self._meta.clear()
            # i32 values wrap to their bits
            h = self._meta[key] = self.adapter.meta(np.asarray(words, dtype=np.int64).astype(np.uint32))
        return h

    def _run(self, pipeline, meta, out, inputs, groups):
        if isinstance(pipeline, kernels.PackedStore):  # a packed output computed in f32 words first
            self._packed_from(out, lambda tmp: self._run(pipeline.f32, meta, tmp, inputs, groups))
            return
        self._dispatch(pipeline, [self._meta_handle(meta), out.storage.handle] + [x.storage.handle for x in inputs],
                       groups)

    def _dispatch(self, pipeline, handles, groups):
        """Every dispatch goes through here: a held KV-cache write runs first (_write_into), and it is counted."""
        if self._held_write is not None:
            self._flush_write()
        self.adapter.dispatch(pipeline, handles, groups)
        self.dispatches += 1

    def _view_meta(self, n, shape, views, scalars=()):
        """meta words in the common layout (see common.wgsl)."""
        if len(shape) > MAXD:
            raise ValueError(f"ember: webgpu kernels address at most {MAXD} dims, got shape {shape}")
        m = [0] * (16 + 9 * len(views))
        m[0], m[1] = n, len(shape)
        cs = contiguous_strides(shape)
        for k, (off, st) in enumerate(views):
            if off == 0 and tuple(st) == cs:
                m[2] |= 1 << k
            m[16 + 9 * k] = off
            m[17 + 9 * k:17 + 9 * k + len(st)] = st
        m[3:3 + len(scalars)] = scalars
        m[8:8 + len(shape)] = shape
        return m

    def counters(self):
        """Dispatches recorded, arrays uploaded from CPU arrays handed to primitives, bytes
        uploaded and read back, readbacks: since this backend was made (diff two calls)."""
        return {"dispatches": self.dispatches, "host_uploads": self.host_uploads,
                "bytes_uploaded": self.bytes_uploaded, "bytes_read": self.bytes_read, "readbacks": self.readbacks}

    def _upload(self, view, words):
        """Write a contiguous word array to the start of a fresh buffer view, counting the bytes."""
        self.adapter.write(view.storage.handle, words)
        self.bytes_uploaded += words.nbytes

    def _count_read(self, nbytes):
        self.bytes_read += nbytes
        self.readbacks += 1

    def _bits(self, value, dtype):
        """A Python scalar as the 32-bit word pattern of dtype's GPU storage."""
        wt, wnp, fix = self._word(dtype)
        if compute_type(wt) == "f32":
            v = np.float32(value)
            if dtype is D.float16:
                v = np.float32(np.float16(v))
            elif dtype is D.bfloat16:
                v = D.bf16_bits_to_f32(D.f32_to_bf16_bits(np.array([v], np.float32)))[0]
            return int(v.view(np.uint32))
        v = int(value)
        if wt == "i32":
            if not -2**31 <= v < 2**31:
                raise ValueError(f"ember: webgpu stores {dtype.name} as int32; scalar {v} is out of range")
            return v & 0xFFFFFFFF
        return (int(bool(v)) if dtype is D.bool_ else v) & 0xFFFFFFFF

    # ============================================================== transfer / creation
    def from_numpy(self, a, dtype):
        wt, wnp, fix = self._word(dtype)
        a = np.asarray(a)
        if self._is_packed(dtype):
            w = self._packed_bits(a, dtype)
        elif dtype is D.bfloat16:
            w = D.bf16_bits_to_f32(a.astype(np.uint16, copy=False))
        elif dtype is D.int64 and a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < -2**31 or hi >= 2**31:
                raise ValueError(f"ember: webgpu stores int64 as int32 (WGSL has no i64); values in "
                                 f"[{lo}, {hi}] of the {a.shape} tensor are out of range")
            w = a.astype(np.int32)
        elif dtype is D.float16 or a.dtype != dtype.np:
            w = a.astype(dtype.np).astype(wnp)
        else:
            w = a.astype(wnp, copy=False)
        out = self._new(a.shape, dtype)
        if w.size:
            w = np.ascontiguousarray(w).reshape(-1)
            if w.nbytes % 4:  # copies move whole 4-byte units (odd-length f16 arrays)
                w = np.concatenate([w, np.zeros(1, w.dtype)])
            self._upload(out, w)
        return out

    def _words(self, x):
        self._flush_write()
        x = self.contiguous(x)
        wnp = np.dtype(self._word(x.dtype)[1])
        nb = self._nbytes(x.size, x.dtype)
        self._count_read(nb)
        raw = self.adapter.read(x.storage.handle, nb)[: x.size * wnp.itemsize]
        return raw.view(wnp).reshape(x.shape)

    def _from_words(self, w, dtype):
        if w.dtype == np.uint16:  # packed 16-bit words: their bits are the storage
            return self._from_packed(w, dtype)
        if dtype is D.bfloat16:
            return D.f32_to_bf16_bits(w)
        if dtype is D.bool_:
            return w != 0
        return w.astype(dtype.np)

    def to_numpy(self, x):
        return self._from_words(self._words(x), x.dtype)

    async def to_numpy_async(self, x):
        """Readback that awaits the GPU instead of blocking (the page's path without JSPI)."""
        self._flush_write()
        x = self.contiguous(x)
        wnp = np.dtype(self._word(x.dtype)[1])
        nb = self._nbytes(x.size, x.dtype)
        self._count_read(nb)
        raw = (await self.adapter.read_async(x.storage.handle, nb))[: x.size * wnp.itemsize]
        return self._from_words(raw.view(wnp).reshape(x.shape), x.dtype)

    def full(self, shape, value, dtype):
        out = self._new(shape, dtype)
        self._fill(out, value)
        return out

    def _fill(self, view, value):
        n = view.size
        if n == 0:
            return
        wt = self._word(view.dtype)[0]
        shape, views = merge_dims(view.shape, [(view.offset, view.strides)])
        val = "f16(bitcast<f32>(prm[3]))" if wt == "f16" else f"bitcast<{compute_type(wt)}>(prm[3])"
        p = self.pipelines.get("copy", "fill", wt, [], VAL=val)
        self._run(p, self._view_meta(n, shape, views, [self._bits(value, view.dtype)]), view, [], _groups(n))

    def arange(self, start, stop, step, dtype):
        n = max(0, math.ceil((stop - start) / step))
        out = self._new((n,), dtype)
        if n:
            wt, _, fix = self._word(dtype)
            ct = compute_type(wt)
            p = self.pipelines.get("copy", "arange", wt, [], FIX=fix or "", CT=ct)
            sd = D.float32 if ct == "f32" else dtype
            self._run(p, [n, 0, 0, self._bits(start, sd), self._bits(step, sd)], out, [], _groups(n))
        return out

    # ============================================================== meta
    def shape(self, x):
        return x.shape

    def dtype_of(self, x):
        return x.dtype

    def synchronize(self):
        self._flush_write()
        self.adapter.wait()

    # ============================================================== elementwise
    def _map(self, out_dtype, expr, inputs, scalar=None, fix=True):
        """out = expr over broadcast inputs (a, b, c) and an optional scalar word s."""
        shape = tuple(np.broadcast_shapes(*[x.shape for x in inputs]))
        n = math.prod(shape)
        wt, _, ofix = self._word(out_dtype)
        if ofix and fix:
            expr = f"{ofix}({expr})"
        if wt == "f16":  # rounded in integers first: NVIDIA's driver drops the f32 -> f16 -> f32 of a fused chain
            expr = f"f16(fix_f16({expr}))" if fix else f"f16({expr})"
        # pending until read: a chain of elementwise ops becomes one kernel (fusion.py); packed 16-bit words
        # (opt-in, pack16.py) dispatch each op, as fusion's generated loads read whole words
        if self.fuse and n and not any(self._is_packed(t) for t in (out_dtype, *[x.dtype for x in inputs])):
            lazy = self._fused_map(shape, out_dtype, expr, inputs, scalar)
            if lazy is not None:
                return lazy
        out = self._new(shape, out_dtype)
        if n == 0:
            return out
        views = [(x.offset, self._bstrides(x, shape)) for x in inputs]
        mshape, views = merge_dims(shape, views)
        names = "abc"
        cs = contiguous_strides(mshape)
        # a view that walks its buffer in order is read at i directly: no index loop in the kernel
        wts = [self._word(x.dtype)[0] for x in inputs]
        loads = [f"let {names[k]} = {compute_type(wts[k])}(in{k}[{'i' if (off == 0 and st == cs) else f'view_index(i, {k}u)'}]);"
                 for k, (off, st) in enumerate(views)]
        if scalar is not None:
            loads.append(f"let {names[len(inputs)]} = bitcast<{scalar[0]}>(prm[3]);")
        meta = self._view_meta(n, mshape, views, [] if scalar is None else [scalar[1]])
        if self._is_packed(out_dtype):  # a thread computes both halves of a word and stores it whole
            fmt = "bf16" if out_dtype is D.bfloat16 else "f16"
            p = self.pipelines.get("pack16", "map_pair", "u32", wts, include=("elementwise",),
                                   LOADS="\n            ".join(loads), EXPR=expr, FMT=fmt)
            self._run(p, meta, out, inputs, _groups(-(-n // 2)))
            return out
        p = self.pipelines.get("elementwise", "map", wt, wts, LOADS="\n    ".join(loads), EXPR=expr)
        self._run(p, meta, out, inputs, _groups(n))
        return out

    @staticmethod
    def _bstrides(x, shape):
        """x's strides broadcast to `shape` (zero on broadcast and new leading dims)."""
        lead = len(shape) - len(x.shape)
        return tuple([0] * lead + [0 if (s == 1 and t != 1) else st
                                   for s, t, st in zip(x.shape, shape[lead:], x.strides)])

    def _fn(self, op, kind, what):
        name = f"op_{op}_{kind}"
        if not kernels.has_function("elementwise", name):
            raise TypeError(f"ember: webgpu has no {what} '{op}' for {kind}32 storage")
        return name

    def unary(self, op, x):
        if op == "not":
            return self._map(D.bool_, "op_not_u(a)", [self.cast(x, D.bool_)])
        kind = _KIND[self._word(x.dtype)[0]]
        return self._map(x.dtype, f"{self._fn(op, kind, 'unary op')}(a)", [x])

    def binary(self, op, a, b):
        wt = self._word(a.dtype)[0]
        fn = self._fn(op, _KIND[wt], "binary op")
        cmp = op in _CMP
        if isinstance(b, GArray):
            args, scalar = [a, b], None
        else:
            ct = compute_type(wt)
            if op == "pow" and ct != "f32" and b < 0:
                raise ValueError("ember: integer tensor to a negative integer power")
            args, scalar = [a], (ct, self._bits(b, D.float32 if ct == "f32" else a.dtype))
        expr = f"select(0u, 1u, {fn}(a, b))" if cmp else f"{fn}(a, b)"
        return self._map(D.bool_ if cmp else a.dtype, expr, args, scalar)

    def where(self, cond, a, b):
        cond = self._dev(cond)
        if isinstance(b, GArray):
            return self._map(a.dtype, "select(c, b, a != 0u)", [cond, a, b], fix=False)
        ct = compute_type(self._word(a.dtype)[0])
        return self._map(a.dtype, "select(c, b, a != 0u)", [cond, a], (ct, self._bits(b, a.dtype)), fix=False)

    def cast(self, x, dtype):
        if x.dtype is dtype:
            return x
        sw, dw = compute_type(self._word(x.dtype)[0]), compute_type(self._word(dtype)[0])
        zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[sw]
        if dtype is D.bool_:
            return self._map(dtype, f"select(0u, 1u, a != {zero})", [x])
        if sw == dw:
            expr = "a"
        elif sw == "f32" and dw == "u32" and dtype is not D.uint32:
            expr = "u32(i32(trunc(a)))"  # to uint8: wrap like numpy's C cast
        else:
            expr = f"{dw}(a)"  # float -> int truncates toward zero; int <-> uint keeps bits
        return self._map(dtype, expr, [x])

    # ============================================================== movement (views where possible)
    @staticmethod
    def _dense(x):
        return all(n == 1 or a == b for n, a, b in zip(x.shape, x.strides, contiguous_strides(x.shape)))

    def reshape(self, x, shape):
        shape = tuple(int(s) for s in shape)
        if not self._dense(x):
            x = self.contiguous(x)
        return GArray(x.storage, shape, contiguous_strides(shape), x.offset, x.dtype)

    def permute(self, x, order):
        return GArray(x.storage, tuple(x.shape[o] for o in order), tuple(x.strides[o] for o in order),
                      x.offset, x.dtype)

    def expand(self, x, shape):
        shape = tuple(map(int, shape))
        return GArray(x.storage, shape, self._bstrides(x, shape), x.offset, x.dtype)

    def slice(self, x, starts, stops, steps):
        shape, strides, off = [], [], x.offset
        for n, st, a, b, s in zip(x.shape, x.strides, starts, stops, steps):
            shape.append(len(range(*slice(a, None if b < 0 else b, s).indices(n))))
            strides.append(st * s)
            off += a * st if shape[-1] else 0
        return GArray(x.storage, tuple(shape), tuple(strides), off, x.dtype)

    def _copy_into(self, dst, src):
        """dst (a view of a fresh buffer) <- src, both with the same shape and dtype."""
        n = src.size
        if n == 0:
            return
        wt = self._word(src.dtype)[0]
        shape, views = merge_dims(src.shape, [(dst.offset, dst.strides), (src.offset, src.strides)])
        p = self.pipelines.get("copy", "copy", wt, [wt], PAIR="")
        self._run(p, self._view_meta(n, shape, views), dst, [src], _groups(n))

    def _write_into(self, dst, src, starts):
        """src written into dst's buffer at `starts`, in place. The write waits for the next one: a KV cache's
        k row and v row (same shape, other buffers) go in one dispatch (copy.wgsl, $PAIR); anything else that
        dispatches or reads back first runs it alone (_flush_write): kernels see the writes in program order."""
        stops = [a + n for a, n in zip(starts, src.shape)]
        self._flush_readers(dst.storage)  # a pending op reading dst must see it before this write
        view = self.slice(dst, starts, stops, [1] * len(starts))
        held, self._held_write = self._held_write, None
        if held is not None and self._pairs(held, view, src):
            self._copy_pair(held, (view, src))
        else:
            if held is not None:
                self._copy_into(*held)
            if src.size and self.fuse and self._word(src.dtype)[0] not in PACKED:
                self._held_write = (view, src)
            else:
                self._copy_into(view, src)
        return dst

    def _flush_write(self):
        """Run the held _write_into (before any other dispatch or readback)."""
        held, self._held_write = self._held_write, None
        if held is not None:
            self._copy_into(*held)

    @staticmethod
    def _pairs(held, view, src):
        """Whether two writes can run in one kernel: same shape and dtype, other buffers, and neither reads
        what the other writes; src not pending (computing it now could read the held write's buffer early)."""
        hv, hs = held
        return (hs.shape == src.shape and hs.dtype is src.dtype and hv.storage is not view.storage
                and src.storage is not hv.storage and hs.storage is not view.storage
                and getattr(src.storage, "node", None) is None)

    def _copy_pair(self, first, second):
        (d0, s0), (d1, s1) = first, second
        wt = self._word(s0.dtype)[0]
        shape, views = merge_dims(s0.shape, [(d0.offset, d0.strides), (s0.offset, s0.strides),
                                             (d1.offset, d1.strides), (s1.offset, s1.strides)])
        p = self.pipelines.get("copy", "copy", wt, [wt, wt, wt], rw=(1,), PAIR="in1[view_index(i, 2u)] = in2[view_index(i, 3u)];")
        self._run(p, self._view_meta(s0.size, shape, views), d0, [s0, d1, s1], _groups(s0.size))

    def contiguous(self, x):
        if x.contiguous:
            return x
        out = self._new(x.shape, x.dtype)
        self._copy_into(out, x)
        return out

    def pad(self, x, pads, value):
        shape = tuple(s + a + b for s, (a, b) in zip(x.shape, pads))
        out = self.full(shape, value, x.dtype)
        inner = self.slice(out, [a for a, _ in pads], [a + s for (a, _), s in zip(pads, x.shape)], [1] * len(shape))
        self._copy_into(inner, x)
        return out

    def cat(self, xs, axis):
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = self._new(shape, xs[0].dtype)
        at = 0
        for x in xs:
            starts = [0] * len(shape)
            stops = list(shape)
            starts[axis], stops[axis] = at, at + x.shape[axis]
            self._copy_into(self.slice(out, starts, stops, [1] * len(shape)), x)
            at += x.shape[axis]
        return out
