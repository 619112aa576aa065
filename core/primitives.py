"""The primitive op interface: the whole contract a backend implements.

Every user-facing op in ember (Tensor methods, ember.nn.functional) is composed in the tensor
layer from these primitives, so a new backend (webgpu, cuda, ...) only writes this list.
Backend arrays are opaque handles; the tensor layer never looks inside them. The array-module backend
(ember/backends/array_module_backend.py, run by the CPU backend over numpy and the CUDA backend over CuPy)
is the reference and documents each primitive's semantics in code.

Conventions
- `x`, `a`, `b`, ... are backend arrays; shapes are tuples of ints; axes are non-negative ints.
- dtypes are `ember.dtypes.DType`; bfloat16 arrays compute in float32 and round back (RNE).
- Elementwise ops broadcast with numpy rules; `b` of `binary` may be a Python scalar.
- Movement ops may return views; results are never written to in place by the tensor layer.

Families (29 primitives, PRIMITIVES; META lists the backend's other declared methods):
  transfer     from_numpy, to_numpy, full, arange
  elementwise  unary(op), binary(op), where, cast
  reduce       reduce(op), arg_reduce(op), cumsum, argsort
  movement     reshape, permute, expand, slice, pad, cat, contiguous
  compute      matmul, conv
  indexing     gather, index_select, scatter
  meta         shape, dtype_of, synchronize, supports, weight_layout (default: unchanged), to_numpy_async
               (default: to_numpy), custom_kernel (runs a WGSL / CUDA descriptor; default: refuses), kernel_call
               (how a kernel of the registry is called on this backend; default: fn(backend, *args))
Fused and fast paths (softmax, norms, attention, quantized matmul, the one-call decode step, ...) are not part of
this interface: each is an entry of the kernel registry (ember.kernels) with a composed reference and a kernel per
backend that has one.
"""
from __future__ import annotations

import functools

UNARY_OPS = ("neg", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "tanh", "erf", "abs", "sign",
             "floor", "ceil", "round", "sigmoid", "recip", "not")
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod", "floordiv",
              "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor")
REDUCE_OPS = ("sum", "max", "min", "prod")
ARG_REDUCE_OPS = ("argmax", "argmin")
PRIMITIVES = ("from_numpy", "to_numpy", "full", "arange", "unary", "binary", "where", "cast", "reduce", "arg_reduce",
              "cumsum", "argsort", "reshape", "permute", "expand", "slice", "pad", "cat", "contiguous", "matmul",
              "conv", "gather", "index_select", "scatter", "shape", "dtype_of", "synchronize", "supports",
              "weight_layout")
META = ("to_numpy_async", "custom_kernel", "kernel_call")


