"""ember.nn.functional: torch.nn.functional's names, composed from Tensor ops.

Heavy ops (softmax, norms, attention, linear) run the device's kernel from the kernel registry (ember.kernels)
when it has one and no gradient is being recorded; otherwise their composed form (the `*_composed` functions
here, the registry's references), and tests/test_kernel_registry.py checks both paths agree.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import autograd as A
from .. import dtypes as D
from ..autograd import conv_transpose as _conv_transpose
from ..ops_elementwise import (elu, gelu, hardsigmoid, hardswish, leaky_relu, logsigmoid, mish,  # noqa: F401
                               relu, relu6, sigmoid, silu, softplus, tanh, where)
from .. import ops_indexing as I
from ..ops_indexing import one_hot  # noqa: F401
from ..ops_movement import stack
from ..ops_reduce import log_softmax, softmax  # noqa: F401  (reductions, also Tensor methods)


def _tuple(v, n, what):
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(i) for i in v)
    if len(v) != n:
        raise ValueError(f"ember: {what} needs {n} values, got {v}")
    return v


# ------------------------------------------------------------------ normalization

def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    ns = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if tuple(x.shape[-len(ns):]) != ns:
        raise ValueError(f"ember: layer_norm normalized_shape {ns} does not match input shape {x.shape}")
    k = A.fused_kernel("layer_norm", x, weight, bias) if len(ns) == 1 else None
    if k is not None:
        return A.prim_fused(k, x, None if weight is None else weight._data, None if bias is None else bias._data, eps)
    return _layer_norm(x, len(ns), weight, bias, eps)


def layer_norm_composed(x, weight, bias, eps):
    """layer_norm over the last axis in Tensor ops: the kernels' reference."""
    return _layer_norm(x, 1, weight, bias, eps)


def _layer_norm(x, n_axes, weight, bias, eps):
    axes = tuple(range(x.ndim - n_axes, x.ndim))
    xf = x.float() if x.dtype in (D.float16, D.bfloat16) else x
    mu = xf.mean(axes, keepdim=True)
    xc = xf - mu
    y = xc * ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    y = y.to(x.dtype)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x, normalized_shape, weight=None, eps=None):
    ns = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if eps is None:
        eps = 1.1920928955078125e-07 if x.dtype is D.float32 else float(__import__("numpy").finfo("float16").eps) \
            if x.dtype is D.float16 else 0.0078125
    k = A.fused_kernel("rms_norm", x, weight) if len(ns) == 1 else None
    if k is not None:
        return A.prim_fused(k, x, None if weight is None else weight._data, eps)
    return _rms_norm(x, len(ns), weight, eps)


def rms_norm_composed(x, weight, eps):
    """rms_norm over the last axis in Tensor ops: the kernels' reference."""
    return _rms_norm(x, 1, weight, eps)


