"""ember: a small PyTorch-like tensor library whose numpy core runs in CPython and Pyodide.

`import ember` imports numpy and the standard library only; backends (webgpu, cuda), weight
formats and models are imported on first use.
"""
__version__ = "0.1.0"

from . import dtypes  # noqa: E402
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from .errors import EmberError, FormatError, LimitError  # noqa: E402,F401
from .device import Device, DeviceError, device, devices, register_backend  # noqa: E402,F401
from .dtypes import (DType, bfloat16, bool_, double, float16, float32, float64, half, int8, int32,  # noqa: E402,F401
                     int64, long, uint8, uint32)
from .tensor import (Tensor, arange, empty, empty_like, eye, from_numpy, full, full_like, linspace,  # noqa: E402,F401
                     manual_seed, multinomial, ones, ones_like, rand, rand_like, randint, randn, randn_like,
                     randperm, tensor, zeros, zeros_like)
from .ops_elementwise import (abs, ceil, clamp, clip, cos, div, eq, erf, exp, floor, fmod, ge, gt, isfinite,  # noqa: E402,F401
                              isinf, isnan, le, lerp, log, log1p, log2, logical_and, logical_not, logical_or,
                              logical_xor, lt, maximum, minimum, mul, nan_to_num, ne, neg, pow, reciprocal,
                              relu, remainder, round, rsqrt, sigmoid, sign, sin, sqrt, square, sub, tanh, trunc,
                              where)
from .ops_elementwise import add  # noqa: E402,F401
from .ops_movement import (broadcast_shapes, broadcast_to, cat, chunk, flatten, flip, hstack, movedim,  # noqa: E402,F401
                           narrow, permute, repeat_interleave, reshape, roll, split, squeeze, stack, transpose,
                           tril, triu, unbind, unsqueeze, vstack)
from .ops_reduce import (all, amax, amin, any, argmax, argmin, argsort, cumsum, log_softmax, logsumexp,  # noqa: E402,F401
                         max, mean, min, prod, softmax, sort, std, sum, topk, var)
from .ops_indexing import (copy_into, gather, index_add, index_select, masked_select, nonzero,  # noqa: E402,F401
                           scatter, scatter_add, take_along_dim)
from .linalg import bmm, dot, matmul, mm, outer  # noqa: E402,F401
from . import kernels  # noqa: E402,F401  (the kernel registry: ember.kernels)
from .custom_op import custom_op, custom_ops  # noqa: E402,F401
from .kernel_source import CUDA, WGSL  # noqa: E402,F401
from .errors import CustomOpError  # noqa: E402,F401
from . import nn, optim  # noqa: E402,F401

bool = bool_  # noqa: A001  (torch spells it torch.bool)
concat = concatenate = cat


def load(src, **kwargs):
    """Load tensors from a file path or bytes: safetensors, npz, .pt/.pth, gguf (by extension/magic)."""
    from .io import load as _load
    return _load(src, **kwargs)


def save(tensors, path, metadata=None):
    from .io import save as _save
    return _save(tensors, path, metadata=metadata)


def __getattr__(name):
    # heavy or optional parts load on first use, keeping `import ember` fast
    if name in ("io", "quant", "tokenizers", "models", "hub", "limits", "onnx", "data", "train"):
        import importlib
        return importlib.import_module(f"ember.{name}")  # (`from . import` would re-enter this hook)
    if name == "Tokenizer":
        from .tokenizers import Tokenizer
        return Tokenizer
    if name == "cuda":  # the module itself, so `ember.cuda.allow_tf32 = True` takes effect
        import importlib
        return importlib.import_module("ember.backends.cuda_backend")
    if name in ("QTensor", "quantize"):
        from . import quant
        return getattr(quant, name)
    raise AttributeError(f"module 'ember' has no attribute {name!r}")
