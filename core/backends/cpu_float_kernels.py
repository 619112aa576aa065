"""The CPU backend's float32 C kernels: direct convolution with its epilogue (cpu_kernels/conv.c), attention in
one online-softmax pass (attention.c) and the row kernels of dense encoders (rows.c: LayerNorm, GELU), from the
same sources natively (cpu_native_kernels.py, threaded by threads.c) and in the page (the wasm module).

Each kernel reads an intptr_t parameter block (addresses, sizes) and computes ranges of output rows;
`ember_<kernel>(params)` splits the rows between threads through parallel.h (threads.c's workers natively; in the
page, the kernel pool's workers where it has one: cpu_pool_kernels.PoolFloatKernels, else the Pyodide side module
on one thread, serial.c). Every row is computed alike in any range, so the result does not
depend on the thread count.

`kernels()` is the loaded set where compiled kernels run here (None elsewhere: the callers compose); the
registry's `choose` hooks (cpu_fused.py) say which calls take them.
"""
from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np

from . import cpu_matmul
from .cpu_wasm_kernels import EP_ACT, EP_NONE, EP_ROWS

_F32 = np.dtype(np.float32)
_BITS = np.dtype(np.intp).itemsize * 8
ACTS = {None: 0, "none": 0, "relu": 1, "silu": 2, "gelu": 3, "gelu_tanh": 4}
_P, _I = ctypes.c_void_p, ctypes.c_int
# name: (argtypes, restype) of the native library's entry points (the page's ctypes takes plain ints)
_SIGNATURES = {
    "ember_conv2d": ([_P], _I), "ember_conv2d_scratch_floats": ([_P], ctypes.c_long),
    "ember_conv3x3_winograd": ([_P], _I), "ember_conv3x3_winograd_scratch_floats": ([_P], ctypes.c_long),
    "ember_attention": ([_P], _I), "ember_attention_scratch_floats": ([_P, _I], ctypes.c_long),
    "ember_layer_norm": ([_P], _I), "ember_bias_act": ([_P], _I),
    "ember_xattn_decode": ([_P, _P, _P, _P], _I), "ember_xattn_decode_scratch_bytes": ([_P, _I], ctypes.c_long),
    "ember_max_pool2d": ([_P], _I), "ember_upsample_nearest": ([_P], _I),
}


_from_buffer, _address_of = ctypes.c_char.from_buffer, ctypes.addressof


def _buffer_addr(a: np.ndarray) -> int:
    """a's address: through ctypes for the arrays most calls pass (a fresh or written one, contiguous: ~0.2 against
    ~0.9 us for __array_interface__'s; a small model's kernel call passes 4-6 of them)."""
    f = a.flags
    if f.c_contiguous and f.writeable and a.size:
        return _address_of(_from_buffer(a))
    return a.__array_interface__["data"][0]


def _page_addr(a: np.ndarray) -> int:
    """_buffer_addr in the page, as an intp (a wasm32 heap past 2 GiB has addresses >= 2**31: the same bits,
    negative); ~0.8 against ~2.1 us a call under Pyodide."""
    f = a.flags
    p = _address_of(_from_buffer(a)) if f.c_contiguous and f.writeable and a.size else \
        a.__array_interface__["data"][0]
    return p - (1 << _BITS) if p >= 1 << (_BITS - 1) else p


_addr = _page_addr if cpu_matmul.NO_BLAS else _buffer_addr  # (the page's addresses need the sign fix)
_thread = threading.get_ident
_F32_STRUCT, _U32_STRUCT = struct.Struct("<f"), struct.Struct("<I")


def f32_bits(v: float) -> int:
    """v rounded to float32, its bits as an unsigned int (a kernel's float parameter in an intptr_t block)."""
    try:
        return _U32_STRUCT.unpack(_F32_STRUCT.pack(v))[0]
    except OverflowError:  # past float32's range: inf, as numpy rounds it
        return int(np.array(v, _F32).view(np.uint32))


