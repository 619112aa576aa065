"""ember.kernels: the kernel registry, every fused or fast path of ember declared in one table.

An entry names one op, its composed reference (the same op in Tensor ops: it runs on every device, differentiates,
and is what the kernels are tested against) and its kernels, one per backend, side by side:

    op("softmax", "(x, axis) -> softmax of x along axis", composed="ember.ops_reduce:softmax_composed",
       cpu=Kernel("ember.backends.array_module_fused:softmax", "numpy"),
       webgpu=Kernel("ember.webgpu.fused:softmax", "webgpu/norm.wgsl softmax"),
       cuda=Kernel("ember.backends.cuda_fused:softmax", "cuda/rows.cu softmax_*"))

A kernel is a function `fn(backend, *arrays, **attrs)` over one backend's arrays, or a WGSL / CUDA descriptor
(ember.kernel_source) that the backend runs with its `custom_kernel` primitive. It is named by import path and
imported at its first use, so this table imports no backend. Where a tuning rule decides per call whether the
kernel takes a call (WebGPU's one-kernel attention for few query rows and keys), `choose(backend, tune, *args)`
sits next to the kernel and `tune` holds the rule's numbers (changed with `tuned(...)`).

Backends implement only the primitives (ember.primitives). The tensor layer asks this table for a kernel
(`bound(op, backend)`, ember.autograd.fused_kernel), and composes where there is none, where it is switched off
(`disabled(...)`, or EMBER_KERNELS_OFF=op,op) or while gradients are recorded through it. ember.custom_op declares a
user's ops into the same table. `ember info --kernels` prints the table; tests/test_kernel_registry.py runs every
declared kernel against its composed reference on each backend present.
"""
from __future__ import annotations

import contextlib
import importlib

from . import settings
from .errors import CustomOpError

BACKENDS = ("cpu", "webgpu", "cuda")  # the columns of `ember info --kernels`


class Kernel:
    """One backend's kernel for an op.

    ref: "module:qualname" of a function fn(backend, *arrays, **attrs) (or of a WGSL / CUDA descriptor), or the
      object itself. A user's custom-op kernel (`takes_backend=False`) is called without the backend.
    source: what runs, for people: a C symbol, a .wgsl / .cu file and entry point, or "numpy"; or "module:function"
      of describe(backend) -> str where that depends on the machine (the CPU's native, wasm or numpy build).
    choose: "module:function" of choose(backend, tune, *args, **attrs) -> bool, the kernel's tuning rule.
    tune: the rule's numbers (a dict the rule reads; tests and benchmarks change them with `tuned`).
    grad: for ops called with Tensors, "backward" (the op's backward rule differentiates this kernel's output) or
      "compose" (a call that records gradients runs the composed form, through autograd's primitives)."""

    __slots__ = ("ref", "source", "choose", "tune", "takes_backend", "grad", "_fn", "_choose")

    def __init__(self, ref, source, choose=None, tune=None, takes_backend=True, grad="backward"):
        self.ref, self.source, self.choose, self.tune = ref, source, choose, dict(tune or {})
        self.takes_backend, self.grad = takes_backend, grad
        self._fn = self._choose = None

    def fn(self):
        if self._fn is None:
            self._fn = resolve(self.ref)
        return self._fn

    def chooses(self, backend, *args, **attrs) -> bool:
        if self.choose is None:
            return True
        if self._choose is None:
            self._choose = resolve(self.choose)
        return bool(self._choose(backend, self.tune, *args, **attrs))

    def describe(self, backend=None) -> str:
        if isinstance(self.source, str) and ":" in self.source and self.source.startswith("ember."):
            return resolve(self.source)(backend)
        return str(self.source)

    def __repr__(self):
        return f"Kernel({self.ref if isinstance(self.ref, str) else type(self.ref).__name__!s}, {self.source!r})"


class FusedOp:
    """One op of the registry: its name, signature and meaning (`doc`), the composed reference, its kernels by
    backend name, and for the ops called as Tensor functions (ember.custom_op) the autograd rule and output spec."""

    __slots__ = ("name", "doc", "composed", "kernels", "backward", "output", "user", "tensor_call")

    def __init__(self, name, doc, composed, kernels, backward=None, output=None, user=False, tensor_call=False):
        self.name, self.doc, self.composed, self.kernels = name, doc, composed, dict(kernels)
        self.backward, self.output, self.user, self.tensor_call = backward, output, user, tensor_call

    def composed_fn(self):
        return None if self.composed is None else resolve(self.composed)

    def backward_fn(self):
        return None if self.backward is None else resolve(self.backward)

    def output_fn(self):
        return None if self.output is None else resolve(self.output)

    def __repr__(self):
        return f"FusedOp({self.name!r}, kernels={sorted(self.kernels)})"


