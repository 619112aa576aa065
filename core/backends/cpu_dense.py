"""The CPU backend's kernels for convolutions and dense encoders (kernel-registry entries, ember.kernels): the float
C kernels (cpu_float_kernels.py: conv.c, attention.c, rows.c) where compiled kernels run here, else the numpy
paths (im2col + BLAS, blocked attention, chunked GELU).

Which calls take the C kernels is each op's `choose` rule beside it, with its numbers in the registry's `tune`:
the direct convolution where im2col + BLAS loses (kernels wider than 1x1 in both axes, measured on YOLOv8s,
ResNet and Whisper shapes: bench/bench_core.py, bench/bench_yolo.py) and Winograd's F(4x4, 3x3) for the 3x3
stride-1 ones of many channels (_winograd), one-pass attention past a number of
scores, LayerNorm and GELU rows always; none of them in deterministic mode.
"""
from __future__ import annotations

import numpy as np

from .. import kernels as K
from . import cpu_fused, cpu_matmul
from .array_module_backend import _F32
from .array_module_fused import layer_norm as _layer_norm_numpy
from .cpu_float_kernels import ACTS as _ACT_IDS
from .cpu_float_kernels import kernels as _compiled


def float_kernels():
    """The float C kernels, or None: also None in deterministic mode, where the page's answers come from its
    GEMM/softmax sources alone (cpu_fused's page paths), built alike in the page and natively."""
    return None if cpu_matmul.deterministic() else _compiled()

_ACT_NAMES = {"gelu": "gelu", "gelu_tanh": "gelu_tanh", "silu": "silu", "relu": "relu", None: None}


def describe_conv(be=None):
    return "cpu_kernels/conv.c ember_conv2d (direct, epilogue fused) | conv_winograd.c (F(4x4, 3x3)) | " \
        "im2col + BLAS" if float_kernels() is not None \
        else "im2col bands + BLAS, bias added in place"


def describe_rows(be=None):
    return "cpu_kernels/rows.c (one pass a row)" if float_kernels() is not None else "numpy"


def describe_attention(be=None):
    return "cpu_kernels/attention.c ember_attention (online softmax) | numpy" if float_kernels() is not None \
        else "numpy (query-row blocks past 512k scores)"


# ============================================================================ convolution

def choose_conv(be, tune, x_shape, w_shape, stride, dilation, groups, padding=None):
    """The direct C convolution for this call, or im2col + BLAS? tune["mode"]: "c" always (where the kernel
    takes the call), "blas" never, "auto": kernels of at least tune["min_taps"] taps spanning both axes (a 1x1
    is one BLAS product without im2col, and a 1-D conv's im2col is cheap: BLAS wins both, bench_core), any
    output of at most tune["narrow"] pixels an image (conv.c's dot products: a streaming model's conv over a few
    frames, where im2col's numpy calls and BLAS's small-product cost are most of the time), and 1x1 convs: natively
    every plain one (gemm_native.c: _gemm_pointwise), elsewhere those over maps of at least tune["pointwise_pixels"]
    pixels (YOLOv8s's at 160 x 160: conv.c reads x in place, the activation in its epilogue, 5-13% ahead of BLAS
    and a pass for the activation; 3-12% behind it on smaller maps)."""
    key = (tune["mode"], tune["narrow"], tune["min_taps"], tune["pointwise_pixels"], x_shape, w_shape, stride, dilation,
           groups, padding)
    try:
        got = _CHOSEN.get(key)
    except TypeError:  # (a caller's list of strides)
        got = key = None
    if got is None:  # (decided once per shapes and tuning: a streaming model's conv asks every chunk)
        got = _choose_conv(tune, x_shape, w_shape, stride, dilation, groups, padding)
        if key is None:
            return got and float_kernels() is not None
        if len(_CHOSEN) >= 256:
            _CHOSEN.clear()
        _CHOSEN[key] = got
    return got and float_kernels() is not None


_CHOSEN: dict = {}


