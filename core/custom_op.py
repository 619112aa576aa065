"""ember.custom_op: user-defined fused ops, one kernel per backend, with a composed fallback and autograd.

Candle's CustomOp / flash-attention crate, in ember's terms. An op is declared once:

    rope = ember.custom_op("rope", forward={"cpu": numpy_fn, "webgpu": ember.WGSL(src), "cuda": ember.CUDA(src, "k")},
                           composed=tensor_fn, backward=backward_fn, output=lambda x, cos, sin: x.shape)
    y = rope(x, cos, sin)

and called like any op. On a tensor's device it runs, in this order of preference:
  1. the device's kernel: `forward[device.type]` (a callable on backend arrays: numpy for "cpu", CuPy for
     "cuda"; or a kernel descriptor, `WGSL` / `CUDA`, compiled by the backend's `custom_kernel` primitive);
  2. `composed`, the same op written with ember Tensor ops (it runs on every device and differentiates);
  3. the host: the "cpu" forward on copies of the inputs, the result copied back (counted by the device's
     transfer counters, so a test of "stays on the GPU" sees it).
Gradients: with `backward(ctx, grad)` given, the kernel's output records one autograd node and backward
returns a gradient per input (None where there is none); without it, a call that records gradients runs
`composed` instead, so autograd goes through its primitives. `ember.nn.fused_ops` declares ember's own
fused rotary embedding and flash attention this way; docs/custom-ops.md walks through an example.
"""
from __future__ import annotations

import numpy as np

from . import autograd as A
from . import dtypes as D
from .autograd import TensorBase
from .errors import CustomOpError


# ============================================================================ kernel descriptors
# Handed down to a backend's `custom_kernel` primitive (the backend never imports this module).

class WGSL:
    """A WebGPU compute kernel for one custom op.

    `source` (a string, or a callable returning one, read on first compile) holds `fn main` with
    `@compute @workgroup_size(workgroup_size)` and any helpers. ember prepends the bindings and helpers:
      prm: array<u32>      binding 0: [0] output element count, then `params(...)` (ints as u32 bits,
                           floats as f32 bits: read them with bitcast<f32>(prm[k]))
      out: array<OT>       binding 1, the output, contiguous; store with `out[i] = to_out(v)` (f32 -> OT with
                           the output dtype's rounding)
      in0, in1 ...         bindings 2, 3 ...: the inputs, contiguous, element types T0, T1 ... (read as f32(in0[i]));
                           a None input is bound to a one-element dummy buffer; L0, L1 ... the types to
                           multiply them in (f16 for float16 with the backend's f16 compute, else f32)
      flat_id(wid, nwg, lid), WG (= 256), f_inf(), f_nan(), is_nan()   the shared helpers (webgpu/common.wgsl)
    `params(*inputs, **attrs)` gives the scalars after prm[0]; `grid(out_shape, *inputs, **attrs)` the
    workgroup counts (default: one thread per output element, `workgroup_size` per group, 2-D past 65535
    groups, so `flat_id` indexes it when workgroup_size is 256). Both see each input's `shape` (None for a
    None input). With `views=True` the inputs are bound as they are, strided views of their buffers, and
    `params`/`grid` also see each one's `strides` and `offset` (in elements) to address them; else every
    input is made contiguous first. `writes` numbers the inputs the kernel also writes in place (bound
    read_write, e.g. a KV cache the op appends a row to; pending reads of them run first); such inputs must
    be views of a buffer the caller owns (`views=True`), as the composed form writes them with copy_into.
    """

    backend = "webgpu"

    def __init__(self, source, workgroup_size=256, params=None, grid=None, views=False, writes=()):
        self._source, self.workgroup_size, self.params, self.grid = source, int(workgroup_size), params, grid
        self.views, self.writes = bool(views), tuple(int(i) for i in writes)
        if self.writes and not self.views:
            raise CustomOpError("ember: a WGSL kernel that writes its inputs needs views=True (a contiguous copy "
                                "would take the write)")
        self.op = None  # set by custom_op: names the op in compile and binding errors

    def source(self):
        s = self._source() if callable(self._source) else self._source
        if not isinstance(s, str):
            raise CustomOpError(f"ember: custom op {self.op!r}: WGSL source must be a str, got {type(s).__name__}")
        return s