def resolve(ref):
    """The object a "module:qualname" names (imported on first use), or ref itself when it is not a string."""
    if not isinstance(ref, str):
        return ref
    mod, _, qual = ref.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


# ============================================================================ the table

REGISTRY: dict[str, FusedOp] = {}
_BOUND: dict = {}  # backend object -> {op name: bound kernel or None}
_OFF: set = set()  # (op name, backend name or None for all) switched off by disabled()
_GENERATION = [0]  # counts changes of the table, its switches and its tuning (what a kept decision was made under)


def generation() -> int:
    """Changes whenever an op is declared, switched off or on, or tuned: a caller keeping a `chooses` decision per
    shapes keeps it with this number and asks again when it differs."""
    return _GENERATION[0]


def op(name, doc, composed=None, backward=None, output=None, user=False, tensor_call=False, replace=False,
       **kernels) -> FusedOp:
    """Declare an op with its kernels by backend name (cpu=Kernel(...), webgpu=..., cuda=...). tensor_call: the op
    is called with Tensors through ember.custom_op's machinery (output spec, backward, host fallback), not by a
    tensor-layer function that asks `bound` for the kernel."""
    if name in REGISTRY and not replace:
        raise CustomOpError(f"ember: op {name!r} is already declared in the kernel registry "
                            "(pass replace=True to redeclare it)")
    for be, k in kernels.items():
        if not isinstance(k, Kernel):
            raise CustomOpError(f"ember: op {name!r}: the {be} kernel must be an ember.kernels.Kernel, "
                                f"got {type(k).__name__}")
    entry = REGISTRY[name] = FusedOp(name, doc, composed, kernels, backward, output, user, tensor_call)
    _BOUND.clear()
    _GENERATION[0] += 1
    return entry


def get(name) -> FusedOp:
    entry = REGISTRY.get(name)
    if entry is None:
        raise CustomOpError(f"ember: no op {name!r} in the kernel registry (known: {', '.join(sorted(REGISTRY))})")
    return entry


def kernel(name, backend_name) -> Kernel | None:
    """The declared kernel of `name` for a backend name, or None (also while it is switched off)."""
    if (name, None) in _OFF or (name, backend_name) in _OFF or name in _ENV_OFF:
        return None
    return get(name).kernels.get(backend_name)


def bound(name, backend):
    """The kernel of `name` on this backend as a callable over its arrays, or None (compose instead). Cached per
    backend; a kernel runs through backend.kernel_call, where a backend sets up its device (CUDA's stream)."""
    table = _BOUND.get(backend)
    if table is None:
        table = _BOUND[backend] = {}
    try:
        return table[name]
    except KeyError:
        k = kernel(name, backend.kernel_set or backend.name)
        table[name] = None if k is None else backend.kernel_call(k.fn())
        return table[name]


def chooses(name, backend, *args, **attrs) -> bool:
    """Whether `name` runs its kernel on this backend for these arguments (its tuning rule, if it has one)."""
    k = kernel(name, backend.kernel_set or backend.name)
    return k is not None and k.chooses(backend, *args, **attrs)


# ============================================================================ switches for tests and benchmarks

@contextlib.contextmanager
def disabled(*names, backend=None):
    """Within the block the ops compose on `backend` (a name; None: every backend), as where no kernel exists."""
    keys = {(n, backend) for n in names if get(n)} - _OFF
    _OFF.update(keys)
    _BOUND.clear()
    _GENERATION[0] += 1
    try:
        yield
    finally:
        _OFF.difference_update(keys)
        _BOUND.clear()
        _GENERATION[0] += 1


@contextlib.contextmanager
def tuned(name, backend, **values):
    """Within the block the kernel's tuning numbers (`tune`) hold `values`: tuned("flash_attention", "webgpu",
    mode="flash") takes the one-kernel attention for every call."""
    k = get(name).kernels.get(backend)
    if k is None:
        raise CustomOpError(f"ember: op {name!r} has no {backend} kernel to tune")
    unknown = set(values) - set(k.tune)
    if unknown:
        raise CustomOpError(f"ember: the {backend} kernel of {name!r} has no tuning value {sorted(unknown)} "
                            f"(it has {sorted(k.tune)})")
    saved = dict(k.tune)
    k.tune.update(values)
    _GENERATION[0] += 1
    try:
        yield k.tune
    finally:
        k.tune.clear()
        k.tune.update(saved)
        _GENERATION[0] += 1