def _pointwise(x_shape, w_shape, stride, padding, groups) -> bool:
    """A plain 1x1 convolution: one group, stride 1, no padding (a product of the weight and each image's pixels)."""
    return len(x_shape) == 4 and len(w_shape) == 4 and w_shape[2] == w_shape[3] == 1 and groups == 1 and \
        tuple(stride) == (1, 1) and tuple(padding or (0, 0)) == (0, 0)


def _gemm_here() -> bool:
    kern = cpu_matmul.native_kernels()
    return kern is not None and kern.sgemm_width > 0


def _gemm_pointwise(xs, w, b, act):
    """act(conv(cat(xs, 1), w) + b) for a plain 1x1 convolution natively: gemm_native.c's product of the weight
    (O, C) and each image's pixels (C, H W) as they lie (the parts' channels read where each part lies, no
    concatenated copy), the bias and the activation in its epilogue. Each output is one multiply-add chain over
    the channels, then act(y + b): the bits of conv.c's 1x1 tile, which the page runs. YOLOv8s's 1x1 convs (AMD
    Zen 4): 11% faster than BLAS and an activation pass (and conv.c over 160 x 160) on two threads, level on one."""
    n, _, h, wd = xs[0].shape
    o, c = w.shape[:2]
    w2 = w.reshape(o, c)
    if not w2.flags.c_contiguous:
        w2 = np.ascontiguousarray(w2)
    b = b if b is None or b.flags.c_contiguous else np.ascontiguousarray(b)
    y = np.empty((n, o, h, wd), _F32)
    kern, act_id = cpu_matmul.native_kernels(), _ACT_IDS[act]
    for i in range(n):
        parts = []
        for x in xs:
            part = x[i].reshape(x.shape[1], h * wd)
            parts.append(part if part.strides[1] == 4 and part.strides[0] % 4 == 0 else np.ascontiguousarray(part))
        out = y[i].reshape(o, h * wd)
        if len(parts) == 1:
            kern.sgemm(w2, parts[0], act=act_id, row_bias=b, out=out)
        else:
            kern.sgemm_rows(w2, parts, b, act_id, out)
    return y


def conv_cat_act(be, xs, w, b, act):
    """act(conv(cat(xs, 1), w) + b) for a 1x1 w without the concatenation, with the bits conv_bias_act gives on the
    concatenation: natively _gemm_pointwise; in the page's kernel pool its parts go where the call's x goes
    (PoolFloatKernels.pointwise); in the page on one thread gemm.c's product with its epilogue, the parts
    concatenated (FloatKernels.pointwise). None elsewhere (conv.c's direct conv on one thread, deterministic
    mode, another dtype, mismatched parts, a call the pool would not take: the caller concatenates and convolves)."""
    fk = float_kernels()
    if fk is None or w.dtype is not _F32 or w.ndim != 4 or w.shape[2:] != (1, 1) or \
            (b is not None and (b.dtype is not _F32 or b.shape != w.shape[:1])):
        return None
    n, _, h, wd = xs[0].shape
    if any(x.dtype is not _F32 or x.ndim != 4 or x.shape[0] != n or x.shape[2:] != (h, wd) for x in xs) or \
            sum(x.shape[1] for x in xs) != w.shape[1]:
        return None
    if _gemm_here():
        return _gemm_pointwise(xs, w, b, act)
    takes = _takes_c(be, (n, w.shape[1], h, wd), w.shape, (1, 1), (1, 1), 1, (0, 0))
    return fk.pointwise(xs, w, b, act, direct=bool(takes))


def _g_rows(g0, g1, g2):
    """G's six rows on the three taps g0..g2 of a 3x3 weight's row or column (F(4x4, 3x3))."""
    return (g0 * 0.25, (g0 + g1 + g2) * (-1 / 6), (g0 - g1 + g2) * (-1 / 6),
            (g0 * (1 / 24) + g1 * (1 / 12)) + g2 * (1 / 6), (g0 * (1 / 24) - g1 * (1 / 12)) + g2 * (1 / 6), g2)


