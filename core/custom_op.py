"""ember.custom_op: the public face of the kernel registry (ember.kernels): a fused op with one kernel per
backend, a composed fallback and autograd, called with Tensors.

Candle's CustomOp / flash-attention crate, in ember's terms. An op is declared once:

    rope = ember.custom_op("rope", forward={"cpu": numpy_fn, "webgpu": ember.WGSL(src), "cuda": ember.CUDA(src, "k")},
                           composed=tensor_fn, backward=backward_fn, output=lambda x, cos, sin: x.shape)
    y = rope(x, cos, sin)

and called like any op. On a tensor's device it runs, in this order of preference:
  1. the device's kernel: the registry entry's kernel for the device's column (a callable on backend arrays:
     numpy for "cpu", CuPy for "cuda"; or a kernel descriptor, `WGSL` / `CUDA`, compiled by the backend's
     `custom_kernel`);
  2. `composed`, the same op written with ember Tensor ops (it runs on every device and differentiates);
  3. the host: the "cpu" forward on copies of the inputs, the result copied back (counted by the device's
     transfer counters, so a test of "stays on the GPU" sees it).
Gradients: with `backward(ctx, grad)` given, the kernel's output records one autograd node and backward
returns a gradient per input (None where there is none); without it, a call that records gradients runs
`composed` instead, so autograd goes through its primitives. ember's own tensor-level fused ops (the rotary
embedding, flash attention, the decode step's attention) are registry entries run by this same machinery
(`registered(name)`); docs/custom-ops.md walks through an example.
"""
from __future__ import annotations

import numpy as np

from . import autograd as A
from . import dtypes as D
from . import kernels as K
from .autograd import TensorBase
from .errors import CustomOpError
from .kernel_source import CUDA, WGSL


class Context:
    """What `backward(ctx, grad)` receives: the op's inputs (Tensors or None), its output and its attributes."""

    __slots__ = ("inputs", "output", "attrs")

    def __init__(self, inputs, output, attrs):
        self.inputs, self.output, self.attrs = inputs, output, attrs


# ============================================================================ the op

def custom_op(name, forward=None, backward=None, composed=None, output=None, replace=False):
    """Declare a fused op into the kernel registry by name (`ember.custom_ops()` lists them); returns the callable.

    forward: {device type: kernel}; a kernel is a callable over backend arrays (for "cpu": numpy arrays,
      float16/bfloat16 given as float32 and the result rounded back) returning one array, or a WGSL / CUDA
      descriptor.
    composed: fn(*tensors, **attrs) -> Tensor with ember ops: the fallback on other devices, and the
      gradient path when `backward` is None.
    backward: fn(ctx, grad) -> one gradient per input (a Tensor or None; a bare Tensor for one input).
    output: fn(*tensors, **attrs) -> shape or (shape, dtype) of the result (default: the first input's).
    replace: allow re-declaring a name (else a second declaration is an error: two ops of one name).
    """
    if not isinstance(name, str) or not name:
        raise CustomOpError(f"ember: custom_op needs a non-empty name, got {name!r}")
    forward = dict(forward or {})
    for dev, k in forward.items():
        if not (callable(k) or isinstance(k, (WGSL, CUDA))):
            raise CustomOpError(f"ember: custom op {name!r}: forward[{dev!r}] must be a callable, "
                                f"ember.WGSL or ember.CUDA, got {type(k).__name__}")
        if isinstance(k, (WGSL, CUDA)) and k.backend != dev:
            raise CustomOpError(f"ember: custom op {name!r}: forward[{dev!r}] is a {type(k).__name__} "
                                f"kernel, which runs on {k.backend!r}")
    if not forward and composed is None:
        raise CustomOpError(f"ember: custom op {name!r} has neither a forward kernel nor a composed form")
    kernels = {dev: K.Kernel(k, f"{type(k).__name__} kernel" if isinstance(k, (WGSL, CUDA)) else
                             f"user {'numpy' if dev == 'cpu' else dev} function", takes_backend=False)
               for dev, k in forward.items()}
    entry = K.op(name, "a user's custom op", composed=composed, backward=backward, output=output, user=True,
                 tensor_call=True, replace=replace, **kernels)
    return CustomOp(entry)