class CUDA:
    """A CUDA kernel for one custom op: `source` holds `extern "C" __global__ void name(...)` with arguments
    (T* out, const T* in0, ..., long long n, then `params(*inputs, **attrs)` as int / float scalars), inputs
    contiguous; compiled by NVRTC (cupy.RawKernel) on first use. `block` threads per block;
    `grid(out_shape, *inputs, **attrs)` blocks (default: one thread per output element)."""

    backend = "cuda"

    def __init__(self, source, name, block=256, params=None, grid=None):
        self._source, self.name, self.block, self.params, self.grid = source, name, int(block), params, grid
        self.op = None

    def source(self):
        return self._source() if callable(self._source) else self._source


class Context:
    """What `backward(ctx, grad)` receives: the op's inputs (Tensors or None), its output and its attributes."""

    __slots__ = ("inputs", "output", "attrs")

    def __init__(self, inputs, output, attrs):
        self.inputs, self.output, self.attrs = inputs, output, attrs


# ============================================================================ the op

_REGISTRY: dict = {}


def custom_op(name, forward=None, backward=None, composed=None, output=None, replace=False):
    """Declare a fused op and register it by name (`ember.custom_ops()` lists them); returns the callable.

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
    if name in _REGISTRY and not replace:
        raise CustomOpError(f"ember: custom op {name!r} is already declared (pass replace=True to redeclare it)")
    op = CustomOp(name, dict(forward or {}), backward, composed, output)
    _REGISTRY[name] = op
    return op


def custom_ops():
    """{name: CustomOp} of every declared op."""
    return dict(_REGISTRY)


class CustomOp:
    def __init__(self, name, forward, backward, composed, output):
        for dev, k in forward.items():
            if not (callable(k) or isinstance(k, (WGSL, CUDA))):
                raise CustomOpError(f"ember: custom op {name!r}: forward[{dev!r}] must be a callable, "
                                    f"ember.WGSL or ember.CUDA, got {type(k).__name__}")
            if isinstance(k, (WGSL, CUDA)):
                if k.backend != dev:
                    raise CustomOpError(f"ember: custom op {name!r}: forward[{dev!r}] is a {type(k).__name__} "
                                        f"kernel, which runs on {k.backend!r}")
                k.op = name
        if not forward and composed is None:
            raise CustomOpError(f"ember: custom op {name!r} has neither a forward kernel nor a composed form")
        self.name, self.forward, self.backward, self.composed, self.output = name, forward, backward, composed, output

    def __repr__(self):
        return (f"CustomOp({self.name!r}, kernels={sorted(self.forward)}, composed={self.composed is not None}, "
                f"backward={self.backward is not None})")

    def path(self, device):
        """'kernel', 'composed' or 'host': what a call on `device` (without gradients) runs."""
        if device.type in self.forward:
            return "kernel"
        if self.composed is not None:
            return "composed"
        if "cpu" in self.forward:
            return "host"
        raise CustomOpError(f"ember: custom op {self.name!r} has no kernel for {device.type!r} "
                            f"(it has {sorted(self.forward)}) and no composed form")

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
        if path == "composed" or (grad and self.backward is None):
            if self.composed is None:
                raise CustomOpError(f"ember: custom op {self.name!r} has no backward and no composed form, so "
                                    f"gradients cannot flow through it (pass backward= or composed=)")
            out = self.composed(*inputs, **attrs)
            return self._checked(out, inputs, attrs, "composed")
        shape, dtype = self._output(inputs, attrs)
        with A.no_grad():
            arrays = [None if t is None else t._data for t in inputs]
            if path == "kernel":
                data = self._run_kernel(dev, arrays, inputs, shape, dtype, attrs)
            else:
                data = self._run_host(dev.backend, arrays, shape, dtype, attrs)
        out = ts[0]._new(data)
        if grad:
            A._record(out, "custom", tuple(inputs), self._node_backward(attrs), data)
        return out

    # ------------------------------------------------------------------ forward paths
    def _output(self, inputs, attrs):
        first = next(t for t in inputs if t is not None)
        spec = self.output(*inputs, **attrs) if self.output is not None else first.shape
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

    def _run_kernel(self, dev, arrays, inputs, shape, dtype, attrs):
        k = self.forward[dev.type]
        be = dev.backend
        if isinstance(k, (WGSL, CUDA)):
            run = getattr(be, "custom_kernel", None)
            if run is None:
                raise CustomOpError(f"ember: custom op {self.name!r}: backend {be.name!r} cannot run "
                                    f"{type(k).__name__} kernels")
            return run(k, arrays, shape, dtype, attrs)
        if dev.type == "cpu":
            return self._run_numpy(k, arrays, shape, dtype, attrs, "cpu")
        data = k(*arrays, **attrs)
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
        res = self._run_numpy(self.forward["cpu"], host, shape, dtype, attrs, f"cpu forward for {be.name}")
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
            grads = self.backward(ctx, g)
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

