"""Standard layers with torch's parameter names, shapes and default initialisation."""
from __future__ import annotations

import math

from . import functional as F
from . import init
from .module import Module, Parameter
from ..autograd import no_grad
from ..tensor import empty, ones, zeros


class Identity(Module):
    def forward(self, x):
        return x


def relayout_linear_weight(w):
    """Re-store an (out, in) weight that F.linear reads, in its backend's preferred layout (same values)."""
    w._data = w.device.backend.weight_layout(w._data)


class Linear(Module):
    # ((name, rows), ...) where this matrix stacks a checkpoint's separate projections along its rows (a model's
    # fused q/k/v): LoRA adapters and exports name the parts; None for one projection
    parts = None

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))  # (out, in)
        self.bias = Parameter(empty(out_features, dtype=dtype, device=device)) if bias else None
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def _linear_weights(self):
        return (self.weight,)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device))
        init.normal_(self.weight)
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    def forward(self, idx):
        return F.embedding(idx, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class _ConvNd(Module):
    _nd = 2
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", output_padding=0, device=None, dtype=None):
        super().__init__()
        nd = self._nd
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"ember: channels ({in_channels}, {out_channels}) must be divisible by groups {groups}")
        if padding_mode != "zeros":
            raise ValueError(f"ember: padding_mode {padding_mode!r} is not supported (zeros)")
        tup = (lambda v: (v,) * nd if isinstance(v, int) else tuple(v))
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = tup(kernel_size), tup(stride), tup(dilation)
        self.padding = padding if isinstance(padding, str) else tup(padding)
        self.output_padding = tup(output_padding)
        if self._transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(empty(*shape, dtype=dtype, device=device))
        self.bias = Parameter(empty(out_channels, dtype=dtype, device=device)) if bias else None
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = init._fan(self.weight)[0]
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
                + (f", padding={self.padding}" if self.padding else "") + (f", groups={self.groups}" if self.groups > 1 else ""))


class Conv1d(_ConvNd):
    _nd = 1

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv3d(_ConvNd):
    _nd = 3

    def forward(self, x):
        return F.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose1d(_ConvNd):
    _nd, _transposed = 1, True

    def forward(self, x):
        return F.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class ConvTranspose2d(_ConvNd):
    _transposed = True

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype, device=device)) if elementwise_affine else None
        self.bias = Parameter(zeros(*self.normalized_shape, dtype=dtype, device=device)) if elementwise_affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype, device=device)) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = Parameter(ones(num_channels, dtype=dtype, device=device)) if affine else None
        self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device)) if affine else None

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


def _norm_state(m, num_features, affine, track_running_stats, device, dtype):
    """A batch or instance norm's weight and bias (or None) and its running statistics (or None), torch's names."""
    m.weight = Parameter(ones(num_features, dtype=dtype, device=device)) if affine else None
    m.bias = Parameter(zeros(num_features, dtype=dtype, device=device)) if affine else None
    if track_running_stats:
        m.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
        m.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
        from ..tensor import tensor
        m.register_buffer("num_batches_tracked", tensor(0, device=device))
    else:
        m.running_mean = m.running_var = None


class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        _norm_state(self, num_features, affine, track_running_stats, device, dtype)

    def forward(self, x):
        use_batch = self.training or self.running_mean is None
        if self.training and self.running_mean is not None:
            self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            use_batch, self.momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    pass


class BatchNorm2d(_BatchNorm):
    pass


class _InstanceNorm(Module):
    _nd = 2

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False,
                 device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _norm_state(self, num_features, affine, track_running_stats, device, dtype)

    def forward(self, x):
        batched = x.ndim == self._nd + 2
        x = x if batched else x.unsqueeze(0)                               # unbatched (C, *spatial)
        use_input = self.training or not self.track_running_stats  # (torch leaves num_batches_tracked at 0 here)
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input,
                            self.momentum, self.eps)
        return y if batched else y.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    _nd = 1


class InstanceNorm2d(_InstanceNorm):
    pass


class PReLU(Module):
    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(empty(num_parameters, dtype=dtype, device=device).fill_(init))

    def forward(self, x):
        return F.prelu(x, self.weight)


class Bilinear(Module):
    """weight (out, in1, in2), bias (out,): y = x1^T W x2 + b."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, dtype=dtype, device=device))
        self.bias = Parameter(empty(out_features, dtype=dtype, device=device)) if bias else None
        bound = 1 / math.sqrt(in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x1, x2):
        return F.bilinear(x1, x2, self.weight, self.bias)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class Sequential(Module):
    def __init__(self, *mods):
        super().__init__()
        if len(mods) == 1 and isinstance(mods[0], dict):
            for k, m in mods[0].items():
                setattr(self, k, m)
        else:
            for i, m in enumerate(mods):
                setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        setattr(self, str(len(self._modules)), m)
        return self


class ModuleList(Module):
    def __init__(self, mods=()):
        super().__init__()
        for m in mods:
            self.append(m)

    def append(self, m):
        setattr(self, str(len(self._modules)), m)
        return self

    def extend(self, mods):
        for m in mods:
            self.append(m)
        return self

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleDict(Module):
    def __init__(self, mods=None):
        super().__init__()
        for k, m in (mods or {}).items():
            setattr(self, k, m)

    def __getitem__(self, k):
        return self._modules[k]

    def __setitem__(self, k, m):
        setattr(self, k, m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()


def _act(fn, name):
    class Act(Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            self.args, self.kwargs = args, kwargs

        def forward(self, x):
            return fn(x, *self.args, **self.kwargs)
    Act.__name__ = Act.__qualname__ = name
    return Act


ReLU = _act(F.relu, "ReLU")
ReLU6 = _act(F.relu6, "ReLU6")
GELU = _act(lambda x, approximate="none": F.gelu(x, approximate), "GELU")
SiLU = _act(F.silu, "SiLU")
Sigmoid = _act(F.sigmoid, "Sigmoid")
Tanh = _act(F.tanh, "Tanh")
Softplus = _act(F.softplus, "Softplus")
LeakyReLU = _act(F.leaky_relu, "LeakyReLU")
ELU = _act(F.elu, "ELU")
Mish = _act(F.mish, "Mish")
Hardswish = _act(F.hardswish, "Hardswish")
Softmax = _act(lambda x, dim=-1: F.softmax(x, dim), "Softmax")
LogSoftmax = _act(lambda x, dim=-1: F.log_softmax(x, dim), "LogSoftmax")


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class _MaxPool(Module):
    _pool = None  # F.max_pool1d or F.max_pool2d

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return self._pool(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class MaxPool2d(_MaxPool):
    _pool = staticmethod(F.max_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, dilation, ceil_mode=ceil_mode)


class MaxPool1d(_MaxPool):
    _pool = staticmethod(F.max_pool1d)


class _AvgPool(Module):
    _pool = None  # F.avg_pool1d or F.avg_pool2d

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return self._pool(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class AvgPool1d(_AvgPool):
    _pool = staticmethod(F.avg_pool1d)


class AdaptiveMaxPool2d(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_max_pool2d(x, self.output_size)


class AvgPool2d(_AvgPool):
    _pool = staticmethod(F.avg_pool2d)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x):
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)