def _rms_norm(x, n_axes, weight, eps):
    axes = tuple(range(x.ndim - n_axes, x.ndim))
    xf = x.float() if x.dtype in (D.float16, D.bfloat16) else x
    y = (xf * ((xf * xf).mean(axes, keepdim=True) + eps).rsqrt()).to(x.dtype)
    return y * weight if weight is not None else y


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"ember: group_norm: {c} channels not divisible by {num_groups} groups")
    xg = x.reshape(n, num_groups, -1)
    mu = xg.mean(-1, keepdim=True)
    xc = xg - mu
    y = (xc * ((xc * xc).mean(-1, keepdim=True) + eps).rsqrt()).reshape(*x.shape)
    shp = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(*shp)
    if bias is not None:
        y = y + bias.reshape(*shp)
    return y


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    c = x.shape[1]
    shp = (1, c) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        mu = x.mean(axes)
        var = x.var(axes, unbiased=False)
        if running_mean is not None:
            n = x.numel() // c
            with A.no_grad():
                running_mean.copy_(running_mean * (1 - momentum) + mu.detach() * momentum)
                running_var.copy_(running_var * (1 - momentum) + var.detach() * (n / max(n - 1, 1)) * momentum)
    else:
        mu, var = running_mean, running_var
    y = (x - mu.reshape(*shp)) * (var.reshape(*shp) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(*shp)
    if bias is not None:
        y = y + bias.reshape(*shp)
    return y


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Each (sample, channel) normalised over its spatial positions; with use_input_stats the running buffers
    (when given) move towards the batch's per-instance statistics (unbiased variance, as torch)."""
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * len(axes)
    if use_input_stats:
        mean = x.mean(axes, keepdim=True)
        var = ((x - mean) ** 2).mean(axes, keepdim=True)                   # (N, C, 1, ...)
        if running_mean is not None:
            n = math.prod(x.shape[2:])
            with A.no_grad():
                bm = mean.detach().reshape(x.shape[0], x.shape[1]).mean(0)
                bv = var.detach().reshape(x.shape[0], x.shape[1]).mean(0) * (n / max(n - 1, 1))
                running_mean.copy_(running_mean * (1 - momentum) + bm * momentum)
                running_var.copy_(running_var * (1 - momentum) + bv * momentum)
    else:
        mean, var = running_mean.reshape(*shape), running_var.reshape(*shape)
    y = (x - mean) * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(*shape)
    return y + bias.reshape(*shape) if bias is not None else y


def normalize(x, p=2.0, dim=1, eps=1e-12):
    return x / x.norm(p, dim, keepdim=True).clamp(min=eps)


# ------------------------------------------------------------------ linear / embedding

def linear(x, weight, bias=None):
    """x (..., in) @ weight.T (out, in) + bias (out,)."""
    xs, ws = x.shape, weight.shape
    if xs[-1] != ws[-1]:
        raise ValueError(f"ember: linear: input features {xs[-1]} != weight in_features {ws[-1]} "
                         f"(input {xs}, weight {ws})")
    if len(ws) == 2 and len(xs) >= 2 and x.dtype is weight.dtype and x.device is weight.device:
        if bias is not None and bias.dtype is x.dtype and bias.shape == ws[:1]:
            k = A.fused_kernel("linear", x, weight, bias)
            if k is not None:
                return A.prim_fused(k, x, weight._data, bias._data)
        y = A.prim_matmul(x, A.prim_permute(weight, (1, 0)))  # the hot path of every model: two primitives
    else:
        y = x @ weight.transpose(-1, -2)
    return y + bias if bias is not None else y


def linear_composed(x, weight, bias):
    """x @ weight.T + bias as a matmul and an add: the kernels' reference."""
    return A.prim_matmul(x, A.prim_permute(weight, (1, 0))) + bias


def linear_argmax(x, weight) -> int:
    """int(argmax(linear(x, weight))) for one row x (..., in): the index of the largest output, the first of equal
    ones (greedy decoding's pick). A device's kernel (the registry's linear_argmax) may find it without computing
    every output: natively, from a float16 screen of the weight and the few outputs that can win."""
    if x.shape[-1] != weight.shape[-1] or x.numel() != x.shape[-1] or weight.ndim != 2:
        raise ValueError(f"ember: linear_argmax takes one row against a (out, in) weight, got input {x.shape}, "
                         f"weight {weight.shape}")
    if x.dtype is weight.dtype and x.device is weight.device:
        k = A.fused_kernel("linear_argmax", x, weight)
        if k is not None:
            return int(k(x._data, weight._data))
    return linear_argmax_composed(x, weight)


def linear_argmax_composed(x, weight) -> int:
    """argmax of linear(x, weight)'s outputs: the kernels' reference."""
    return int(np.argmax(linear(x, weight).numpy()))


def embedding(idx, weight, padding_idx=None):
    if idx.dtype.is_float:
        raise TypeError(f"ember: embedding indices must be integers, got {idx.dtype}")
    flat = idx.reshape(-1)
    out = I.index_select(weight, 0, flat, what="embedding")
    return out.reshape(*idx.shape, weight.shape[-1])


# ------------------------------------------------------------------ convolution

def conv_nd(x, weight, bias, stride, padding, dilation, groups, nd):
    """An nd-dimensional convolution with torch's checks and padding modes (conv1d/2d/3d and ONNX's Conv call it)."""
    if x.ndim != nd + 2:
        raise ValueError(f"ember: conv{nd}d expects a ({nd + 2})-D input (N, C, ...), got shape {x.shape}")
    if x.shape[1] != weight.shape[1] * groups:
        raise ValueError(f"ember: conv{nd}d: input has {x.shape[1]} channels, weight {weight.shape} with "
                         f"groups={groups} expects {weight.shape[1] * groups}")
    if groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"ember: conv{nd}d: out channels {weight.shape[0]} not divisible by groups {groups}")
    if x.dtype is not weight.dtype:
        raise TypeError(f"ember: conv{nd}d: input dtype {x.dtype} != weight dtype {weight.dtype}")
    stride, dilation = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * nd
        elif padding == "same":
            k = weight.shape[2:]
            tot = [dilation[i] * (k[i] - 1) for i in range(nd)]
            if any(t % 2 for t in tot) or any(s != 1 for s in stride):
                x = pad(x, [v for i in reversed(range(nd)) for v in (tot[i] // 2, tot[i] - tot[i] // 2)])
                padding = (0,) * nd
            else:
                padding = tuple(t // 2 for t in tot)
        else:
            raise ValueError(f"ember: unknown padding mode {padding!r}")
    padding = _tuple(padding, nd, "padding")
    _check_conv_args(f"conv{nd}d", weight, bias, stride, padding, dilation)
    if bias is not None and bias.dtype is x.dtype:
        k = A.fused_kernel("conv_bias", x, weight, bias)
        if k is not None:
            return A.prim_fused(k, x, weight._data, bias._data, stride, padding, dilation, groups)
    elif bias is None and nd in (1, 2):  # the device's convolution kernel where it has one (the CPU's direct C)
        k = A.fused_kernel("conv_bias_act", x, weight)
        if k is not None:
            return A.prim_fused(k, x, weight._data, None, stride, padding, dilation, groups, None)
    y = A.prim_conv(x, weight, stride, padding, dilation, groups)
    return y + bias.reshape(1, -1, *([1] * nd)) if bias is not None else y


_ACTS = {"relu": relu, "silu": silu, "gelu": gelu, "gelu_tanh": lambda x: gelu(x, approximate="tanh"), None: None}


def linear_act(x, weight, bias, act="gelu"):
    """act(linear(x, weight, bias)) (act: "gelu" (erf), "gelu_tanh", "silu", "relu" or None): one kernel where the
    device fuses the bias and the activation into the product (the registry op linear_act: the page's kernel pool,
    where the result leaves its memory once instead of going out and in again for the activation), else the two."""
    if act not in _ACTS:
        raise ValueError(f"ember: linear_act: act must be one of {sorted(a for a in _ACTS if a)} or None, got {act!r}")
    ws = weight.shape
    if bias is not None and len(ws) == 2 and x.ndim >= 2 and x.shape[-1] == ws[-1] and bias.shape == ws[:1] and \
            x.dtype is weight.dtype and bias.dtype is x.dtype and x.device is weight.device:
        k = A.fused_kernel("linear_act", x, weight, bias)
        y = None if k is None else k(x._data, weight._data, bias._data, act)
        if y is not None:
            return x._new(y)
    return linear_act_composed(x, weight, bias, act)


def linear_act_composed(x, weight, bias, act):
    """linear, then the activation: the kernels' reference."""
    y = linear(x, weight, bias)
    return y if act is None else _ACTS[act](y)


def conv_act(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, act="silu"):
    """act(conv1d or conv2d(x, weight, bias, ...)) (act: "silu", "relu", "gelu" (erf), "gelu_tanh" or None): one
    kernel where the device fuses the bias and the activation into the convolution (the registry op
    conv_bias_act; YOLO's conv-BatchNorm-SiLU blocks, Whisper's conv-GELU stem), else the three ops."""
    if act not in _ACTS:
        raise ValueError(f"ember: conv_act: act must be one of {sorted(a for a in _ACTS if a)} or None, got {act!r}")
    nd = x.ndim - 2
    if nd in (1, 2) and x.ndim == weight.ndim and isinstance(padding, (int, tuple, list)) and \
            (bias is None or bias.dtype is x.dtype) and x.dtype is weight.dtype:
        stride_, padding_, dilation_ = (_tuple(v, nd, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                                      (dilation, "dilation")))
        if x.shape[1] == weight.shape[1] * groups and groups >= 1 and weight.shape[0] % groups == 0:
            _check_conv_args(f"conv{nd}d", weight, bias, stride_, padding_, dilation_)
            k = A.fused_kernel("conv_bias_act", x, weight, bias)
            if k is not None:
                return A.prim_fused(k, x, weight._data, None if bias is None else bias._data, stride_, padding_,
                                    dilation_, groups, act)
    y = conv_nd(x, weight, bias, stride, padding, dilation, groups, nd)
    return y if act is None else _ACTS[act](y)


def conv_cat_act(xs, weight, bias=None, act="silu"):
    """act(conv2d(cat(xs, 1), weight, bias)) for a 1x1 weight (O, the parts' channels together, 1, 1): one kernel
    that reads each part where it lies where the device has one (the registry op conv_cat_act: YOLO's C2f, SPPF and
    neck blocks concatenate their parts only for the next 1x1 conv), else the concatenation and conv_act."""
    if act not in _ACTS:
        raise ValueError(f"ember: conv_cat_act: act must be one of {sorted(a for a in _ACTS if a)} or None, got {act!r}")
    xs = list(xs)
    if len(xs) > 1 and weight.ndim == 4 and tuple(weight.shape[2:]) == (1, 1) and \
            all(x.ndim == 4 and x.dtype is weight.dtype and x.device is weight.device for x in xs) and \
            (bias is None or bias.dtype is weight.dtype):
        k = A.fused_kernel("conv_cat_act", xs[0], weight, bias, *xs[1:])
        y = None if k is None else k([x._data for x in xs], weight._data, None if bias is None else bias._data, act)
        if y is not None:
            return xs[0]._new(y)
    return conv_cat_act_composed(xs, weight, bias, act)


def conv_cat_act_composed(xs, weight, bias, act):
    """The concatenation, then conv_act: the kernel's reference."""
    from ..ops_movement import cat
    x = xs[0] if len(xs) == 1 else cat(xs, 1)
    return conv_act(x, weight, bias, 1, 0, 1, 1, act)


def conv_bias_act_composed(x, weight, bias, stride, padding, dilation, groups, act):
    """conv, the bias per output channel (if any), then the activation: the kernels' reference."""
    y = A.prim_conv(x, weight, stride, padding, dilation, groups)
    if bias is not None:
        y = y + bias.reshape(1, -1, *([1] * len(stride)))
    return y if act is None else _ACTS[act](y)


def conv_bias_composed(x, weight, bias, stride, padding, dilation, groups):
    """conv then the bias per output channel: the kernels' reference (normalised arguments, as the kernel gets)."""
    y = A.prim_conv(x, weight, stride, padding, dilation, groups)
    return y + bias.reshape(1, -1, *([1] * len(stride)))


def _check_conv_args(what, weight, bias, stride, padding, dilation, output_padding=None, out_channels=None):
    """torch's checks, before any backend divides by a stride or pads by a negative amount."""
    for name, v, least in (("stride", stride, 1), ("dilation", dilation, 1), ("padding", padding, 0)):
        if any(i < least for i in v):
            raise ValueError(f"ember: {what}: {name} {v} must be {'positive' if least else 'non-negative'}")
    if output_padding is not None and any(op < 0 or op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise ValueError(f"ember: {what}: output_padding {output_padding} must be non-negative and smaller than "
                         f"the stride {stride} or the dilation {dilation}")
    n_out = weight.shape[0] if out_channels is None else out_channels
    if bias is not None and tuple(bias.shape) != (n_out,):
        raise ValueError(f"ember: {what}: weight of shape {tuple(weight.shape)} expects a bias of shape ({n_out},), "
                         f"got {tuple(bias.shape)}")


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_nd(x, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_nd(x, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv_nd(x, weight, bias, stride, padding, dilation, groups, 3)


def _conv_t(x, weight, bias, stride, padding, output_padding, groups, dilation, nd):
    if x.ndim != nd + 2 or x.shape[1] != weight.shape[0]:
        raise ValueError(f"ember: conv_transpose{nd}d: input {x.shape} does not match weight {weight.shape}")
    stride, padding = _tuple(stride, nd, "stride"), _tuple(padding, nd, "padding")
    output_padding, dilation = _tuple(output_padding, nd, "output_padding"), _tuple(dilation, nd, "dilation")
    if groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"ember: conv_transpose{nd}d: groups={groups} must be positive and divide the "
                         f"{weight.shape[0]} input channels")
    _check_conv_args(f"conv_transpose{nd}d", weight, bias, stride, padding, dilation, output_padding,
                     weight.shape[1] * groups)
    y = _conv_transpose(x, weight, stride, padding, output_padding, dilation, groups)
    return y + bias.reshape(1, -1, *([1] * nd)) if bias is not None else y


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_t(x, weight, bias, stride, padding, output_padding, groups, dilation, 1)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_t(x, weight, bias, stride, padding, output_padding, groups, dilation, 2)


# ------------------------------------------------------------------ pooling / resizing

def _pool_out(hw, k, s, p, d, ceil_mode):
    """A pool's output size (ho, wo): floor or ceil mode, the last window starting inside the input or its padding."""
    out = []
    for i in range(2):
        L = hw[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1
        o = (-(-L // s[i]) if ceil_mode else L // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= hw[i] + p[i]:
            o -= 1
        out.append(o)
    return tuple(out)


def _pool_windows(x, k, s, p, d, ceil_mode, fill):
    """Yields one strided slice of x per kernel offset; their elementwise max/sum is the pool."""
    h, w = x.shape[-2:]
    out = _pool_out((h, w), k, s, p, d, ceil_mode)
    extra = [max(0, (out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - ((h, w)[i] + 2 * p[i])) for i in range(2)]
    pads = [(0, 0)] * (x.ndim - 2) + [(p[0], p[0] + extra[0]), (p[1], p[1] + extra[1])]
    xp = A.prim_pad(x, pads, fill) if any(a or b for a, b in pads) else x
    lead = list(x.shape[:-2])
    for a in range(k[0]):
        for b in range(k[1]):
            st = [0] * len(lead) + [a * d[0], b * d[1]]
            sp = lead + [a * d[0] + (out[0] - 1) * s[0] + 1, b * d[1] + (out[1] - 1) * s[1] + 1]
            yield A.prim_slice(xp, st, sp, [1] * len(lead) + [s[0], s[1]])


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    if return_indices:
        raise ValueError("ember: max_pool2d(return_indices=True) is not supported")
    k = _tuple(kernel_size, 2, "kernel_size")
    s = _tuple(stride if stride is not None else k, 2, "stride")
    p, d = _tuple(padding, 2, "padding"), _tuple(dilation, 2, "dilation")
    if any(p[i] * 2 > k[i] for i in range(2)):
        raise ValueError(f"ember: max_pool2d padding {p} must be at most half the kernel {k}")
    kern = A.fused_kernel("max_pool2d", x) if x.ndim == 4 else None
    if kern is not None:  # the backend's pass over each window (the registry's max_pool2d)
        return A.prim_fused(kern, x, k, s, p, d, _pool_out(x.shape[-2:], k, s, p, d, ceil_mode))
    # one axis at a time (max is separable): k_h + k_w windows instead of k_h k_w
    for ka, sa, pa, da in (((1, k[1]), (1, s[1]), (0, p[1]), (1, d[1])),     # along the width
                           ((k[0], 1), (s[0], 1), (p[0], 0), (d[0], 1))):    # then the height
        y = None
        for win in _pool_windows(x, ka, sa, pa, da, ceil_mode, float("-inf")):
            y = win if y is None else y.maximum(win)
        x = y
    return x


def max_pool2d_composed(x, kernel, stride, pads, dilation, out):
    """The registry's max_pool2d in Tensor ops: x padded with its lowest value on every side a window reaches past
    (pads before, what the output size needs after), then the max of one strided slice per tap."""
    h, w = x.shape[-2:]
    ends = [max(0, (out[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - pads[i] - (h, w)[i])
            for i in range(2)]
    low = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
    xp = A.prim_pad(x, [(0, 0)] * (x.ndim - 2) + [(pads[0], ends[0]), (pads[1], ends[1])], low)
    lead = list(x.shape[:-2])
    y = None
    for a in range(kernel[0]):
        for b in range(kernel[1]):
            st = [0] * len(lead) + [a * dilation[0], b * dilation[1]]
            sp = lead + [st[-2] + (out[0] - 1) * stride[0] + 1, st[-1] + (out[1] - 1) * stride[1] + 1]
            win = A.prim_slice(xp, st, sp, [1] * len(lead) + list(stride))
            y = win if y is None else y.maximum(win)
    return y


def upsample_nearest_composed(x, factors):
    """The registry's upsample_nearest in Tensor ops: each pixel broadcast into its block, one copy (no index to
    gather by: a device needs no host round trip)."""
    b, c, h, w = x.shape
    fh, fw = factors
    return x.reshape(b, c, h, 1, w, 1).expand(b, c, h, fh, w, fw).reshape(b, c, h * fh, w * fw)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    return max_pool2d(x.unsqueeze(-2), (1, kernel_size), (1, stride or kernel_size), (0, padding),
                      (1, dilation), ceil_mode).squeeze(-2)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return avg_pool2d(x.unsqueeze(-2), (1, kernel_size), (1, stride or kernel_size), (0, padding), ceil_mode,
                      count_include_pad).squeeze(-2)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    k = _tuple(kernel_size, 2, "kernel_size")
    s = _tuple(stride if stride is not None else k, 2, "stride")
    p = _tuple(padding, 2, "padding")
    y = None
    for win in _pool_windows(x, k, s, p, (1, 1), ceil_mode, 0.0):
        y = win if y is None else y + win
    if divisor_override:
        return y / divisor_override
    if count_include_pad and not ceil_mode:
        return y / (k[0] * k[1])
    ones = x.new_ones((1, 1) + tuple(x.shape[-2:]))
    cnt = None
    if count_include_pad:  # pads count, the ceil_mode overhang does not
        ones = A.prim_pad(ones, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], 1.0)
        p = (0, 0)
    for win in _pool_windows(ones, k, s, p, (1, 1), ceil_mode, 0.0):
        cnt = win if cnt is None else cnt + win
    return y / cnt.reshape(*cnt.shape[-2:])


def adaptive_avg_pool2d(x, output_size):
    oh, ow = _tuple(output_size, 2, "output_size") if not isinstance(output_size, numbers.Integral) else (output_size,) * 2
    h, w = x.shape[-2:]
    oh, ow = oh or h, ow or w
    if h % oh == 0 and w % ow == 0:
        return x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow).mean((-3, -1))
    rows = []
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        cols = [x[..., h0:h1, (j * w) // ow: -(-((j + 1) * w) // ow)].mean((-2, -1)) for j in range(ow)]
        rows.append(stack(cols, -1))
    return stack(rows, -2)


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """torch's bins: rows floor(i h / oh) .. ceil((i + 1) h / oh), the same for columns."""
    if return_indices:
        raise ValueError("ember: adaptive_max_pool2d(return_indices=True) is not supported")
    oh, ow = _tuple(output_size, 2, "output_size") if not isinstance(output_size, numbers.Integral) else (output_size,) * 2
    h, w = x.shape[-2:]
    oh, ow = oh or h, ow or w
    if h % oh == 0 and w % ow == 0:
        return x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow).amax((-3, -1))
    rows = []
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        cols = [x[..., h0:h1, (j * w) // ow: -(-((j + 1) * w) // ow)].amax((-2, -1)) for j in range(ow)]
        rows.append(stack(cols, -1))
    return stack(rows, -2)


def repeat_factor(idx, n_in):
    """f where nearest resizing's input indices `idx` (one per output) repeat each of n_in inputs f times in order
    (0 0 1 1 ...), else None."""
    n_out = len(idx)
    if n_in < 1 or n_out < n_in or n_out % n_in:
        return None
    f = n_out // n_in
    return f if np.array_equal(idx, np.arange(n_out) // f) else None


def _whole_factors(dims, size, scales):
    """(fh, fw) where nearest resizing to `size` repeats every input pixel a whole number of times (_nearest_index's
    indices, computed alike in float32), else None."""
    out = []
    for n_in, n_out, scale in zip(dims, size, scales):
        s = np.float32(scale if scale is not None else n_in / n_out)  # (interpolate checked n_out >= 1)
        f = repeat_factor(np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * s), n_in - 1), n_in)
        if f is None:
            return None
        out.append(f)
    return tuple(out)


def _nearest_index(n_in, n_out, scale, device):
    from ..tensor import arange
    s = scale if scale is not None else n_in / n_out
    return (arange(n_out, device=device).float() * s).floor().long().clamp(max=n_in - 1)


def _linear_axis(x, ax, n_out, scale, align_corners):
    from ..tensor import arange
    n_in = x.shape[ax]
    o = arange(n_out, device=x.device).float()
    if align_corners:
        src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else o * 0
    else:
        s = scale if scale is not None else n_in / n_out
        src = ((o + 0.5) * s - 0.5).clamp(min=0)
    i0 = src.floor().long().clamp(max=n_in - 1)
    i1 = (i0 + 1).clamp(max=n_in - 1)
    lam = (src - i0.float()).to(x.dtype)
    shp = [1] * x.ndim
    shp[ax] = n_out
    lam = lam.reshape(*shp)
    a, b = x.index_select(ax, i0), x.index_select(ax, i1)
    return a + (b - a) * lam


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    nd = x.ndim - 2
    if size is None and scale_factor is None:
        raise ValueError("ember: interpolate needs size or scale_factor")
    if size is not None:
        size = _tuple(size, nd, "size")
        scales = [None] * nd
    else:
        sf = (scale_factor,) * nd if isinstance(scale_factor, numbers.Number) else tuple(scale_factor)
        size = tuple(int(math.floor(x.shape[2 + i] * sf[i])) for i in range(nd))
        scales = [1.0 / f for f in sf]
    if min(size) < 1 or min(x.shape[2:]) < 1:
        raise ValueError(f"ember: interpolate needs sizes of at least 1, got {tuple(x.shape[2:])} -> {size}")
    if mode == "nearest" and nd == 2:
        f = _whole_factors(x.shape[2:], size, scales)
        if f is not None:  # each pixel a block: the registry's upsample_nearest
            kern = A.fused_kernel("upsample_nearest", x)
            return A.prim_fused(kern, x, f) if kern is not None else upsample_nearest_composed(x, f)
    for i in range(nd):
        ax = 2 + i
        if mode == "nearest":
            x = x.index_select(ax, _nearest_index(x.shape[ax], size[i], scales[i], x.device))
        elif mode in ("bilinear", "linear"):
            x = _linear_axis(x, ax, size[i], scales[i], bool(align_corners))
        else:
            raise ValueError(f"ember: interpolate mode {mode!r} is not supported (nearest, bilinear)")
    return x


def upsample(x, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(x, size, scale_factor, mode, align_corners)


def pad(x, pad, mode="constant", value=0.0):
    """torch.nn.functional.pad: `pad` lists (left, right) pairs starting from the last dim."""
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"ember: pad {pad} is invalid for a {x.ndim}-D tensor")
    pads = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pads[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        grow = [(max(a, 0), max(b, 0)) for a, b in pads]
        if any(a or b for a, b in grow):
            x = A.prim_pad(x, grow, value)
        if any(a < 0 or b < 0 for a, b in pads):
            starts = [max(-a, 0) for a, _ in pads]
            stops = [s - max(-b, 0) for s, (_, b) in zip(x.shape, pads)]
            x = A.prim_slice(x, starts, stops, [1] * x.ndim)
        return x
    if mode in ("reflect", "replicate"):
        from ..ops_movement import cat
        for ax, (a, b) in enumerate(pads):
            if not (a or b):
                continue
            n = x.shape[ax]
            if mode == "reflect":
                left = [x.narrow(ax, i, 1) for i in range(a, 0, -1)]
                right = [x.narrow(ax, n - 2 - i, 1) for i in range(b)]
            else:
                left = [x.narrow(ax, 0, 1)] * a
                right = [x.narrow(ax, n - 1, 1)] * b
            x = cat(left + [x] + right, ax)
        return x
    raise ValueError(f"ember: pad mode {mode!r} is not supported (constant, reflect, replicate)")


def dropout(x, p=0.5, training=True):
    if not training or p == 0:
        return x
    if not 0 <= p <= 1:
        raise ValueError(f"ember: dropout probability must be in [0, 1], got {p}")
    if p == 1:
        return x * 0
    from ..tensor import rand
    keep = rand(*x.shape, device=x.device) >= p
    return x * keep.to(x.dtype) * (1.0 / (1 - p))


def prelu(x, weight):
    """x where x >= 0, weight x elsewhere; weight (1,) or (C,) along dim 1."""
    w = weight if weight.numel() == 1 or x.ndim < 2 else weight.reshape(-1, *([1] * (x.ndim - 2)))
    return where(x >= 0, x, w * x)


def pixel_shuffle(x, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = int(upscale_factor)
    *lead, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"ember: pixel_shuffle: {c} channels are not divisible by upscale_factor^2 = {r * r}")
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    y = y.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)                 # (*, C, H, r, W, r)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(x, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    r = int(downscale_factor)
    *lead, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"ember: pixel_unshuffle: spatial size {(h, w)} is not divisible by {r}")
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)                 # (*, C, r, r, H, W)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def bilinear(input1, input2, weight, bias=None):
    """y_k = input1^T weight_k input2 + bias_k: input1 (*, in1), input2 (*, in2), weight (out, in1, in2)."""
    lead = input1.shape[:-1]
    a, b = input1.reshape(-1, 1, 1, input1.shape[-1]), input2.reshape(-1, 1, input2.shape[-1])
    y = ((a @ weight).squeeze(-2) * b).sum(-1)                             # (B, out)
    y = y + bias if bias is not None else y
    return y.reshape(*lead, weight.shape[0])


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    from .patches import unfold as f
    return f(x, kernel_size, dilation, padding, stride)


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    from .patches import fold as f
    return f(x, output_size, kernel_size, dilation, padding, stride)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    from .embedding_bag import embedding_bag as f
    return f(input, weight, offsets, mode, per_sample_weights, include_last_offset, padding_idx, max_norm)


# ------------------------------------------------------------------ attention

def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev); a bool mask keeps True, a float one is added.
    enable_gqa: k and v have fewer heads (dim -3) than q, each shared by q.shape[-3] // k.shape[-3] query heads."""
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if dropout_p == 0 and q.dtype is k.dtype is v.dtype:
        from .fused_ops import flash_attention, wants_flash
        if wants_flash(q, k, v, attn_mask):
            return flash_attention(q, k, v, attn_mask, is_causal, scale)
        fused = A.fused_kernel("attention", q, k, v, attn_mask)
        if fused is not None and (attn_mask is None or attn_mask.dtype is not D.bool_):
            m = None if attn_mask is None else attn_mask.to(q.dtype)._data
            return q._new(fused(q._data, k._data, v._data, m, scale, is_causal))
    return _sdpa_composed(q, k, v, attn_mask, dropout_p, is_causal, scale)


def attention_composed(q, k, v, mask, scale, causal):
    """The attention kernels' reference: mask additive (or None), no dropout."""
    return _sdpa_composed(q, k, v, mask, 0.0, causal, scale)


def _sdpa_composed(q, k, v, attn_mask, dropout_p, is_causal, scale):
    L, S = q.shape[-2], k.shape[-2]
    s = (q @ k.transpose(-1, -2)) * scale                                 # (..., L, S)
    if is_causal:
        from ..tensor import ones
        keep = ones(L, S, dtype=D.bool_, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype is D.bool_ else s + attn_mask
    p = softmax(s, -1)
    if dropout_p:
        p = dropout(p, dropout_p)
    return p @ v


def rotary_embedding(x, cos, sin):
    """Rotate-half rotary embedding (Hugging Face Llama / GPT-NeoX layout): x (B, T, H, D), cos and sin
    (T, D / 2) -> [x1 cos - x2 sin, x2 cos + x1 sin], x1 and x2 the halves of D. A custom op
    (the registry op rotary_embedding: webgpu/rope.wgsl on webgpu, cuda/rows.cu on cuda, composed otherwise;
    not a torch function: torch models spell it out)."""
    from .fused_ops import rope_composed, rotary
    T, half = x.shape[1], x.shape[-1] // 2
    if x.ndim == 4 and x.shape[-1] % 2 == 0 and cos.shape == sin.shape == (T, half) and x.dtype.is_floating_point:
        return rotary(x, cos, sin)
    return rope_composed(x, cos, sin)


def linears(x, weights, biases):
    """[linear(x, w, b) for w, b in zip(weights, biases)] (q, k and v from one input). A backend with a
    `linears` kernel (webgpu, for a decode row: one matvec over every weight) gives one result whose column
    ranges are returned as views; otherwise, and when gradients are recorded, one linear per weight."""
    ok = all(w.ndim == 2 and w.dtype is x.dtype and w.device is x.device for w in weights)
    f = A.fused_kernel("linears", x, *weights, *biases) if ok else None
    if f is not None:
        y = f(x._data, [w._data for w in weights], [None if b is None else b._data for b in biases])
        if y is not None:
            out, at = x._new(y), 0
            parts = []
            for w in weights:
                parts.append(out.narrow(-1, at, w.shape[0]))
                at += w.shape[0]
            return parts
    return linears_composed(x, weights, biases)


def linears_composed(x, weights, biases):
    """One linear per weight: the linears kernel's reference."""
    return [linear(x, w, b) for w, b in zip(weights, biases)]


def rope_append_attention(qkv, rot, k_cache, v_cache, mask, *, n_heads, slot, length, scale=None):
    """One decoded token's attention from its fused q | k | v projection, with its KV cache row written in place
    (ember.nn.fused_ops.rope_append_attention: one WGSL kernel on webgpu, composed elsewhere)."""
    from .fused_ops import rope_append_attention as fused
    return fused(qkv, rot, k_cache, v_cache, mask, n_heads=n_heads, slot=slot, length=length, scale=scale)


def multi_head_attention_forward(query, key, value, num_heads, *args, **kwargs):
    """torch.nn.functional.multi_head_attention_forward (ember.nn.attention holds it)."""
    from .attention import multi_head_attention_forward as mha
    return mha(query, key, value, num_heads, *args, **kwargs)


# ------------------------------------------------------------------ losses

def _reduce_loss(loss, reduction, weight_sum=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / weight_sum if weight_sum is not None else loss.mean()
    raise ValueError(f"ember: unknown reduction {reduction!r}")


def nll_loss(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    """logp (N, C, *d) log-probabilities, target (N, *d) class indices."""
    if logp.ndim == 1:
        logp, target = logp.unsqueeze(0), target.reshape(1)
    c = logp.shape[1]
    if target.dtype.is_float:
        raise TypeError(f"ember: nll_loss target must hold class indices (int64), got {target.dtype}")
    valid = target != ignore_index
    t = target.where(valid, 0)
    if t.numel():
        hi, lo = int(t.max().item()), int(t.min().item())
        if hi >= c or lo < 0:
            raise IndexError(f"ember: nll_loss target {hi if hi >= c else lo} out of range for {c} classes")
    picked = logp.gather(1, t.unsqueeze(1)).squeeze(1)                   # (N, *d)
    w = valid.to(logp.dtype)
    if weight is not None:
        w = w * weight.index_select(0, t.reshape(-1)).reshape(*t.shape)
    loss = -picked * w
    return _reduce_loss(loss, reduction, w.sum() if reduction == "mean" else None)


def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    logp = log_softmax(logits, 1 if logits.ndim > 1 else 0)
    if target.dtype.is_float:  # class probabilities
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / logits.shape[1]
        w = 1 if weight is None else weight.reshape(1, -1, *([1] * (logits.ndim - 2)))
        loss = -(logp * target * w).sum(1)
        return _reduce_loss(loss, reduction)
    loss = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing:
        lp = logp if logp.ndim > 1 else logp.unsqueeze(0)
        tgt = target if logp.ndim > 1 else target.reshape(1)
        valid = (tgt != ignore_index).to(lp.dtype)
        w = 1 if weight is None else weight.reshape(1, -1, *([1] * (lp.ndim - 2)))
        smooth = -(lp * w).sum(1) * valid                                  # (N, *d)
        c = lp.shape[1]
        if reduction == "mean":
            denom = valid.sum() if weight is None else (weight.index_select(0, tgt.where(tgt != ignore_index, 0).reshape(-1)).reshape(*tgt.shape) * valid).sum()
            smooth = smooth.sum() / denom
        else:
            smooth = _reduce_loss(smooth, reduction)
        loss = loss * (1 - label_smoothing) + smooth * (label_smoothing / c)
    return loss


def mse_loss(input, target, reduction="mean"):
    d = input - target
    return _reduce_loss(d * d, reduction)


def l1_loss(input, target, reduction="mean"):
    return _reduce_loss((input - target).abs(), reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    # (1 - t) x + (1 + (pw - 1) t) * log(1 + e^-x), written stably via softplus(-x)
    sp = softplus(-input)
    if pos_weight is not None:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * sp
    else:
        loss = (1 - target) * input + sp
    if weight is not None:
        loss = loss * weight
    return _reduce_loss(loss, reduction)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    loss = -(target * input.clamp(min=1e-12).log().clamp(min=-100)
             + (1 - target) * (1 - input).clamp(min=1e-12).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _reduce_loss(loss, reduction)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta 0: l1_loss)."""
    if beta == 0:
        return l1_loss(input, target, reduction)
    d = (input - target).abs()
    return _reduce_loss(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d^2 where |d| <= delta, delta (|d| - 0.5 delta) elsewhere."""
    d = (input - target).abs()
    return _reduce_loss(where(d <= delta, d * d * 0.5, (d - 0.5 * delta) * delta), reduction)


def kl_div(input, target, reduction="mean", log_target=False):
    """input log-probabilities; target probabilities (log-probabilities with log_target): target (log target -
    input), 0 where target is 0; reduction 'batchmean' divides the sum by the batch size."""
    if log_target:
        loss = target.exp() * (target - input)
    else:
        pos = target > 0
        loss = where(pos, target * (target.where(pos, 1.0).log() - input), input * 0)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce_loss(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction="mean"):
    """1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1 (cosine over the last dim)."""
    dim = input1.ndim - 1
    cos = (input1 * input2).sum(dim) / ((input1 * input1).sum(dim) + 1e-12).mul((input2 * input2).sum(dim) + 1e-12).sqrt()
    zero = cos * 0
    loss = where(target == 1, 1 - cos, zero) + where(target == -1, (cos - margin).clamp(min=0), zero)
    return _reduce_loss(loss, reduction)