class ParamBlock:
    """A kernel's parameter block for one plan of calls (one set of shapes): the sizes kept, the arrays' addresses
    written each call. The thread that made it writes its own block in place; any other thread a copy (the kernels
    run without the GIL, so two calls can be inside at once). The weights' and bias's addresses (a model's
    constants, at slots w_at and w_at + 1) are kept while the same arrays come; derive(w), where given, is the
    array the kernel reads in w's place (a copy in its layout), kept with them."""
    __slots__ = ("template", "w_at", "own", "weights", "derive")

    def __init__(self, template: np.ndarray, w_at: int, derive=None):
        own = template.copy()
        self.template, self.w_at, self.own = template, w_at, (_thread(), own, _addr(own))
        self.weights = (None, None, 0, 0, None)  # (w, b, their addresses, derive(w)): one assignment, so a thread
        self.derive = derive                     # sees all five

    def take(self, w, b) -> tuple[np.ndarray, int]:
        """(the block to write this call's other addresses into, its address), w's and b's already in."""
        own = self.own
        if own[0] == _thread():
            params, at = own[1], own[2]
        else:
            params = self.template.copy()
            at = _addr(params)
        k, held = self.w_at, self.weights
        if held[0] is w and held[1] is b:
            params[k], params[k + 1] = held[2], held[3]
        else:
            read = w if self.derive is None else self.derive(w)
            params[k], params[k + 1] = _addr(read), 0 if b is None else _addr(b)
            self.weights = (w, b, params[k], params[k + 1], read)
        return params, at


