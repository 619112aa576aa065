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

Families (29 primitives; 43 with the 13 optional fused ones and custom_kernel; to_numpy_async is to_numpy's awaitable form):
  transfer     from_numpy, to_numpy (+ to_numpy_async, default: to_numpy), full, arange
  elementwise  unary(op), binary(op), where, cast
  reduce       reduce(op), arg_reduce(op), cumsum, argsort
  movement     reshape, permute, expand, slice, pad, cat, contiguous
  compute      matmul, conv
  indexing     gather, index_select, scatter
  meta         shape, dtype_of, synchronize, supports, weight_layout (default: unchanged)
  optional     softmax, log_softmax, layer_norm, rms_norm, attention, gelu, silu, linear, conv_bias,
               qmatmul, rope (fused; None = compose), copy_into (slice assignment, in place where it can),
               decoder_plan (a decoded token through a decoder's layers in one call; None = layer by layer),
               custom_kernel (ember.custom_op's user kernels)
"""
from __future__ import annotations

UNARY_OPS = ("neg", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "tanh", "erf", "abs", "sign",
             "floor", "ceil", "round", "sigmoid", "recip", "not")
BINARY_OPS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod", "floordiv",
              "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor")
REDUCE_OPS = ("sum", "max", "min", "prod")
ARG_REDUCE_OPS = ("argmax", "argmin")
FUSED_OPS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "attention", "gelu", "silu", "linear",
             "conv_bias", "qmatmul", "rope", "copy_into")


class Backend:
    """Base class; every primitive fails loudly until a backend implements it (as Candle's stubs)."""

    name = "abstract"
    available = True

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

    def weight_layout(self, w):
        """A linear layer's (out, in) weight, re-stored for the `x @ w.T` reads of every forward: same
        values and shape, any memory layout. Called once after loading weights; default unchanged."""
        return w

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

    # -- optional fused ops: leave as None to have the tensor layer compose them -------------
    softmax = None       # (x, axis) -> softmax along axis
    log_softmax = None   # (x, axis)
    layer_norm = None    # (x, weight|None, bias|None, eps) over the last axis
    rms_norm = None      # (x, weight|None, eps) over the last axis
    attention = None     # (q, k, v, mask|None, scale, causal) -> softmax(q k^T * scale + mask) v
    gelu = None          # (x, approximate) -> x * Phi(x); approximate 'none' (erf) or 'tanh'
    silu = None          # (x) -> x * sigmoid(x)
    linear = None        # (x, w, b) -> x @ w.T + b, w (out, in), b (out,)
    conv_bias = None     # (x, w, b, stride, padding, dilation, groups) -> conv(...) + b per output channel
    qmatmul = None       # (x, raw, qtype, shape) -> float32 (..., N) = x @ dequantize(W).T for x (..., K) float;
    #                      W (N, K) as GGML blocks: raw uint8 (N, row_bytes) host array, qtype the
    #                      ember.quant.GGMLType descriptor (name, block_size, type_size, row_bytes(),
    #                      dequantize_rows()); composed: ember.quant.qmatmul on the host
    copy_into = None     # (dst, src, starts) -> dst with src (same dtype and ndim) written at offsets `starts`, in place
    #                      where the backend can (views of dst then see it, as after torch's in-place ops); the
    #                      tensor layer rebinds dst to the result; composed: x[slices] = src (a scatter into a copy)
    rope = None          # (x, cos, sin) -> rotate-half rotary embedding of x (B, T, H, D) in x's dtype,
    #                      cos/sin (T, D / 2) float32: [x1 c - x2 s, x2 c + x1 s] with x1, x2 the halves of D
    decoder_plan = None  # (spec) -> a plan whose step(x, rope, caches) runs one decoded token through a decoder's
    #                      layers in place, or None where it does not take the spec (models/common/fused_decode.py
    #                      builds the spec, the CPU backend's cpu_decode.py documents it); composed: the layers op by op
    custom_kernel = None  # (kernel, inputs, out_shape, out_dtype, attrs) -> a fresh array: run an ember.custom_op's
    #                      kernel descriptor (ember.WGSL on webgpu, ember.CUDA on cuda; its params(*inputs, **attrs)
    #                      and grid(...) are called with the inputs' arrays) over inputs (arrays or None); None =
    #                      the backend runs no user kernels (custom_op then composes, or runs its cpu forward on the host)