# ops switched off for the whole process (read once, at import): EMBER_KERNELS_OFF=attention,qmatmul
_ENV_OFF = frozenset(s.strip() for s in (settings.get("EMBER_KERNELS_OFF") or "").split(",") if s.strip())


# ============================================================================ what `ember info --kernels` prints

def table(backends=None) -> list[tuple[str, dict]]:
    """[(op name, {backend name: what runs, or "composed"})] over the declared ops, user ops last. `backends`
    maps a backend name to its backend object where one works here (what runs then follows the machine)."""
    backends = backends or {}
    rows = []
    for entry in sorted(REGISTRY.values(), key=lambda e: (e.user, e.name)):
        cells = {}
        for be in BACKENDS:
            k = kernel(entry.name, be)
            if k is None:
                cells[be] = "composed"
            else:
                cells[be] = k.describe(backends.get(be))
        rows.append((entry.name, cells))
    return rows


# ============================================================================ the declared ops
# composed references and kernels are "module:function"; a kernel's function takes the backend, then the arrays.

_AM, _CPU, _Q, _CU, _WG = ("ember.backends.array_module_fused:", "ember.backends.cpu_fused:",
                           "ember.backends.cpu_quant:", "ember.backends.cuda_fused:", "ember.webgpu.fused:")
_DN = "ember.backends.cpu_dense:"

op("softmax", "(x, axis) -> exp(x - max) / sum along axis", composed="ember.ops_reduce:softmax_composed",
   cpu=Kernel(_CPU + "softmax", "numpy (the page's exp kernel in the page and deterministic mode)"),
   webgpu=Kernel(_WG + "softmax", "norm.wgsl softmax"),
   cuda=Kernel(_CU + "softmax", "cuda/rows.cu softmax_*"))
op("log_softmax", "(x, axis) -> x - max - log(sum(exp(x - max))) along axis",
   composed="ember.ops_reduce:log_softmax_composed",
   cpu=Kernel(_CPU + "log_softmax", "numpy (the page's exp kernel in the page and deterministic mode)"),
   webgpu=Kernel(_WG + "log_softmax", "norm.wgsl softmax (log)"),
   cuda=Kernel(_CU + "log_softmax", "cuda/rows.cu log_softmax_*"))
op("layer_norm", "(x, weight|None, bias|None, eps) -> LayerNorm over the last axis",
   composed="ember.nn.functional:layer_norm_composed",
   cpu=Kernel(_DN + "layer_norm", _DN + "describe_rows"), webgpu=Kernel(_WG + "layer_norm", "norm.wgsl norm"),
   cuda=Kernel(_CU + "layer_norm", "cuda/rows.cu layer_norm_*"))
op("rms_norm", "(x, weight|None, eps) -> RMSNorm over the last axis", composed="ember.nn.functional:rms_norm_composed",
   cpu=Kernel(_AM + "rms_norm", "numpy"), webgpu=Kernel(_WG + "rms_norm", "norm.wgsl norm (rms)"),
   cuda=Kernel(_CU + "rms_norm", "cuda/rows.cu rms_norm_*"))
op("attention", "(q, k, v, mask|None, scale, causal) -> softmax(q k^T scale + mask) v, batch dims broadcast",
   composed="ember.nn.functional:attention_composed",
   cpu=Kernel(_DN + "attention", _DN + "describe_attention", choose=_DN + "choose_attention",
              tune={"mode": "auto", "min_scores": 128}),
   webgpu=Kernel(_WG + "attention", "matmul.wgsl + norm.wgsl attn_softmax + matmul.wgsl"),
   cuda=Kernel(_CU + "attention", "cuda/attention.cu attention_*"))
op("gelu", "(x, approximate 'none'|'tanh') -> x * Phi(x)", composed="ember.ops_elementwise:gelu_composed",
   cpu=Kernel(_DN + "gelu", _DN + "describe_rows"))
op("silu", "(x) -> x * sigmoid(x)", composed="ember.ops_elementwise:silu_composed",
   cpu=Kernel(_DN + "silu", _DN + "describe_rows"))