def winograd_weight(w):
    """w (O, C, 3, 3) -> U (36, O, C) float32, U[6 a + i] = (G w G^T)[a, i]: the weight's transform conv.c's
    Winograd F(4x4, 3x3) reads. In float64, elementwise in one fixed order (numpy rounds each step alike
    everywhere: the page's U has the native bits), rounded to float32 once."""
    g = w.astype(np.float64)
    cols = _g_rows(g[..., 0], g[..., 1], g[..., 2])               # 6 x (O, C, 3): G applied along each row
    u = np.empty((36,) + w.shape[:2], _F32)
    for i, c in enumerate(cols):  # then down each column, a column's six at a time (float64 temporaries stay small)
        for a, v in enumerate(_g_rows(c[..., 0], c[..., 1], c[..., 2])):
            u[6 * a + i] = v
    return u


def _choose_conv(tune, x_shape, w_shape, stride, dilation, groups, padding):
    if len(w_shape) not in (3, 4) or w_shape[2] * (w_shape[3] if len(w_shape) == 4 else 1) > 1024:
        return False
    mode = tune["mode"]
    if mode != "auto":
        return mode == "c"
    k, sp = w_shape[2:], x_shape[2:]
    pad = padding or (0,) * len(k)
    pixels = 1
    for i in range(len(k)):
        pixels *= max(0, (sp[i] + 2 * pad[i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1)
    if pixels <= tune["narrow"]:
        return True
    taps = w_shape[2] * (w_shape[3] if len(w_shape) == 4 else 1)
    if len(w_shape) == 4 and taps == 1:
        return pixels >= tune["pointwise_pixels"] or _pointwise(x_shape, w_shape, stride, pad, groups) and _gemm_here()
    return len(w_shape) == 4 and min(w_shape[2:]) > 1 and taps >= tune["min_taps"]


def _takes_c(be, x_shape, w_shape, stride, dilation, groups, padding):
    """The rule's decision (K.chooses) for these shapes: False (the backend's conv), True (conv.c's direct conv, or
    gemm_native.c's for a plain 1x1) or "winograd" (conv.c's F(4x4, 3x3)), kept while the registry's switches and
    tuning and the deterministic mode stay as they were (a streaming model's conv asks every chunk)."""
    key = (be, x_shape, w_shape, stride, dilation, groups, padding, cpu_matmul.deterministic())
    try:
        got = _TAKES_C.get(key)
    except TypeError:  # (a caller's lists)
        return K.chooses("conv_bias_act", be, x_shape, w_shape, stride, dilation, groups, padding)
    gen = K.generation()
    if got is None or got[0] != gen:
        if len(_TAKES_C) >= 256:
            _TAKES_C.clear()
        takes = K.chooses("conv_bias_act", be, x_shape, w_shape, stride, dilation, groups, padding)
        if takes and _winograd(K.kernel("conv_bias_act", be.kernel_set or be.name).tune, x_shape, w_shape, stride,
                               dilation, groups, padding):
            takes = "winograd"
        got = _TAKES_C[key] = (gen, takes)
    return got[1]


def _winograd(tune, x_shape, w_shape, stride, dilation, groups, padding) -> bool:
    """Winograd's F(4x4, 3x3) for a conv the C kernels take? tune["mode"] "auto" and tune["winograd_channels"]
    > 0: a 3x3 conv of stride 1, dilation 1, one group and padding up to 2, at least that many input and output
    channels, and an output at least 4 x 4. Its products cost 2.25 multiply-adds an output per channel pair where
    the direct conv's cost 9, its transforms about as much as a product over 16-32 channels (AVX2, one thread:
    YOLOv8s's 3x3 convs 0.42-0.86x the direct conv's time from 32 channels, 0.95x at 16, 1.6x at 8)."""
    least = tune.get("winograd_channels", 0)
    if tune["mode"] != "auto" or not least or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    pad = tuple(padding or (0, 0))
    return tuple(w_shape[2:]) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and \
        groups == 1 and w_shape[0] >= least and w_shape[1] >= least and max(pad) <= 2 and min(pad) >= 0 and \
        x_shape[2] + 2 * pad[0] - 2 >= 4 and x_shape[3] + 2 * pad[1] - 2 >= 4


def _winograd_weight(w):
    """w's transform for conv_winograd.c (winograd_weight), made once per weight array and kept while it lives
    (cpu_matmul.derived_copy: backend arrays are never written in place; memory the caller shares, each call)."""
    return cpu_matmul.derived_copy(w, "winograd", winograd_weight, needed=True)


_TAKES_C: dict = {}
_SMALL_EPILOGUE = 1 << 12  # output elements up to which conv_bias_act adds the bias (and ReLU) in numpy


def conv_bias(be, x, w, b, stride, padding, dilation, groups):
    return conv_bias_act(be, x, w, b, stride, padding, dilation, groups, None)


def conv_bias_act(be, x, w, b, stride, padding, dilation, groups, act):
    """act(conv(x, w) + b) (b may be None): the C kernel where the rule chooses it, else the backend's conv, then
    the bias and the activation in one pass over the output rows (rows.c) or numpy's."""
    f32 = x.dtype is _F32 and w.dtype is _F32 and (b is None or b.dtype is _F32)
    takes = f32 and _takes_c(be, x.shape, w.shape, stride, dilation, groups, padding)
    if takes:
        fk = float_kernels()
        if fk is not None and _pointwise(x.shape, w.shape, stride, padding, groups) and _gemm_here():
            return _gemm_pointwise([x], w, b, act)
        if fk is not None and takes == "winograd":
            return fk.conv3x3_winograd(x if x.flags.c_contiguous else np.ascontiguousarray(x), _winograd_weight(w),
                                       b if b is None or b.flags.c_contiguous else np.ascontiguousarray(b),
                                       tuple(padding), act)
        if fk is not None:  # (a 1-D conv is the kernel's conv2d of one row)
            return fk.conv2d(x if x.flags.c_contiguous else np.ascontiguousarray(x),
                             w if w.flags.c_contiguous else np.ascontiguousarray(w), b, tuple(stride),
                             tuple(padding), tuple(dilation), groups, act)
    elif f32 and _pointwise(x.shape, w.shape, stride, padding, groups):  # (the page's pool: one call, not two)
        fk = float_kernels()
        y = None if fk is None else fk.pointwise([x], w, b, act, direct=False)
        if y is not None:
            return y
    y = be.conv(x, w, stride, padding, dilation, groups)                  # (N, O, *out)
    if y.size <= _SMALL_EPILOGUE and act in (None, "relu") and b is not None and y.dtype is _F32 and b.dtype is _F32:
        # a small output (a streaming model's conv): numpy's in-place add and max cost less than the kernel's
        # call, with the same bits (one float add; max keeps NaN as rows.c does)
        y += b.reshape((-1,) + (1,) * (y.ndim - 2))
        return y if act is None else np.maximum(y, 0, out=y)
    fk = float_kernels() if y.dtype is _F32 and y.flags.c_contiguous else None
    if fk is not None and (b is not None or act is not None):
        return fk.bias_act(y, b, act, out=y, channels=y.shape[1] if b is not None else 0) if y.size else y
    if b is not None:
        y = cpu_fused._add_bias(be, y, b.reshape((-1,) + (1,) * (y.ndim - 2)))
    return y if act is None else _act(be, y, act)


def _act(be, y, act):
    if act == "silu":
        return silu(be, y)
    if act in ("gelu", "gelu_tanh"):
        return gelu(be, y, "tanh" if act == "gelu_tanh" else "none")
    return be.binary("maximum", y, np.zeros((), y.dtype))


# ============================================================================ feature maps

_POOL_TAPS = 4096  # window taps maps.c takes (its parameter check)


def describe_maps(be=None):
    return "cpu_kernels/maps.c" if float_kernels() is not None else "numpy"


def max_pool2d(be, x, kernel, stride, pads, dilation, out):
    """The registry's max_pool2d: maps.c for float32 where compiled kernels run here, else numpy's maximum over
    one strided view per tap of x padded with its dtype's lowest value."""
    fk = float_kernels()
    if fk is not None and x.dtype is _F32 and x.ndim == 4 and kernel[0] * kernel[1] <= _POOL_TAPS:
        return fk.max_pool2d(x, kernel, stride, pads, dilation, out)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    h, w = x.shape[-2:]
    ends = [max(0, (out[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - pads[i] - (h, w)[i])
            for i in range(2)]
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(pads[0], ends[0]), (pads[1], ends[1])], constant_values=low)
    y = None
    for a in range(kernel[0]):
        for b in range(kernel[1]):
            win = xp[..., a * dilation[0]:a * dilation[0] + (out[0] - 1) * stride[0] + 1:stride[0],
                     b * dilation[1]:b * dilation[1] + (out[1] - 1) * stride[1] + 1:stride[1]]
            y = win.copy() if y is None else np.maximum(y, win, out=y)
    return y


def upsample_nearest(be, x, factors):
    """The registry's upsample_nearest: maps.c for float32 where compiled kernels run here, else numpy's repeat."""
    fk = float_kernels()
    if fk is not None and x.dtype is _F32 and x.ndim == 4:
        return fk.upsample_nearest(x, factors)
    return np.repeat(np.repeat(x, factors[0], -2), factors[1], -1)


# ============================================================================ rows

def layer_norm(be, x, w, b, eps):
    fk = float_kernels()
    if fk is not None and x.dtype is _F32 and x.ndim and x.shape[-1] and all(
            a is None or a.dtype is _F32 and a.flags.c_contiguous for a in (w, b)):
        return fk.layer_norm(x, w, b, eps)
    return _layer_norm_numpy(be, x, w, b, eps)


def gelu(be, x, approximate):
    fk = float_kernels()
    if fk is not None and x.dtype is _F32:
        return fk.bias_act(x, None, "gelu_tanh" if approximate == "tanh" else "gelu")
    return cpu_fused.gelu(be, x, approximate)


def silu(be, x):
    fk = float_kernels()
    if fk is not None and x.dtype is _F32:
        return fk.bias_act(x, None, "silu")
    return cpu_fused.silu(be, x)


# ============================================================================ attention

def choose_attention(be, tune, q_shape, k_shape, v_shape, mask):
    """The one-pass C attention for these shapes? tune["mode"]: "c", "numpy" or "auto": at least
    tune["min_scores"] scores (L x S per head), where its two ctypes calls cost less than numpy's passes (128: a
    decoded token's 12 heads over 128 keys 70 against 76 us, 16 queries over 16 keys 37 against 49 us; at 8 x 8 the
    two are even)."""
    if float_kernels() is None or len(q_shape) < 2 or len(q_shape) > 4 or v_shape[-1] > 256 or \
            mask is not None and (mask.dtype is not _F32 or mask.ndim > 4 or mask.shape[-1] > 1 and mask.strides[-1] != 4):
        return False
    mode = tune["mode"]
    if mode != "auto":
        return mode == "c"
    return q_shape[-2] * k_shape[-2] >= tune["min_scores"]


def attention(be, q, k, v, mask, scale, causal):
    if q.dtype is _F32 and k.dtype is _F32 and v.dtype is _F32 and \
            K.chooses("attention", be, q.shape, k.shape, v.shape, mask):
        if q.ndim == k.ndim == v.ndim == 4 and q.shape[:2] == k.shape[:2] == v.shape[:2]:  # (no broadcasting)
            m4 = None if mask is None else mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
            return float_kernels().attention(_unit_columns(q), _unit_columns(k), _unit_columns(v), m4, scale, causal)
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        if len(lead) <= 2:
            shape4 = (1,) * (2 - len(lead)) + lead
            q4, k4, v4 = (_unit_columns(np.broadcast_to(a, lead + a.shape[-2:]).reshape(shape4 + a.shape[-2:]))
                          for a in (q, k, v))
            m4 = None if mask is None else mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
            out = float_kernels().attention(q4, k4, v4, m4, scale, causal)
            return out.reshape(lead + out.shape[-2:])
    return cpu_fused.attention(be, q, k, v, mask, scale, causal)


def _unit_columns(a):
    return a if a.strides[-1] == 4 or a.shape[-1] == 1 else np.ascontiguousarray(a)
