"""The CUDA backend: ember's primitives on NVIDIA GPUs through CuPy (`pip install ember[cuda]`).

Everything numpy-shaped runs through the reference ArrayModuleBackend with `xp = cupy` (cuBLAS for matmul,
CuPy's memory pool for allocations); the heavy composites run as fused CUDA kernels from
core/backends/cuda/*.cu: softmax, log_softmax, layer_norm, rms_norm, a flash-style attention, rotary
embeddings and quantized matmul over GGML blocks (Q4_0, Q8_0, Q4_K, Q6_K; the block layout comes with the
call, as a GGML type descriptor, so this layer does not import ember.quant).

The kernels' Python side (argument layout, launch geometry, fallbacks) is cuda_fused.py, the registry's cuda
column (ember.kernels). `FusedKernels` is the array-module backend with the one method those kernels launch
through, so CPU tests run them over numpy with the kernels emulated; `CudaBackend` binds it to CuPy, one GPU
(`cuda:N`) and a stream per device, which every primitive and kernel runs in.

Module API (re-exported as ember.cuda): allow_tf32, is_available(), device_count(), synchronize(),
memory_stats(), empty_cache().
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..device import DeviceError
from ..primitives import PRIMITIVES
from . import cuda_kernels as K
from .array_module_backend import _BF16, ArrayModuleBackend

try:  # CuPy is optional: without it the device reports itself unavailable, nothing else breaks
    import cupy
    _CUPY_ERROR = None
except Exception as e:  # ImportError, or a CuPy build whose CUDA libraries fail to load
    cupy, _CUPY_ERROR = None, e

allow_tf32 = False  # float32 matmuls may use TF32 tensor cores (10-bit mantissa) only when set True

# cuBLAS enums (cudaDataType CUDA_R_16BF, cublasComputeType_t CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) and the
# host scalars alpha = 1, beta = 0 (the handle's default pointer mode reads them at the call)
_R_16BF, _COMPUTE_32F, _GEMM_DEFAULT = 14, 68, -1
_ONE, _ZERO = np.ones(1, np.float32), np.zeros(1, np.float32)



def _i32(v):
    return np.int32(v)


def _i64(v):
    return np.int64(v)


class FusedKernels(ArrayModuleBackend):
    """ArrayModuleBackend plus the launch hook cuda_fused.py's kernels run through: `_launch(file, kernel, grid,
    block, args)`; the registry's cuda column runs here whatever the device's name (kernel_set)."""

    kernel_set = "cuda"

    def _launch(self, src, kernel, grid, block, args):
        raise NotImplementedError

    # -- ember.custom_op kernels ----------------------------------------------------------------------
    def custom_kernel(self, kernel, inputs, out_shape, out_dtype, attrs):
        """An ember.CUDA descriptor's kernel: (out, in0, ..., long long n, *params), inputs contiguous (None as
        a one-element dummy), ints passed as int and floats as float; default grid one thread per element."""
        xp = self.xp
        inputs = [None if a is None else xp.ascontiguousarray(a) for a in inputs]
        params = list(kernel.params(*inputs, **attrs)) if kernel.params is not None else []
        grid = kernel.grid(out_shape, *inputs, **attrs) if kernel.grid is not None else None
        arrays = [xp.zeros(1, xp.float32) if a is None else a for a in inputs]
        out = xp.empty(tuple(out_shape), dtype=np.uint16 if out_dtype.name == "bfloat16" else out_dtype.np)
        n = out.size
        if n:
            scalars = [np.float32(v) if isinstance(v, float) else _i32(v) for v in params]
            blocks = tuple(grid) if grid is not None else (math.ceil(n / kernel.block),)
            self._launch_source(kernel, blocks, (kernel.block,), (out, *arrays, _i64(n), *scalars))
        return out

    def _launch_source(self, kernel, grid, block, args):
        raise NotImplementedError


# ================================================================================ CuPy binding

def _on_device(f):
    @functools.wraps(f)
    def run(self, *args):
        with self._device, self._stream:  # cuda:N's context and its stream, for every op
            return f(self, *args)
    return run


class CudaBackend(FusedKernels):
    name = "cuda"

    def __init__(self, index=0):
        where = "cuda" if index == 0 else f"cuda:{index}"
        if cupy is None:
            raise DeviceError(f"ember: device '{where}' is not available: CuPy is not installed ({_CUPY_ERROR}); "
                              "install ember[cuda] (pip install cupy-cuda12x)")
        n = device_count()
        if n == 0:
            raise DeviceError(f"ember: device '{where}' is not available: no CUDA GPU found ({_count_error()})")
        if not 0 <= index < n:
            raise DeviceError(f"ember: device '{where}' is not available: this machine has {n} CUDA GPU(s) "
                              f"(cuda:0 .. cuda:{n - 1})")
        super().__init__(cupy, index)
        self._device = cupy.cuda.Device(index)
        with self._device:
            self._stream = cupy.cuda.Stream(non_blocking=True)
            probe = cupy.empty(0, cupy.uint16)
        if probe.dtype is not np.dtype(np.uint16) or type(probe) is not cupy.ndarray:  # what the reference's `is` tests assume
            raise DeviceError(f"ember: this CuPy ({cupy.__version__}) gives arrays of {type(probe).__name__} with "
                              "non-singleton dtypes, which ember's cuda backend does not support")
        self._tf32 = None  # compute type last set for float32 GEMMs

    def __repr__(self):
        return f"CudaBackend(cuda:{self.index})"

    def _launch(self, src, kernel, grid, block, args):
        K.function(cupy, self.index, src, kernel)(grid, block, args)

    def _launch_source(self, kernel, grid, block, args):
        from ..errors import CustomOpError
        try:
            fn = K.custom_function(cupy, self.index, kernel.source(), kernel.name)
        except Exception as e:  # NVRTC's compile log, or a kernel name the source does not define
            raise CustomOpError(f"ember: custom op {kernel.op!r} (cuda): kernel {kernel.name!r} failed to "
                                f"compile: {e}") from e
        fn(grid, block, args)

    # -- hooks ----------------------------------------------------------------------------------------
    def _erf(self, x):
        from cupyx.scipy.special import erf
        return erf(x.astype(cupy.float32)).astype(x.dtype) if x.dtype == np.float16 else erf(x)

    def _host(self, x):
        return x.get(stream=self._stream)  # blocking copy ordered after this device's queued work

    def synchronize(self):
        self._stream.synchronize()

    # -- cuBLAS ---------------------------------------------------------------------------------------
    def _gemm_mode(self):
        """(Re)apply the user's TF32 choice before float32 GEMMs."""
        if self._tf32 is not allow_tf32:
            from cupy._core import _routines_linalg as blas
            blas.set_compute_type(cupy.float32, blas.COMPUTE_TYPE_TF32 if allow_tf32 else blas.COMPUTE_TYPE_FP32)
            blas.set_compute_type(cupy.float16, blas.COMPUTE_TYPE_FP32)  # f16 in, f32 accumulate, as torch
            self._tf32 = allow_tf32

    def _mm(self, a, b, out=None):
        self._gemm_mode()
        return cupy.matmul(a, b, out=out)

    def matmul(self, a, b):
        self._gemm_mode()
        if a.dtype == np.float16:
            return cupy.matmul(a, b)  # tensor cores, float32 accumulation (compute type above)
        if a.dtype is _BF16:
            out = self._bf16_gemm(a, b)
            if out is not None:
                return out
        return ArrayModuleBackend.matmul(self, a, b)  # float32 direct; bfloat16 through float32

    def _bf16_gemm(self, a, b):
        """bfloat16 a @ b (uint16 storage) as one cublasGemmStridedBatchedEx: bfloat16 tensor cores, float32
        sums, rounded once to bfloat16 (what the float32 route gives, without widening both operands: it ran at
        4-8 TFLOP/s on an H200 where float16 ran at 40-66). a (..., M, K) with b (K, N), or a batch of b
        matching a's; b's rows contiguous or b a transposed view (x @ w.T). None for other layouts."""
        if a.ndim < 2 or b.ndim < 2 or b.shape[-2] != a.shape[-1]:
            return None
        (M, K), N = a.shape[-2:], b.shape[-1]
        if b.ndim == 2:
            batch, count = a.shape[:-2], 1
            rows = math.prod(batch) * M  # a's batch folds into its rows
        elif b.shape[:-2] == a.shape[:-2]:
            batch, count, rows = a.shape[:-2], math.prod(a.shape[:-2]), M
        else:
            return None  # a broadcast batch: the float32 route
        if b.flags.c_contiguous:
            op_b, ld_b = 0, N          # column-major view of b is b^T (N x K): as is
        elif b.swapaxes(-1, -2).flags.c_contiguous:
            op_b, ld_b = 1, K          # a transposed view: its memory is b^T row-major, b column-major
        else:
            b, op_b, ld_b = cupy.ascontiguousarray(b), 0, N
        a = cupy.ascontiguousarray(a)
        out = cupy.empty(batch + (M, N), dtype=np.uint16)
        if out.size == 0 or K == 0:  # (cuBLAS is not asked for empty products)
            out.fill(0)
            return out
        # row-major C = A B is column-major C^T = B^T A^T: cuBLAS's first operand is b, its second a
        cublas = cupy.cuda.cublas
        cublas.gemmStridedBatchedEx(
            cupy.cuda.device.get_cublas_handle(), op_b, 0, N, rows, K, _ONE.ctypes.data,
            b.data.ptr, _R_16BF, ld_b, K * N, a.data.ptr, _R_16BF, K, rows * K,
            _ZERO.ctypes.data, out.data.ptr, _R_16BF, N, rows * N, count, _COMPUTE_32F, _GEMM_DEFAULT)
        return out

    def kernel_call(self, fn):
        """A registry kernel bound to this device: run in cuda:N's context and on its stream, as the primitives."""
        @functools.wraps(fn)
        def run(*args, **attrs):
            with self._device, self._stream:
                return fn(self, *args, **attrs)
        return run


# every declared primitive and meta method runs in the device's context and on its stream (the registry's kernels
# through kernel_call): from the declared names, so a primitive added to the contract cannot run outside it
for _name in PRIMITIVES + ("custom_kernel",):
    setattr(CudaBackend, _name, _on_device(getattr(CudaBackend, _name)))


# ================================================================================ module API

def _count_error():
    try:
        cupy.cuda.runtime.getDeviceCount()
        return "0 devices"
    except Exception as e:  # no driver, driver too old, no device: CuPy raises CUDARuntimeError
        return str(e)


def device_count() -> int:
    """Number of CUDA GPUs CuPy can use (0 without CuPy, a driver or a GPU; never raises)."""
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def is_available() -> bool:
    return device_count() > 0


def _backends():
    from ..device import loaded_backends
    return loaded_backends("cuda")


def synchronize(device=None) -> None:
    """Wait for the queued work of one CUDA device (an index, 'cuda:N' or ember.device) or of all."""
    if device is None:
        for be in _backends():
            be.synchronize()
        return
    from ..device import device as _device
    d = _device(f"cuda:{device}" if isinstance(device, int) else device)
    if d.type != "cuda":
        raise DeviceError(f"ember: cuda.synchronize() got a {d.type} device")
    d.backend.synchronize()


def memory_stats() -> dict:
    """CuPy memory pool: bytes in use by arrays and bytes held by the pool (all devices)."""
    if cupy is None:
        return {"used_bytes": 0, "pool_bytes": 0}
    pool = cupy.get_default_memory_pool()
    return {"used_bytes": int(pool.used_bytes()), "pool_bytes": int(pool.total_bytes())}


def empty_cache() -> None:
    """Return the pool's unused blocks to the driver (as torch.cuda.empty_cache)."""
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