op("linear", "(x, w (out, in), b (out,)) -> x @ w.T + b", composed="ember.nn.functional:linear_composed",
   cpu=Kernel(_CPU + "linear", "BLAS matmul, bias added in place"),
   webgpu=Kernel(_WG + "linear", "matmul.wgsl with the bias as its epilogue"))
op("linear_argmax", "(x one row (..., K), w (N, K)) -> int: the index of the largest of x @ w.T, the first of equal "
   "ones: greedy decoding's pick from a float output layer", composed="ember.nn.functional:linear_argmax_composed",
   cpu=Kernel("ember.backends.cpu_argmax:linear_argmax", "ember.backends.cpu_argmax:describe"))
op("linear_act", "(x, w (out, in), b (out,), act 'gelu'|'gelu_tanh'|'silu'|'relu'|None) -> act(x @ w.T + b), or None "
   "where the kernel does not take it: a linear layer with its activation in the product's epilogue",
   composed="ember.nn.functional:linear_act_composed",
   cpu=Kernel(_CPU + "linear_act", "natively gemm_native.c's epilogue; in the page the kernel pool: bias and "
              "activation in its memory (rows.c bias_act)"))
op("linears", "(x, [w], [b|None]) -> one x @ [w0 | w1 | ...].T + [b0 | ...] whose column ranges are the results, "
   "or None where the kernel does not take it", composed="ember.nn.functional:linears_composed",
   webgpu=Kernel(_WG + "linears", "quant.wgsl qmatvec over the weights where they lie (decode rows)"))
op("lstm_cell", "(xg (N, 4H), h (N, H), c (N, H), w_hh (4H, H), b_hh|None) -> (N, 2H) h' | c' of one LSTM step, "
   "gates i f g o", composed="ember.nn.recurrent:lstm_cell_composed",
   cpu=Kernel("ember.backends.cpu_recurrent:lstm_cell", "ember.backends.cpu_recurrent:describe"),
   webgpu=Kernel(_WG + "lstm_cell", "recurrent.wgsl (dot products and gates, a thread per hidden unit)"))
op("gru_cell", "(xg (N, 3H), h (N, H), w_hh (3H, H), b_hh|None) -> h' (N, H) of one GRU step, gates r z n",
   composed="ember.nn.recurrent:gru_cell_composed",
   cpu=Kernel("ember.backends.cpu_recurrent:gru_cell", "ember.backends.cpu_recurrent:describe"),
   webgpu=Kernel(_WG + "gru_cell", "recurrent.wgsl (dot products and gates, a thread per hidden unit)"))
op("lstm_sequence", "(xg (L, N, 4H), h0 (N, H), c0 (N, H), w_hh (4H, H), b_hh|None, reverse=) -> (L, N, 2H) h_t | c_t "
   "of every step of one LSTM direction (from step L - 1 down with reverse): the time loop in the kernel",
   composed="ember.nn.recurrent:lstm_sequence_composed",
   cpu=Kernel("ember.backends.cpu_recurrent:lstm_sequence", "ember.backends.cpu_recurrent:describe"))
op("gru_sequence", "(xg (L, N, 3H), h0 (N, H), w_hh (3H, H), b_hh|None, reverse=) -> (L, N, H) h_t of every step of "
   "one GRU direction: the time loop in the kernel", composed="ember.nn.recurrent:gru_sequence_composed",
   cpu=Kernel("ember.backends.cpu_recurrent:gru_sequence", "ember.backends.cpu_recurrent:describe"))
op("conv_bias", "(x, w, b, stride, padding, dilation, groups) -> conv(x, w) + b per output channel",
   composed="ember.nn.functional:conv_bias_composed",
   cpu=Kernel(_DN + "conv_bias", _DN + "describe_conv"))
op("conv_bias_act", "(x, w, b|None, stride, padding, dilation, groups, act None|'relu'|'silu'|'gelu'|'gelu_tanh') -> "
   "act(conv(x, w) + b): conv1d / conv2d with the bias and activation in its epilogue",
   composed="ember.nn.functional:conv_bias_act_composed",
   cpu=Kernel(_DN + "conv_bias_act", _DN + "describe_conv", choose=_DN + "choose_conv",
              tune={"mode": "auto", "min_taps": 4, "narrow": 8, "pointwise_pixels": 16384,
                    "winograd_channels": 32}))
