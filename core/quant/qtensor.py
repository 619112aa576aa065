"""QTensor: a quantized tensor as GGML stores it — raw blocks, a GGML type and a logical shape."""
from __future__ import annotations

import numpy as np

from . import ggml_types as T
from .codec import check_raw, dequantize_rows, quantize
from . import q8dot, repack
from ..backends.cpu_matmul import NO_BLAS
from .qmatmul import FUSED_ROWS, qmatmul

PART_BYTES = 64 << 20  # the largest block array a device multiplies by at once (see QTensor.device_parts)


class QTensor:
    """Quantized weights (CPU, immutable).

        q = QTensor.quantize(w, "q4_k")   # w: ember Tensor or ndarray (..., n), n a multiple of the block
        q.ggml_type, q.shape, q.nbytes     # ember.quant.ggml_types.Q4_K, (out, in), bytes of blocks
        q.dequantize()                     # ember Tensor, float32
        q.matmul_t(x)                      # x @ W.T without building W in float32

    data is a uint8 array (rows, row_bytes): one row of blocks per row of the tensor (GGUF layout).

    activations: how matmul_t treats x on the CPU (and in the page). "float32" multiplies x as it is:
    x @ dequantize(W).T up to summation order. "q8" quantizes x to 8 bits per block as llama.cpp's CPU backend
    does for W's type and sums integer products (ember.quant.q8dot): llama.cpp's numbers at its speed. GPU
    backends multiply float activations either way.
    """

    __slots__ = ("data", "ggml_type", "shape", "name", "_activations", "_levels", "_l1", "_parts")

    def __init__(self, data, ggml_type, shape, name: str | None = None, activations: str = "float32"):
        self.ggml_type = T.get(ggml_type)
        self.shape = tuple(int(s) for s in shape)
        self.name = name
        self.data = check_raw(data, self.ggml_type, self.shape, self._what())
        self.activations = activations
        self._levels = None  # repack.Levels, built at the first native host matmul
        self._l1 = None  # the wasm argmax kernel's per-row bounds, built at its first use
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
        if mode == "q8" and not (q8dot.supports(self.ggml_type) and len(self.shape) == 2):
            raise ValueError(f"ember: {self._what()}: llama.cpp's 8-bit activations need a 2-d weight of "
                             f"{', '.join(q8dot.ACTIVATIONS)}, not {self.ggml_type.name} {self.shape}")
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
        return dequantize_rows(self.data, self.ggml_type).reshape(self.shape)

    def dequantize(self):
        """An ember Tensor (float32, CPU) with the dequantized values."""
        from ..dtypes import float32
        from ..tensor import Tensor
        return Tensor._from_storage(self.numpy(), float32)

    def matmul_t(self, x):
        """x @ self.T for a 2-d quantized weight (out, in): x (..., in) -> (..., out), float32.
        x is an ndarray (returns an ndarray) or an ember Tensor (returns a Tensor on x's device): through
        the device's fused `qmatmul` primitive where it has one, otherwise composed on the host (no
        gradient either way: QLinear differentiates through the dequantized weight)."""
        if isinstance(x, np.ndarray):
            return self._host_matmul(x)
        if getattr(x.device.backend, "qmatmul", None) is not None:
            if len(self.shape) != 2:
                raise ValueError(f"ember: quantized matmul needs a 2-d weight, {self._what()} has shape {self.shape}")
            from ..autograd import prim_fused
            parts = self.device_parts()
            if len(parts) == 1:
                return prim_fused("qmatmul", x, self.data, self.ggml_type, self.shape)  # (..., out) float32
            from ..ops_movement import cat
            return cat([prim_fused("qmatmul", x, p.data, p.ggml_type, p.shape) for p in parts], -1)
        return self._matmul_t_host(x)

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

    def argmax_matmul_t(self, x) -> int:
        """int(np.argmax(self.matmul_t(x))) for one row x (in,) or (1, ..., in): greedy decoding's pick from a
        tied output. Under Pyodide a Q8_0 weight with float32 activations is bounded row by row in integers and
        only the rows that can win are computed (cpu_kernels/quant.c ember_q8_0_argmax): the same index, a third
        of the work. Elsewhere, and with 8-bit activations (whose full product costs what the bound pass does),
        every row is computed."""
        bounded = self._bounded_row(x)
        if bounded is not None:
            kernels, row = bounded
            arg, _ = kernels.q8_0_argmax(self.data, self._l1, row)
            if arg >= 0:
                return arg
        y = self.matmul_t(x)
        return int(np.argmax(y if isinstance(y, np.ndarray) else y.numpy()))

    def topk_matmul_t(self, x, k: int):
        """(ids, values) for one row x (in,) or (1, ..., in): ids (ascending int64) of rows of self.matmul_t(x)
        that include every row among its k largest (ties with the k-th too), values those rows' float32
        entries of it: sampling's top-k from a tied output. Under Pyodide a Q8_0 weight is bounded in integers
        and only the rows that can reach the k-th largest are computed (quant.c ember_q8_0_rows_above);
        elsewhere every row is (ids = all of them)."""
        bounded = self._bounded_row(x) if 0 < k <= self.shape[0] else None
        if bounded is not None:
            kernels, row = bounded
            got = kernels.q8_0_topk(self.data, self._l1, row, k)
            if got is not None:
                return got
        y = self.matmul_t(x)
        y = np.asarray(y if isinstance(y, np.ndarray) else y.numpy(), np.float32).reshape(-1)
        return np.arange(y.size, dtype=np.int64), y

    def _bounded_row(self, x):
        """(the wasm kernels, x as one float32 row) where the bounded Q8_0 output kernels apply (Pyodide, a 2-d
        Q8_0 weight, one row of x on the host), with the weight's per-row bounds made at the first use; else None."""
        n_in = self.shape[-1]
        if not (NO_BLAS and self.activations == "float32" and len(self.shape) == 2 and self.ggml_type.name == "Q8_0"
                and int(np.prod(x.shape)) == n_in and (isinstance(x, np.ndarray) or str(x.device) == "cpu")):
            return None
        from ..backends.cpu_matmul import wasm_kernels
        kernels = wasm_kernels()
        if kernels is None:
            return None
        if self._l1 is None:
            self._l1 = kernels.q8_0_l1(self.data, n_in)
        return kernels, np.asarray(x if isinstance(x, np.ndarray) else x.numpy(), np.float32).reshape(n_in)

    def _matmul_t_host(self, x):
        """The composed fallback: x to the host, slab-wise dequantize + BLAS (ember.quant.qmatmul), back."""
        from ..dtypes import float32
        from ..tensor import Tensor
        out = Tensor._from_storage(self._host_matmul(x.numpy()), float32)
        return out if str(x.device) == "cpu" else out.to(x.device)

    def _host_matmul(self, x: np.ndarray) -> np.ndarray:
        if self.activations == "q8":
            return q8dot.q8_matmul(x, self.data, self.ggml_type, self.shape, name=self._what(), checked=True)
        y = self._wasm_fused(x) if NO_BLAS else None
        if y is None:
            y = qmatmul(x, self.data, self.ggml_type, self.shape, name=self._what(), levels=self._host_levels())
        return y

    def _wasm_fused(self, x: np.ndarray):
        """qmatmul's in-register wasm product for a few rows of x (decode) without its checks of the blocks,
        which the constructor made: a decode step makes 7 of these calls per layer, and the checks were a
        third of each small one's Python cost. None where qmatmul's own path applies."""
        if len(self.shape) != 2 or x.shape[-1:] != self.shape[1:]:
            return None
        from ..backends.cpu_matmul import wasm_kernels
        kernels = wasm_kernels()
        x2 = x.reshape(-1, self.shape[1])
        if kernels is None or self.ggml_type.id not in kernels.qmatmul_types or x2.shape[0] > FUSED_ROWS:
            return None
        if x2.dtype != np.float32 or not x2.flags.c_contiguous:
            x2 = np.ascontiguousarray(x2, np.float32)
        return kernels.qmatmul(x2, self.data, self.ggml_type.id, self.shape[0]).reshape(*x.shape[:-1], self.shape[0])

    def _host_levels(self):
        """The weight as int8 levels + scales (repack.py) for numpy + BLAS, made once; None under Pyodide, whose
        wasm kernels read the blocks themselves, and for types or shapes without a repack."""
        if self._levels is None and not NO_BLAS and len(self.shape) == 2 and repack.supports(self.ggml_type):
            self._levels = repack.repack(self.data, self.ggml_type)
        return self._levels

    def __repr__(self):
        name = f", name={self.name!r}" if self.name else ""
        return f"QTensor(shape={self.shape}, ggml_type={self.ggml_type.name}, nbytes={self.nbytes}{name})"


def _as_float_numpy(x, name):
    if isinstance(x, QTensor):
        return x.numpy()
    if hasattr(x, "_storage_numpy"):  # ember Tensor: numpy() upcasts bfloat16 bits to float32
        x = x.numpy()
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise TypeError(f"ember: cannot quantize {name or 'tensor'} of dtype {a.dtype}: expected floats")
    return a
