"""QTensor: a quantized tensor as GGML stores it — raw blocks, a GGML type and a logical shape — and its products,
dispatched through the kernel registry (ember.kernels: qmatmul, qmatmul_argmax, qmatmul_topk) to the device's
kernel: the CPU's (core/backends/cpu_quant.py), WebGPU's or CUDA's. Tensor layer: the GGUF reader (ember.io) makes
QTensors, ember.quant builds layers on them.
"""
from __future__ import annotations

import numpy as np

from . import kernels as K
from .backends.cpu_pool import SharedRows
from .ggml import types as T
from .ggml.codec import check_raw, dequantize_rows, quantize

PART_BYTES = 64 << 20  # the largest block array a device multiplies by at once (see QTensor.device_parts)


class QTensor:
    """Quantized weights (CPU, immutable).

        q = QTensor.quantize(w, "q4_k")   # w: ember Tensor or ndarray (..., n), n a multiple of the block
        q.ggml_type, q.shape, q.nbytes     # ember.ggml.types.Q4_K, (out, in), bytes of blocks
        q.dequantize()                     # ember Tensor, float32
        q.matmul_t(x)                      # x @ W.T without building W in float32

    data is a uint8 array (rows, row_bytes): one row of blocks per row of the tensor (GGUF layout), or in the page
    SharedRows: the same rows held in its kernel pool's memory only (ember.backends.cpu_pool), which the CPU's
    kernels read there and anything else copies out.

    activations: how matmul_t treats x on the CPU (and in the page). "float32" multiplies x as it is:
    x @ dequantize(W).T up to summation order. "q8" quantizes x to 8 bits per block as llama.cpp's CPU backend
    does for W's type and sums integer products (core/backends/cpu_q8dot.py): llama.cpp's numbers at its speed.
    GPU backends multiply float activations either way.
    """

    __slots__ = ("data", "ggml_type", "shape", "name", "_activations", "_parts")

    def __init__(self, data, ggml_type, shape, name: str | None = None, activations: str = "float32"):
        self.ggml_type = T.get(ggml_type)
        self.shape = tuple(int(s) for s in shape)
        self.name = name
        self.data = _check_shared(data, self.ggml_type, self.shape, self._what()) if isinstance(data, SharedRows) \
            else check_raw(data, self.ggml_type, self.shape, self._what())
        self.activations = activations
        self._parts = None  # row slices a device multiplies by one at a time (device_parts)

    @classmethod
    def quantize(cls, x, ggml_type, name: str | None = None) -> "QTensor":
        a = _as_float_numpy(x, name)
        return cls(quantize(a, ggml_type, name or "tensor"), ggml_type, a.shape, name)

    def _what(self):
        return f"tensor {self.name!r}" if self.name else "tensor"

    @property
    def activations(self) -> str:
        return self._activations

    @activations.setter
    def activations(self, mode: str):
        if mode not in ("float32", "q8"):
            raise ValueError(f"ember: {self._what()}: activations must be 'float32' or 'q8', got {mode!r}")
        if mode == "q8" and not (self.ggml_type.vec_dot_type is not None and len(self.shape) == 2):
            raise ValueError(f"ember: {self._what()}: llama.cpp's 8-bit activations need a 2-d weight of "
                             f"{', '.join(T.VEC_DOT_TYPES)}, not {self.ggml_type.name} {self.shape}")
        self._activations = mode

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self):
        return self.data.nbytes

    def numpy(self) -> np.ndarray:
        """Dequantized values, float32, shape self.shape."""
        return dequantize_rows(np.asarray(self.data), self.ggml_type).reshape(self.shape)

    def dequantize(self):
        """An ember Tensor (float32, CPU) with the dequantized values."""
        from .dtypes import float32
        from .tensor import Tensor
        return Tensor._from_storage(self.numpy(), float32)

    def matmul_t(self, x):
        """x @ self.T for a 2-d quantized weight (out, in): x (..., in) -> (..., out), float32.
        x is an ndarray (returns an ndarray: the CPU's kernel) or an ember Tensor (returns a Tensor on x's
        device: the device's qmatmul kernel, or composed on the host where it has none). No gradient either way:
        linear() is the differentiable form."""
        self._check_input(x)
        if isinstance(x, np.ndarray):
            return K.bound("qmatmul", _cpu())(x, self.data, self.ggml_type, self.shape, self.activations)
        kernel = K.bound("qmatmul", x.device._backend)
        if kernel is None:
            return qmatmul_composed(x, self.data, self.ggml_type, self.shape, self.activations)
        from .autograd import prim_fused
        parts = self.device_parts()
        if len(parts) == 1:
            return prim_fused(kernel, x, self.data, self.ggml_type, self.shape, self.activations)  # (..., out) float32
        from .ops_movement import cat
        return cat([prim_fused(kernel, x, p.data, p.ggml_type, p.shape, p.activations) for p in parts], -1)

    def linear(self, x):
        """x @ self.T (..., out) float32 for an ember Tensor x, differentiable in x when it requires a gradient (the
        registry's qlinear op: its backward multiplies by W a slab of rows at a time; W gets no gradient)."""
        self._check_input(x)
        from .autograd import is_grad_enabled
        if not (is_grad_enabled() and x.requires_grad):
            return self.matmul_t(x)
        from .custom_op import registered
        return registered("qlinear")(x, weight=self)

    def _check_input(self, x):
        if len(self.shape) != 2:
            raise ValueError(f"ember: quantized matmul needs a 2-d weight, {self._what()} has shape {self.shape}")
        if tuple(x.shape[-1:]) != self.shape[1:]:
            raise ValueError(f"ember: quantized matmul: input of shape {tuple(x.shape)} does not match "
                             f"{self._what()} of shape {self.shape} (last dim must be {self.shape[1]})")

    def device_parts(self) -> list["QTensor"]:
        """The weight as slices of whole rows of at most PART_BYTES each (itself when it fits), kept so a device
        uploads each once: WebGPU binds at most 128 MiB per buffer by default (maxStorageBufferBindingSize),
        less than a 262k-row tied embedding's blocks (178 MB for Gemma 3 270M's Q8_0)."""
        if self._parts is None:
            step = max(1, PART_BYTES // max(1, self.data.shape[1])) if len(self.shape) == 2 else self.shape[0]
            self._parts = [self] if self.data.nbytes <= PART_BYTES else \
                [QTensor(self.data[s:s + step], self.ggml_type, (min(step, self.shape[0] - s), self.shape[1]),
                         self.name, self.activations) for s in range(0, self.shape[0], step)]
        return self._parts

    def rows(self, ids) -> np.ndarray:
        """Rows ids (int, any shape) of a 2-d weight, dequantized: float32 (n, in) for the n ids, through the
        registry's qrows (under Pyodide the wasm blocks decoder, from the kernel pool's memory where the weight
        lives there: an embedding's lookup a decoded token)."""
        if len(self.shape) != 2:
            raise ValueError(f"ember: rows of a quantized weight need it 2-d, {self._what()} has shape {self.shape}")
        ids = np.asarray(ids, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.shape[0]):
            raise ValueError(f"ember: row id out of range [0, {self.shape[0]}) of {self._what()}")
        return K.bound("qrows", _cpu())(ids, self.data, self.ggml_type, self.shape)

    def argmax_matmul_t(self, x) -> int:
        """int(np.argmax(self.matmul_t(x))) for one row x (in,) or (1, ..., in): greedy decoding's pick from a
        tied output, through the registry's qmatmul_argmax (the CPU's bounded Q8_0 kernel under Pyodide computes
        only the rows that can win; elsewhere every row is computed)."""
        self._check_input(x)
        return int(self._host_kernel("qmatmul_argmax", x)(self._row(x), self.data, self.ggml_type, self.shape,
                                                           self.activations))

    def topk_matmul_t(self, x, k: int):
        """(ids, values) for one row x (in,) or (1, ..., in): ids (ascending int64) of rows of self.matmul_t(x)
        that include every row among its k largest (ties with the k-th too), values those rows' float32
        entries of it: sampling's top-k from a tied output (qmatmul_topk: bounded under Pyodide for Q8_0;
        elsewhere ids = all rows)."""
        self._check_input(x)
        return self._host_kernel("qmatmul_topk", x)(self._row(x), self.data, self.ggml_type, self.shape,
                                                     self.activations, k)

    def _host_kernel(self, name, x):
        """The CPU's kernel for a one-row pick where x is on the host, else the composed form over x's device."""
        if isinstance(x, np.ndarray) or str(x.device) == "cpu":
            return K.bound(name, _cpu())
        composed = K.get(name).composed_fn()
        return lambda row, *args: composed(x, *args)

    @staticmethod
    def _row(x):
        return np.asarray(x if isinstance(x, np.ndarray) else x.numpy() if str(x.device) == "cpu" else x)

    def __repr__(self):
        name = f", name={self.name!r}" if self.name else ""
        return f"QTensor(shape={self.shape}, ggml_type={self.ggml_type.name}, nbytes={self.nbytes}{name})"


def _cpu():
    from .device import device
    return device("cpu").backend


def _check_shared(rows: SharedRows, t, shape, what) -> SharedRows:
    want = t.nbytes(shape, f"{what} of shape {shape}")
    if rows.nbytes != want or (shape and rows.shape[1] != t.row_bytes(shape[-1])):
        raise ValueError(f"ember: {what}: {rows.nbytes} bytes of {t.name} data in rows of {rows.shape[1]} for shape "
                         f"{shape}, expected {want}")
    return rows


# ============================================================================ the registry's composed references

def qmatmul_composed(x, raw, qtype, shape, activations="float32"):
    """x @ dequantize(W).T in Tensor ops, on x's device: the host's dequantized weight moved there. (The 'q8'
    activations' rounding is the CPU kernel's; composed, activations are multiplied as floats.)"""
    from .dtypes import float32
    from .tensor import Tensor
    w = Tensor._from_storage(dequantize_rows(np.asarray(raw), T.get(qtype)).reshape(shape), float32)  # (N, K)
    if str(x.device) != "cpu":
        w = w.to(x.device)
    return x.float() @ w.T


GRAD_SLAB_BYTES = 8 << 20  # float32 rows of W the qlinear backward dequantizes at a time


def qlinear_output(x, weight):
    from .dtypes import float32
    return (*x.shape[:-1], weight.shape[0]), float32


def qlinear_composed(x, weight):
    """x @ W.T through the whole dequantized weight (Tensor ops: autograd differentiates it)."""
    return qmatmul_composed(x, weight.data, weight.ggml_type, weight.shape)


def qlinear_backward(ctx, g):
    """dx = g @ W, W dequantized GRAD_SLAB_BYTES of rows at a time on g's device; W itself gets no gradient."""
    from .dtypes import float32
    from .tensor import Tensor
    w = ctx.attrs["weight"]
    n, k = w.shape
    step = max(1, GRAD_SLAB_BYTES // (4 * k))
    dx = None
    for s in range(0, n, step):
        e = min(n, s + step)
        rows = Tensor._from_storage(dequantize_rows(np.asarray(w.data[s:e]), w.ggml_type).reshape(e - s, k), float32)
        if str(g.device) != "cpu":
            rows = rows.to(g.device)
        part = g.float().narrow(-1, s, e - s) @ rows                             # (..., K)
        dx = part if dx is None else dx + part
    x = ctx.inputs[0]
    return dx if x.dtype is float32 else dx.to(x.dtype)


def qrows_composed(ids, raw, qtype, shape) -> np.ndarray:
    rows = raw[np.asarray(ids, np.int64).reshape(-1)]  # (n, row_bytes): a copy (also of SharedRows)
    return dequantize_rows(np.asarray(rows), qtype).reshape(-1, int(shape[1]))


def qmatmul_argmax_composed(x, raw, qtype, shape, activations="float32") -> int:
    y = qmatmul_composed(x if not isinstance(x, np.ndarray) else _as_tensor(x), raw, qtype, shape, activations)
    return int(np.argmax(y.numpy()))


def qmatmul_topk_composed(x, raw, qtype, shape, activations, k):
    y = qmatmul_composed(x if not isinstance(x, np.ndarray) else _as_tensor(x), raw, qtype, shape, activations)
    y = np.asarray(y.numpy(), np.float32).reshape(-1)
    return np.arange(y.size, dtype=np.int64), y


def _as_tensor(a):
    from .tensor import tensor
    return tensor(np.asarray(a, np.float32))


def _as_float_numpy(x, name):
    if isinstance(x, QTensor):
        return x.numpy()
    if hasattr(x, "_storage_numpy"):  # ember Tensor: numpy() upcasts bfloat16 bits to float32
        x = x.numpy()
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"ember: cannot quantize {name or 'tensor'} of dtype {a.dtype}: expected floats")
    return a