op("conv_cat_act", "(xs [(N, C_i, H, W), ...], w (O, sum C_i, 1, 1), b|None, act None|'relu'|'silu'|'gelu'|"
   "'gelu_tanh') -> act(conv(cat(xs, 1), w) + b), or None where the kernel does not take it: a 1x1 conv over a "
   "channel concatenation, each part read where it lies (no concatenated copy)",
   composed="ember.nn.functional:conv_cat_act_composed",
   cpu=Kernel(_DN + "conv_cat_act", "natively gemm_native.c over each part's rows (conv_bias_act's 1x1 bits); "
              "in the page's kernel pool the parts written where the call's x goes; elsewhere composed"))
op("max_pool2d", "(x (N, C, H, W), kernel (kh, kw), stride, pads (top, left), dilation, out (ho, wo)) -> (N, C, ho, wo): "
   "the max of each window (taps dilation apart, windows stride apart from (-top, -left); the lowest value outside "
   "x, NaN where a window holds one)",
   composed="ember.nn.functional:max_pool2d_composed",
   cpu=Kernel(_DN + "max_pool2d", _DN + "describe_maps"))
op("upsample_nearest", "(x (N, C, H, W), factors (fh, fw) whole numbers) -> (N, C, H fh, W fw): each pixel an fh x fw "
   "block (nearest-neighbour upsampling)",
   composed="ember.nn.functional:upsample_nearest_composed",
   cpu=Kernel(_DN + "upsample_nearest", _DN + "describe_maps"))
op("letterbox", "(img (H, W, C) uint8, tables (x0, x1, a0, a1, y0, y1, b0, b1) int32 or None, new_h, new_w, out_h, "
   "out_w, top, left, pad) -> float32 (1, C, out_h, out_w): img resized as cv2.resize on uint8 (INTER_LINEAR through "
   "the tables, INTER_AREA's 2x path for None), placed at (top, left) on a canvas of pad, over 255 (a detector's input)",
   composed="ember.data.resize:letterbox_composed",
   cpu=Kernel("ember.backends.cpu_image:letterbox", "ember.backends.cpu_image:describe",
              choose="ember.backends.cpu_image:choose_letterbox"))
op("copy_into", "(dst, src, starts) -> dst with src written at offsets starts, in place (views of dst see it)",
   composed="ember.ops_indexing:copy_into_composed",
   cpu=Kernel(_AM + "copy_into", "numpy slice assignment"), webgpu=Kernel(_WG + "copy_into", "copy.wgsl copy"),
   cuda=Kernel(_AM + "copy_into", "CuPy slice assignment"))
op("qmatmul", "(x (..., K), raw uint8 (N, row_bytes), GGMLType, (N, K), activations 'float32'|'q8') -> float32 "
   "(..., N) = x @ dequantize(W).T; 'q8': x quantized to 8 bits per block as llama.cpp's CPU (GPUs multiply floats)",
   composed="ember.qtensor:qmatmul_composed",
   cpu=Kernel(_Q + "qmatmul", _Q + "describe_qmatmul"),
   webgpu=Kernel(_WG + "qmatmul", "quant.wgsl qmatvec / dequant + matmul.wgsl"),
   cuda=Kernel(_CU + "qmatmul", "cuda/quant.cu qmatvec_* / dequant_* + cuBLAS"))
op("qlinear", "(x (..., K), weight=QTensor (N, K)) -> x @ W.T as qmatmul, differentiable in x: the backward's "
   "dx = dy @ W dequantizes W a slab of rows at a time (LoRA on a quantized model never holds W whole)",
   composed="ember.qtensor:qlinear_composed", backward="ember.qtensor:qlinear_backward",
   output="ember.qtensor:qlinear_output", tensor_call=True,
   cpu=Kernel(_Q + "qlinear", _Q + "describe_qmatmul"),
   webgpu=Kernel(_WG + "qlinear", "quant.wgsl qmatvec / dequant + matmul.wgsl, per device part"))
op("qrows", "(ids int64 (n,), raw uint8 (N, row_bytes), GGMLType, (N, K)) -> float32 (n, K): rows ids of the "
   "dequantized weight (a quantized embedding's lookup)", composed="ember.qtensor:qrows_composed",
   cpu=Kernel(_Q + "qrows", _Q + "describe_qrows"))
op("qmatmul_argmax", "(x one row, raw, GGMLType, (N, K), activations) -> argmax of qmatmul: greedy decoding's pick "
   "from a quantized output layer", composed="ember.qtensor:qmatmul_argmax_composed",
   cpu=Kernel(_Q + "qmatmul_argmax", _Q + "describe_bounded"))