class FloatKernels:
    """The float kernels of one loaded library (native or wasm)."""

    def __init__(self, lib, native: bool, gemm=None):
        self.native = native
        self.gemm = gemm  # the page's side module (cpu_wasm_kernels.WasmKernels, its GEMM: pointwise); natively None
        # its GEMM's scratch, which the page's strided convs and Winograd's products run on gemm.c with (conv.c)
        self._gemm_scratch = 0 if gemm is None else gemm._scratch_ptr
        for name, (args, res) in _SIGNATURES.items():
            f = getattr(lib, name)
            if native:
                f.argtypes, f.restype = args, res
            setattr(self, "_" + name.removeprefix("ember_"), f)
        self._scratch = threading.local()  # .buf: this thread's scratch, .at: (its address, its floats)
        self._conv_plans = {}  # (shapes, ...) -> _conv_plan's

    def _call(self, fn, params: np.ndarray) -> int:
        return fn(_addr(params))

    def _scratch_floats(self, n: int) -> np.ndarray:
        """A scratch buffer of at least n floats, kept for the next calls (the page faults of a fresh one cost
        as much as a small convolution); one per Python thread (two threads' calls run at once: the kernels
        release the GIL)."""
        mine = self._scratch
        got = getattr(mine, "buf", None)
        if got is None or got.size < n:
            got = mine.buf = np.empty(max(n, 2 * (0 if got is None else got.size)), _F32)
            mine.at = (_addr(got), got.size)
        return got

    # ---------------------------------------------------------------------------------------- convolution
    def conv2d(self, x, w, b, stride, padding, dilation, groups, act=None):
        """x (N, C, H, W), w (O, C / groups, KH, KW), b (O,) or None, float32 C-contiguous -> act(conv(x, w) + b)
        (N, O, Ho, Wo) float32; act: None, 'relu', 'silu', 'gelu' (erf), 'gelu_tanh'. A 1-D conv (x (N, C, W),
        w (O, C / groups, KW), stride/padding/dilation of one axis) is the conv2d of one row: (N, O, Wo)."""
        key = (x.shape, w.shape, b is None, stride, padding, dilation, groups, act)
        got = self._conv_plans.get(key)
        if got is None:
            got = self._conv_plan(x, w, b, stride, padding, dilation, groups, act)
            if len(self._conv_plans) >= 64:  # (a model fed ever new shapes: recomputed, never grown past this)
                self._conv_plans.clear()
            self._conv_plans[key] = got
        # a call of shapes seen before (every layer of a model after its first run): the sizes' parameter block
        # copied, the arrays' addresses written in; no scratch-size query (a streaming model's conv of a few
        # frames is ~10 us of work: this path was a third of it). The weights' and the scratch's addresses are
        # kept with the plan while the same arrays come (w and b are a model's constants)
        y_shape, block, size = got
        y = np.empty(y_shape, _F32)
        params, at = block.take(w, b)
        params[0], params[3] = _addr(x), _addr(y)
        scratch = getattr(self._scratch, "at", None)
        params[4] = scratch[0] if scratch is not None and scratch[1] >= size else _addr(self._scratch_floats(size))
        if y.size and self._conv2d(at) != 0:
            raise ValueError("ember: conv2d kernel refused its parameters")
        return y

    def _conv_plan(self, x, w, b, stride, padding, dilation, groups, act):
        """(y's shape, its ParamBlock, scratch floats) of a conv2d call."""
        if x.ndim == 3:  # a 1-D conv: one row
            x_shape, w_shape = (x.shape[0], x.shape[1], 1, x.shape[2]), (*w.shape[:2], 1, w.shape[2])
            stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        else:
            x_shape, w_shape = x.shape, w.shape
        n, c, h, wd = x_shape
        o, _, kh, kw = w_shape
        ho = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        wo = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        params = np.array([0, 0, 0, 0, 0, n, c, h, wd, o, kh, kw, stride[0], stride[1], padding[0], padding[1],
                           dilation[0], dilation[1], groups, ACTS[act], self._gemm_scratch], np.intp)
        size = self._conv2d_scratch_floats(_addr(params))  # (reads the sizes only)
        if size < 0:
            raise ValueError(f"ember: conv2d kernel: parameters it does not take (x {x.shape}, w {w.shape}, "
                             f"stride {stride}, padding {padding}, dilation {dilation}, groups {groups})")
        return (n, o, wo) if x.ndim == 3 else (n, o, ho, wo), ParamBlock(params, 1), size

    def conv3x3_winograd(self, x, u, b, padding, act=None, tile_products=False):
        """act(conv(x, w) + b) for a 3x3 w of stride 1, dilation 1 and one group as Winograd's F(4x4, 3x3) (conv.c):
        x (N, C, H, W) float32 C-contiguous, u (36, O, C) float32 the weight's transform (winograd_weight), b (O,)
        or None -> (N, O, H + 2 ph - 2, W + 2 pw - 2). tile_products: the products on conv.c's tile natively too
        (the page's; natively gemm_native.c's where built: the same bits)."""
        n, c, h, wd = x.shape
        o = u.shape[1]
        ho, wo = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
        size = -1  # (checked before y is made: a negative size would be numpy's error)
        if u.shape == (36, o, c) and min(padding) >= 0 and min(n, o, ho, wo) >= 1:
            y = np.empty((n, o, ho, wo), _F32)
            params = np.array([_addr(x), _addr(u), 0 if b is None else _addr(b), _addr(y), 0, n, c, h, wd, o,
                               padding[0], padding[1], ACTS[act], int(tile_products), self._gemm_scratch], np.intp)
            size = self._conv3x3_winograd_scratch_floats(_addr(params))
        if size < 0:
            raise ValueError(f"ember: conv3x3_winograd kernel: parameters it does not take (x {x.shape}, u {u.shape}, "
                             f"padding {padding})")
        params[4] = _addr(self._scratch_floats(size))
        if self._call(self._conv3x3_winograd, params) != 0:
            raise ValueError("ember: conv3x3_winograd kernel refused its parameters")
        return y

    def pointwise(self, xs, w, b, act, direct: bool):
        """act(conv(cat(xs, 1), w) + b) for a plain 1x1 w (O, C, 1, 1) where this library has a path of its own for
        it, else None (the caller concatenates and convolves). In the page's side module (one thread), where the rule
        did not choose conv.c's direct conv for this map: gemm.c's product of w (O, C) and each image's pixels
        (C, H W) with the bias (per channel) and the activation in its epilogue, each panel while in L1: the bits
        of the backend's conv (numpy_conv's product on gemm.c) then bias_act, without that pass over y in memory
        (in V8 the activation's arithmetic, not the pass, is most of its time: about even). The parts are
        concatenated first (gemm.c reads one B)."""
        g = self.gemm
        n, _, h, wd = xs[0].shape
        o, c, p = w.shape[0], w.shape[1], h * wd
        if g is None or g._sgemm_ep is None or direct or cpu_matmul.deterministic() or \
                o * c * p < cpu_matmul._KERNEL_MIN_MNK or not o or not p:
            return None  # (deterministic mode: its products are the plain module's; a tiny one: einsum's)
        x = xs[0] if len(xs) == 1 else np.concatenate(xs, 1)
        w2 = (w if w.flags.c_contiguous else np.ascontiguousarray(w)).reshape(o, c)
        if b is not None and not b.flags.c_contiguous:
            b = np.ascontiguousarray(b)
        y = np.empty((n, o, h, wd), _F32)
        mode = EP_ROWS if b is not None else EP_ACT if act is not None else EP_NONE
        for i in range(n):
            xi = x[i].reshape(c, p)  # (a view where x's pixels are contiguous, else a copy)
            g.matmul_ep(w2, xi, y[i].reshape(o, p), b, mode, ACTS[act])
        return y

    # ---------------------------------------------------------------------------------------- attention
    def attention(self, q, k, v, mask, scale, causal):
        """softmax(q k^T scale + mask) v for q (B1, B2, L, D), k (B1, B2, S, D), v (B1, B2, S, Dv), mask None or
        float32 broadcasting to (B1, B2, L, S), causal: keys after the query masked (top-left); every operand with
        unit column stride. -> (B1, B2, L, Dv) float32: a view of a (B1, L, B2, Dv) array, the layout of a
        (batch, seq, heads, head_dim) projection."""
        b1, b2, l, d = q.shape
        s, dv = k.shape[2], v.shape[3]
        out = np.empty((b1, l, b2, dv), _F32).transpose(0, 2, 1, 3)
        if mask is None:
            m, ms = 0, (0, 0, 0)
        else:
            mask = np.broadcast_to(mask, (b1, b2, l, s))
            m, ms = _addr(mask), tuple(st // 4 for st in mask.strides[:3])
        bits = f32_bits(scale)
        params = np.array([_addr(q), _addr(k), _addr(v), m, _addr(out), 0, b1, b2, l, s, d, dv, int(bool(causal)),
                           bits, *_strides(q), *_strides(k), *_strides(v), *ms, *_strides(out)], np.intp)
        ptr = _addr(params)
        size = self._attention_scratch_floats(ptr, 2)
        if size < 0:
            raise ValueError(f"ember: attention kernel: shapes it does not take (q {q.shape}, k {k.shape}, v {v.shape})")
        params[5] = _addr(self._scratch_floats(size))
        if out.size and self._call(self._attention, params) != 0:
            raise ValueError("ember: attention kernel refused its parameters")
        return out

    # ---------------------------------------------------------------------------------------- decoding
    def xattn_decode(self, plan: np.ndarray, fparams: np.ndarray, x: np.ndarray, scratch: np.ndarray) -> int:
        """decode_xattn.c's ember_xattn_decode: x (dim,) float32 through the layers of `plan`
        (cpu_decode_xattn.py), in place, its matvecs and heads split between threads (parallel.h)."""
        return self._xattn_decode(_addr(plan), _addr(fparams), _addr(x), _addr(scratch))

    def xattn_decode_scratch_bytes(self, plan: np.ndarray, max_keys: int) -> int:
        return self._xattn_decode_scratch_bytes(_addr(plan), max_keys)

    # ---------------------------------------------------------------------------------------- rows
    def layer_norm(self, x, w, b, eps):
        """LayerNorm over the last axis of float32 x (any leading shape, rows of unit stride) -> a fresh array."""
        x2 = _rows(x)
        y = np.empty(x.shape, _F32)
        self._rows_call(self._layer_norm, x2, y.reshape(x2.shape), w, b, f32_bits(eps), 0)
        return y

    def bias_act(self, x, b, act, out=None, channels=0):
        """act(x + b) over float32 rows (the last axis), b per column (or per row of c channels with
        channels=c: a convolution's (N, C, ...) output), into `out` (may be x) or a fresh array."""
        shape = x.shape
        if channels:  # rows of one channel: (N C, spatial)
            x = np.ascontiguousarray(x).reshape(shape[0] * shape[1], -1)
        x2 = _rows(x)
        y = np.empty(shape, _F32) if out is None else out
        self._rows_call(self._bias_act, x2, y.reshape(x2.shape), None, b, ACTS[act], channels)
        return y

    # ---------------------------------------------------------------------------------------- feature maps
    def max_pool2d(self, x, kernel, stride, pads, dilation, out):
        """x (N, C, H, W) float32 -> (N, C, *out): the max of each window (kernel taps dilation apart, windows
        stride apart from (-pads[0], -pads[1])), -inf outside x, NaN where a window holds one (maps.c)."""
        x = np.ascontiguousarray(x)
        n, c, h, w = x.shape
        y = np.empty((n, c, *out), _F32)
        params = np.array([_addr(x), _addr(y), n * c, h, w, *out, *kernel, *stride, *pads, *dilation], np.intp)
        if y.size and self._call(self._max_pool2d, params) != 0:
            raise ValueError(f"ember: max_pool2d kernel: parameters it does not take (x {x.shape}, kernel {kernel}, "
                             f"stride {stride}, pads {pads}, dilation {dilation}, out {out})")
        return y

    def upsample_nearest(self, x, factors):
        """x (N, C, H, W) float32 -> (N, C, H fh, W fw): each pixel repeated into an fh x fw block (maps.c)."""
        x = np.ascontiguousarray(x)
        n, c, h, w = x.shape
        fh, fw = factors
        y = np.empty((n, c, h * fh, w * fw), _F32)
        params = np.array([_addr(x), _addr(y), n * c, h, w, fh, fw], np.intp)
        if y.size and self._call(self._upsample_nearest, params) != 0:
            raise ValueError(f"ember: upsample_nearest kernel: parameters it does not take (x {x.shape}, factors "
                             f"{factors})")
        return y

    def _rows_call(self, fn, x2, y2, w, b, arg, channels):
        if x2.size:
            params = np.array([_addr(x2), _addr(y2), 0 if w is None else _addr(w), 0 if b is None else _addr(b),
                               x2.shape[0], x2.shape[1], x2.strides[0] // 4, y2.strides[0] // 4, arg, channels],
                              np.intp)
            self._call(fn, params)


def _strides(a) -> tuple:
    return tuple(s // 4 for s in a.strides[:3])


def _rows(x: np.ndarray) -> np.ndarray:
    """x as (rows, cols) with unit column stride and a row stride in floats (a copy where it has none)."""
    if x.flags.c_contiguous:
        return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    if x.ndim == 2 and (x.strides[1] == 4 or x.shape[1] == 1) and x.strides[0] % 4 == 0:
        return x
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


_loaded: list = []


def kernels() -> FloatKernels | None:
    """The float kernels where compiled kernels run here (the page's kernel pool, its wasm module, else the native
    build), or None."""
    if not _loaded:
        _loaded.append(_load())
    if _loaded[0] is not None and cpu_matmul.NO_BLAS:
        pool = cpu_matmul.pool_kernels()  # (looked up at every call: a pool that lost a worker is left)
        if pool is not None:
            return pool.float_kernels(_loaded[0])
    return _loaded[0]


def _load():
    if cpu_matmul.NO_BLAS:
        k = cpu_matmul.wasm_kernels()
        return None if k is None else FloatKernels(k.lib, native=False, gemm=k)
    k = cpu_matmul.native_kernels()
    return None if k is None else FloatKernels(k.lib, native=True)