def custom_ops():
    """{name: CustomOp} of every op called with Tensors: the users' and ember's own (registered())."""
    return {n: CustomOp(e) for n, e in K.REGISTRY.items() if e.tensor_call}


def registered(name) -> "CustomOp":
    """The tensor-level op of a registry entry declared with tensor_call (ember.kernels), as a callable."""
    entry = K.get(name)
    if not entry.tensor_call:
        raise CustomOpError(f"ember: {name!r} is called by the tensor layer, not with Tensors")
    return CustomOp(entry)


class CustomOp:
    """A registry entry called with Tensors (see the module docstring)."""

    __slots__ = ("entry", "name")

    def __init__(self, entry):
        self.entry, self.name = entry, entry.name
        for k in entry.kernels.values():
            if isinstance(k.ref, (WGSL, CUDA)):
                k.ref.op = entry.name

    @property
    def forward(self):
        return {dev: k.fn() for dev, k in self.entry.kernels.items()}

    @property
    def composed(self):
        return self.entry.composed_fn()

    @property
    def backward(self):
        return self.entry.backward_fn()

    def __repr__(self):
        return (f"CustomOp({self.name!r}, kernels={sorted(self.entry.kernels)}, composed={self.entry.composed is not None}, "
                f"backward={self.entry.backward is not None})")

    def _kernel(self, device):
        be = device.backend
        return K.kernel(self.name, be.kernel_set or be.name)

    def path(self, device):
        """'kernel', 'composed' or 'host': what a call on `device` (without gradients) runs."""
        if self._kernel(device) is not None:
            return "kernel"
        if self.entry.composed is not None:
            return "composed"
        if "cpu" in self.entry.kernels:
            return "host"
        raise CustomOpError(f"ember: custom op {self.name!r} has no kernel for {device.type!r} "
                            f"(it has {sorted(self.entry.kernels)}) and no composed form")

    def __call__(self, *inputs, **attrs):
        ts = [t for t in inputs if isinstance(t, TensorBase)]
        if not ts:
            raise CustomOpError(f"ember: custom op {self.name!r} needs at least one Tensor input")
        dev = ts[0].device
        for t in ts[1:]:
            if t.device != dev:
                raise CustomOpError(f"ember: custom op {self.name!r}: inputs on {dev} and {t.device}")
        bad = [type(t).__name__ for t in inputs if t is not None and not isinstance(t, TensorBase)]
        if bad:
            raise CustomOpError(f"ember: custom op {self.name!r}: inputs are Tensors or None (pass other values "
                                f"as keyword attributes), got {bad}")
        grad = A._GRAD[0] and any(t.requires_grad for t in ts)
        path = self.path(dev)
        kernel = self._kernel(dev) if path == "kernel" else None
        if path == "composed" or (grad and (self.entry.backward is None or kernel is not None and
                                            kernel.grad == "compose")):
            composed = self.composed
            if composed is None:
                raise CustomOpError(f"ember: custom op {self.name!r} has no backward and no composed form, so "
                                    f"gradients cannot flow through it (pass backward= or composed=)")
            out = composed(*inputs, **attrs)
            return self._checked(out, inputs, attrs, "composed")
        shape, dtype = self._output(inputs, attrs)
        with A.no_grad():
            arrays = [None if t is None else t._data for t in inputs]
            if path == "kernel":
                data = self._run_kernel(dev, kernel, arrays, shape, dtype, attrs)
            else:
                data = self._run_host(dev.backend, arrays, shape, dtype, attrs)
        out = ts[0]._new(data)
        if grad:
            A._record(out, "custom", tuple(inputs), self._node_backward(attrs), data)
        return out

    # ------------------------------------------------------------------ forward paths
    def _output(self, inputs, attrs):
        first = next(t for t in inputs if t is not None)
        output = self.entry.output_fn()
        spec = output(*inputs, **attrs) if output is not None else first.shape
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], D.DType):
            shape, dtype = spec
        else:
            shape, dtype = spec, first.dtype
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError:
            raise CustomOpError(f"ember: custom op {self.name!r}: output() must give a shape or (shape, dtype), "
                                f"got {spec!r}") from None
        return shape, dtype

    def _run_kernel(self, dev, kernel, arrays, shape, dtype, attrs):
        k = kernel.fn()
        be = dev.backend
        if isinstance(k, (WGSL, CUDA)):
            k.op = self.name
            return be.custom_kernel(k, arrays, shape, dtype, attrs)
        if not kernel.takes_backend and dev.type == "cpu":
            return self._run_numpy(k, arrays, shape, dtype, attrs, "cpu")
        data = be.kernel_call(k)(*arrays, **attrs) if kernel.takes_backend else k(*arrays, **attrs)
        got, gdt = tuple(be.shape(data)), be.dtype_of(data)
        if got != shape or gdt is not dtype:
            raise CustomOpError(f"ember: custom op {self.name!r} ({dev.type}): forward returned {got} "
                                f"{gdt.name}, but the output is {shape} {dtype.name}")
        return data

    def _run_numpy(self, fn, arrays, shape, dtype, attrs, where):
        """The cpu forward over numpy arrays (float16 and bfloat16 as float32, as kernels compute them), its
        result checked and stored as dtype (rounded once)."""
        def f32(a):
            if a is not None and a.dtype == np.uint16:
                return D.bf16_bits_to_f32(a)
            return a.astype(np.float32) if a is not None and a.dtype == np.float16 else a
        res = np.asarray(fn(*[f32(a) for a in arrays], **attrs))
        if tuple(res.shape) != shape:
            raise CustomOpError(f"ember: custom op {self.name!r} ({where}): forward returned shape "
                                f"{tuple(res.shape)}, but the output is {shape}")
        if dtype is D.bfloat16:
            return D.f32_to_bf16_bits(res.astype(np.float32))
        return np.ascontiguousarray(res.astype(dtype.np, copy=False))

    def _run_host(self, be, arrays, shape, dtype, attrs):
        host = [None if a is None else be.to_numpy(a) for a in arrays]
        res = self._run_numpy(self.entry.kernels["cpu"].fn(), host, shape, dtype, attrs,
                              f"cpu forward for {be.name}")
        return be.from_numpy(res, dtype)

    def _checked(self, out, inputs, attrs, where):
        shape, dtype = self._output(inputs, attrs)
        if not isinstance(out, TensorBase) or tuple(out.shape) != shape:
            got = tuple(out.shape) if isinstance(out, TensorBase) else type(out).__name__
            raise CustomOpError(f"ember: custom op {self.name!r} ({where}): returned {got}, but the output is {shape}")
        return out if out.dtype is dtype else out.to(dtype)

    # ------------------------------------------------------------------ autograd
    def _node_backward(self, attrs):
        """The recorded node's rule: backward(ctx, grad) -> one gradient per input, checked."""
        def rule(node, g):
            ctx = Context(node.inputs, g._new(node.saved), attrs)
            grads = self.entry.backward_fn()(ctx, g)
            if isinstance(grads, TensorBase) or grads is None:
                grads = (grads,)
            grads = tuple(grads)
            if len(grads) != len(node.inputs):
                raise CustomOpError(f"ember: custom op {self.name!r}: backward gave {len(grads)} gradients "
                                    f"for {len(node.inputs)} inputs")
            for i, (t, gi) in enumerate(zip(node.inputs, grads)):
                if gi is not None and t is not None and tuple(gi.shape) != tuple(t.shape):
                    raise CustomOpError(f"ember: custom op {self.name!r}: backward's gradient {i} has shape "
                                        f"{tuple(gi.shape)}, input {i} has {tuple(t.shape)}")
            return grads
        return rule