op("qmatmul_topk", "(x one row, raw, GGMLType, (N, K), activations, k) -> (ids ascending, values): rows of qmatmul "
   "that include its k largest", composed="ember.qtensor:qmatmul_topk_composed",
   cpu=Kernel(_Q + "qmatmul_topk", _Q + "describe_bounded"))
op("nbits_matmul", "(x (..., K), packed uint8 (N, blocks * block * bits / 8), scales (N, blocks), zeros (N, blocks), "
   "bits, block, (N, K)) -> float32 (..., N) = x @ ((levels - zeros) * scales).T: onnxruntime's MatMulNBits layout "
   "(ember.ops_blockwise)", composed="ember.ops_blockwise:nbits_matmul_composed",
   cpu=Kernel("ember.backends.cpu_nbits:nbits_matmul", "ember.backends.cpu_nbits:describe"),
   webgpu=Kernel("ember.webgpu.nbits:nbits_matmul", "nbits.wgsl (packed bits on the device)"))
op("decoder_plan", "(spec) -> a plan whose step(x, rope, caches) runs one decoded token through a decoder's layers "
   "in place (models/common/fused_decode.py builds the spec), or None where it does not take the spec; composed: "
   "the model's layers op by op", composed=None,
   cpu=Kernel("ember.backends.cpu_decode:decoder_plan", "ember.backends.cpu_decode:describe"))
op("xattn_decoder_plan", "(spec) -> a plan whose step(x, caches, cross) runs one decoded token through an "
   "encoder-decoder's decoder layers (LayerNorm blocks, self-attention with its cache, cross-attention over the "
   "encoder's keys and values, an MLP) in place (models/whisper/fused_decode.py builds the spec), and whose "
   "logits(x) gives the output projection's logits where the plan runs it (the page's kernel pool: the head placed "
   "with the layers) or None; None where it does not take the spec; composed: the model's layers op by op and its "
   "head's matmul", composed=None,
   cpu=Kernel("ember.backends.cpu_decode_xattn:decoder_plan", "ember.backends.cpu_decode_xattn:describe"))
op("rotary_embedding", "(x (B, T, H, D), cos, sin (T, D / 2)) -> [x1 cos - x2 sin, x2 cos + x1 sin] (rotate-half)",
   composed="ember.nn.fused_ops:rope_composed", backward="ember.nn.fused_ops:rope_backward", tensor_call=True,
   webgpu=Kernel(_WG + "ROTARY", "rope.wgsl"), cuda=Kernel(_CU + "rope", "cuda/rows.cu rope_*", grad="compose"))
op("flash_attention", "(q, k, v (B1, B2, L|S, D), mask|None, scale=, causal=) -> attention in one online-softmax "
   "kernel", composed="ember.nn.fused_ops:flash_composed", output="ember.nn.fused_ops:flash_output", tensor_call=True,
   webgpu=Kernel(_WG + "FLASH", "attention.wgsl", choose=_WG + "choose_flash",
                 tune={"mode": "auto", "rows": 16, "keys": 64}))
op("flash_attention_split", "(q, k, v, mask|None, scale=, causal=, chunk=) -> per chunk of keys the unnormalized "
   "output row, its maximum and its sum (flash-decoding's first pass)", composed="ember.nn.fused_ops:split_composed",
   output="ember.nn.fused_ops:split_output", tensor_call=True,
   webgpu=Kernel(_WG + "FLASH_SPLIT", "attention.wgsl (split keys)"))
op("flash_attention_combine", "(part, dtype=) -> the split pass's chunks combined into attention rows",
   composed="ember.nn.fused_ops:combine_composed", output="ember.nn.fused_ops:combine_output", tensor_call=True,
   webgpu=Kernel(_WG + "FLASH_COMBINE", "attention_combine.wgsl"))
op("rope_append_attention", "(qkv (B, 1, H + 2K, hd), rot, k_cache, v_cache, mask|None, n_heads=, slot=, length=, "
   "scale=) -> one decoded token's rope, KV-cache row write and attention", tensor_call=True,
   composed="ember.nn.fused_ops:append_composed", output="ember.nn.fused_ops:append_output",
   webgpu=Kernel(_WG + "ROPE_APPEND", "decode_attention.wgsl", choose=_WG + "choose_rope_append"))