class Backend:
    """Base class; every primitive fails loudly until a backend implements it (as Candle's stubs)."""

    name = "abstract"
    available = True
    unavailable_reason = "the backend reports itself unavailable"
    description = ""  # what `ember info` and device_status show for a working device (webgpu: the adapter)
    kernel_set = None  # the kernel registry's column whose kernels run here (ember.kernels; None: the name)

    def _missing(self, what):
        raise NotImplementedError(f"ember: backend '{self.name}' does not implement primitive '{what}'")

    # -- transfer / creation ------------------------------------------------------------
    def from_numpy(self, a, dtype):
        """numpy storage array (dtype.np; bf16 as uint16 bits) -> backend array of `dtype`."""
        self._missing("from_numpy")

    def to_numpy(self, x):
        """backend array -> numpy storage array (bf16 as uint16 bits); a copy the caller may keep."""
        self._missing("to_numpy")

    async def to_numpy_async(self, x):
        """to_numpy as an awaitable, for backends whose reads are asynchronous (WebGPU in a page without
        JSPI overrides it); the default reads synchronously."""
        return self.to_numpy(x)

    def full(self, shape, value, dtype):
        self._missing("full")

    def arange(self, start, stop, step, dtype):
        self._missing("arange")

    # -- meta -----------------------------------------------------------------------------
    def shape(self, x):
        self._missing("shape")

    def dtype_of(self, x):
        self._missing("dtype_of")

    def synchronize(self):
        pass

    def supports(self, dtype):
        """Whether arrays of this ember dtype can live on the device (e.g. WebGPU has no float64)."""
        return True

    def weight_layout(self, w, dtype=None):
        """A linear layer's (out, in) weight, re-stored for the `x @ w.T` reads of every forward: same
        values and shape, any memory layout; cast to ember dtype `dtype` on the way where given (loading
        builds the stored copy straight from the checkpoint's array). Default: unchanged but for the cast."""
        return w if dtype is None else self.cast(w, dtype)

    # -- elementwise ----------------------------------------------------------------------
    def unary(self, op, x):
        """op in UNARY_OPS; output dtype = input dtype ('not' takes and gives bool)."""
        self._missing(f"unary.{op}")

    def binary(self, op, a, b):
        """op in BINARY_OPS; a and b share one dtype (b may be a Python scalar); comparisons
        and logical ops return bool; broadcasting as numpy."""
        self._missing(f"binary.{op}")

    def where(self, cond, a, b):
        """cond: bool array; a, b share one dtype; broadcasting as numpy."""
        self._missing("where")

    def cast(self, x, dtype):
        """Convert values (float->int truncates toward zero, as torch); bf16 rounds to nearest even."""
        self._missing("cast")

    # -- reductions -------------------------------------------------------------------------
    def reduce(self, op, x, axes, keepdim):
        """op in REDUCE_OPS over the tuple `axes`; float16/bf16 accumulate in float32."""
        self._missing(f"reduce.{op}")

    def arg_reduce(self, op, x, axis, keepdim):
        """argmax/argmin along one axis -> int64; first occurrence wins."""
        self._missing(f"arg_reduce.{op}")

    def cumsum(self, x, axis):
        self._missing("cumsum")

    def argsort(self, x, axis, descending):
        """Stable sort indices (int64) along `axis`."""
        self._missing("argsort")

    # -- movement ---------------------------------------------------------------------------
    def reshape(self, x, shape):
        self._missing("reshape")

    def permute(self, x, order):
        self._missing("permute")

    def expand(self, x, shape):
        """Broadcast size-1 dims (and new leading dims) to `shape`."""
        self._missing("expand")

    def slice(self, x, starts, stops, steps):
        """Python slice semantics per axis with normalised, in-range starts/stops; steps != 0."""
        self._missing("slice")

    def pad(self, x, pads, value):
        """pads: ((before, after), ...) per axis, non-negative; constant `value`."""
        self._missing("pad")

    def cat(self, xs, axis):
        self._missing("cat")

    def contiguous(self, x):
        self._missing("contiguous")

    # -- compute ----------------------------------------------------------------------------
    def matmul(self, a, b):
        """Batched matmul with numpy broadcasting of batch dims; a, b at least 2-D."""
        self._missing("matmul")

    def conv(self, x, w, stride, padding, dilation, groups):
        """N-d convolution (cross-correlation), x (N, C, *S), w (O, C // groups, *K);
        stride/padding/dilation are tuples with one int per spatial dim; zero padding."""
        self._missing("conv")

    # -- indexing ---------------------------------------------------------------------------
    def gather(self, x, axis, idx):
        """out[i][j][k] = x[i][idx[i][j][k]][k] for axis=1 (torch.gather); idx int64, in range."""
        self._missing("gather")

    def index_select(self, x, axis, idx):
        """idx: 1-D int64 in range; out.shape[axis] = len(idx)."""
        self._missing("index_select")

    def scatter(self, x, axis, idx, src, reduce):
        """Copy of x with src scattered along axis (torch.scatter); reduce None (replace) or 'add'."""
        self._missing("scatter")

    # -- meta: the backend's declared extras (not primitives) ------------------------------
    def custom_kernel(self, kernel, inputs, out_shape, out_dtype, attrs):
        """Run a WGSL / CUDA kernel descriptor (ember.kernel_source) over inputs (arrays or None) into a fresh
        array of out_shape / out_dtype: how the registry's descriptor kernels and ember.custom_op's user kernels
        run. Backends that compile such kernels (webgpu, cuda) override it."""
        from .errors import CustomOpError
        raise CustomOpError(f"ember: backend {self.name!r} cannot run {type(kernel).__name__} kernels")

    def kernel_call(self, fn):
        """A registry kernel fn(backend, *args, **attrs) bound to this backend (CUDA enters its device and stream)."""
        return functools.partial(fn, self)
