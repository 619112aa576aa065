"""The CPU backend's compiled kernels outside the browser: cpu_kernels/q8dot.c (quantized matmul with 8-bit
activations, as llama.cpp computes it), decode.c (a decoded token through a stack of transformer layers) and
threads.c, built for this machine by its C compiler at first use.

Like the CUDA backend's kernels (NVRTC at run time) and tinygrad's CPU backend, nothing is compiled at install:
the first quantized matmul runs `cc -O3 -march=native` on the shipped sources (a compiler per CPU: ~17 s on two
cores) into the cache folder, `<cache>/kernels/cpu-<hash>.so`, keyed by the sources, the flags, the compiler and
this CPU; later processes load it. The same sources are in the page's wasm module (cpu_wasm_kernels.py), and every
target gives the same bits.

`load()` says whether they can be used here and why not: under Pyodide (the wasm module serves), switched off
with EMBER_NATIVE_KERNELS=0, no C compiler ($CC, cc, gcc or clang), or a build or load that failed (its error).
Where they cannot, ember.quant computes the same numbers with numpy (slower).

Threads: a quantized matmul, each matvec and attention of a decoded token (decode.c, decode_xattn.c), the LM
head's float32 matvec and the float kernels (conv.c, attention.c, rows.c), of at least PARALLEL_MACS multiply-adds,
split their output rows between the caller and workers (parallel.h, threads.c), the same bits on any number of
threads. EMBER_NUM_THREADS sets how many (default: the CPUs this process may run on, at most 8);
`ember info` prints the count in use. numpy's OpenBLAS runs its jobs on the same threads (cpu_blas_pool.py).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import settings
from . import cpu_blas_pool
from ..errors import EmberError, SettingError
from ..paths import cache_dir

SOURCES = Path(__file__).with_name("cpu_kernels")
FILES = ("q8dot.c", "decode.c", "threads.c", "conv.c", "conv_winograd.c", "attention.c", "rows.c", "decode_xattn.c",
         "nbits.c", "recurrent.c", "matvec_f16.c", "gemm_native.c", "image.c", "maps.c", "argmax_f32.c")  # (+ HEADERS)
HEADERS = ("simd.h", "half.h", "parallel.h", "fvec.h", "fvec_math.h", "matvec_f32.h", "conv.h")
# -ffp-contract=off: no multiply-add fused into an FMA, so the float steps round as the wasm build's do
FLAGS = ["-O3", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", "-fvisibility=hidden", "-std=c11"]
NATIVE = ["-march=native"]  # this CPU's SIMD (AVX2, ...); a compiler that refuses it builds the portable paths
PARALLEL_MACS = 1 << 18  # parallel.h's PARALLEL_MIN_WORK: below it a job stays on the calling thread
MAX_DEFAULT_THREADS = 8
_P = ctypes.c_void_p
_I = ctypes.c_int


class NativeKernels:
    """The loaded library: q8_matmul (x quantized per block as llama.cpp does, integer dot products) and the
    decode step, their rows split between threads for large products."""

    def __init__(self, lib: ctypes.CDLL, path: Path):
        self.path, self.lib = path, lib
        lib.ember_q8_act_bytes.argtypes, lib.ember_q8_act_bytes.restype = [_I, _I, _I], ctypes.c_long
        lib.ember_q8_simd.argtypes, lib.ember_q8_simd.restype = [], ctypes.c_char_p
        lib.ember_q8_quantize.argtypes = [_I, _I, _I, _P, _I, _P]
        lib.ember_q8_dot.argtypes = [_I, _I, _I, _I, _P, _P, _P, _I]
        lib.ember_q8_matmul.argtypes = [_I, _I, _I, _I, _P, _P, _I, _P, _I, _P]
        lib.ember_threads.argtypes = [_I]
        lib.ember_decode.argtypes = [_P, _P, _P, _P, _P]
        lib.ember_matvec_f32.argtypes = [_P, ctypes.c_long, _I, _I, _P, _P]
        lib.ember_matvec_f16.argtypes = [_P, ctypes.c_long, _I, _I, _P, _P]
        lib.ember_f16_screen_copy.argtypes = [_P, _I, _I, _P, _P]
        lib.ember_f16_exact_copy.argtypes = [_P, ctypes.c_long, _P]
        lib.ember_matvec_f32_argmax.argtypes = [_P, ctypes.c_long, _P, ctypes.c_long, _P, _I, _I, _P, _P, _I, _P]
        lib.ember_matvec_f32_blocked.argtypes = [_P, _I, _I, _P, _P]
        lib.ember_copy_spans.argtypes = [_P, _P, _P, _I]
        lib.ember_transpose_f32.argtypes = [_P, _I, ctypes.c_long, ctypes.c_long, _P]
        lib.ember_sgemm_native.argtypes = [_I, _I, _I, _P, ctypes.c_long, _P, ctypes.c_long, _P, _P, _P, ctypes.c_long,
                                           _I]
        lib.ember_sgemm_native_rows.argtypes = [_I, _I, _I, _P, ctypes.c_long, _P, _P, _P, ctypes.c_long, _I]
        lib.ember_sgemm_native_width.argtypes = []
        lib.ember_decode_scratch_bytes.argtypes, lib.ember_decode_scratch_bytes.restype = [_P, _I], ctypes.c_long
        lib.ember_nbits_supports.argtypes = [_I, _I]
        lib.ember_nbits_matmul.argtypes = [_I, _I, _I, _I, _I, _I, _P, ctypes.c_long, _P, _P, _P, _P, _P, _I]
        lib.ember_nbits_matmul_units.argtypes = [_I, _I, _I, _I, _P, _P, _P, _P, _I]
        lib.ember_nbits_units_bytes.argtypes = [_I, _I, _I]
        lib.ember_nbits_units_bytes.restype = ctypes.c_long
        self._lib = lib
        self.simd = lib.ember_q8_simd().decode()
        self.sgemm_width = lib.ember_sgemm_native_width()  # 0: no float GEMM kernel in this build (BLAS keeps it)
        self.threads = lib.ember_threads(default_threads())
        self._act = np.empty(1 << 16, np.uint8)  # the activations' blocks, grown on demand
        self._act_lock = threading.Lock()

    def set_threads(self, n: int) -> int:
        """Use n threads, 1..MAX_THREADS (workers are started, never stopped); returns the count in use."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_THREADS:
            raise EmberError(f"ember: threads must be a whole number from 1 to {MAX_THREADS}, got {n!r}")
        self.threads = self._lib.ember_threads(int(n))
        return self.threads

    def nbits_supports(self, bits: int, block: int) -> bool:
        return bool(self._lib.ember_nbits_supports(bits, block))

    def nbits_matmul(self, x, packed, scales, zeros, bits, block, n):
        """nbits.c: x (m <= 8, blocks * block) float32 C-contiguous (zeros past K) @ W.T -> (m, n) float32, W in
        onnxruntime's MatMulNBits layout (ember.ggml.nbits)."""
        m, blocks = x.shape[0], scales.shape[1]
        y = np.empty((m, n), np.float32)
        xsum = np.empty(m * blocks * (block + 1), np.float32)  # (the split rows and per-block sums)
        if self._lib.ember_nbits_matmul(bits, block, m, 0, n, blocks, packed.ctypes.data, packed.shape[1],
                                        scales.ctypes.data, zeros.ctypes.data, x.ctypes.data, xsum.ctypes.data,
                                        y.ctypes.data, n) != 0:
            raise ValueError(f"ember: nbits.c takes no {bits}-bit blocks of {block} for {m} rows")
        return y

    def nbits_units_bytes(self, n: int, blocks: int, block: int) -> int:
        return self._lib.ember_nbits_units_bytes(n, blocks, block)

    def nbits_matmul_units(self, x, units, blocks, block, n):
        """nbits_matmul's y (the same bits) for a 4-bit W of n rows as units of four rows (cpu_nbits.units_of)."""
        m = x.shape[0]
        y = np.empty((m, n), np.float32)
        xsum = np.empty(m * blocks * (block + 1), np.float32)
        if self._lib.ember_nbits_matmul_units(block, m, n, blocks, units.ctypes.data, x.ctypes.data, xsum.ctypes.data,
                                              y.ctypes.data, n) != 0:
            raise ValueError(f"ember: nbits.c takes no 4-bit blocks of {block} as units for {m} rows")
        return y

    def decode(self, plan: np.ndarray, fparams: np.ndarray, x: np.ndarray, rope: np.ndarray, scratch: np.ndarray) -> int:
        """decode.c's ember_decode: x (dim,) float32 through the layers of `plan` (cpu_decode.py), in place."""
        return self._lib.ember_decode(plan.ctypes.data, fparams.ctypes.data, x.ctypes.data, rope.ctypes.data,
                                      scratch.ctypes.data)

    def cat(self, xs: list, axis: int) -> np.ndarray:
        """np.concatenate(xs, axis) for C-contiguous arrays of one dtype whose dims before `axis` are all 1 (each one
        block of the output): maps.c's copy, split between the threads."""
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = np.empty(shape, xs[0].dtype)
        srcs = np.array([x.ctypes.data for x in xs], np.uintp)
        sizes = np.array([x.nbytes for x in xs], np.int64)
        self._lib.ember_copy_spans(out.ctypes.data, srcs.ctypes.data, sizes.ctypes.data, len(xs))
        return out

    def transpose_f32(self, w: np.ndarray) -> np.ndarray:
        """w.T as a C-contiguous float32 array, for w (rows, cols) little-endian float32 or float16 C-contiguous (the
        halves widened exactly): maps.c's blocked copy, split between the threads."""
        out = np.empty(w.shape[::-1], np.float32)
        self._lib.ember_transpose_f32(w.ctypes.data, int(w.dtype.itemsize == 2), w.shape[0], w.shape[1], out.ctypes.data)
        return out

    def matvec_f32(self, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        """x (k,) float32 @ wt (k, n) float32 C-contiguous -> (n,) float32, k a multiple of 8 (decode.c's
        ember_matvec_f32: inputs summed in order, a multiply then an add each; threads by blocks of outputs)."""
        return self._matvec(self._lib.ember_matvec_f32, x, wt)

    def matvec_f32_blocked(self, x: np.ndarray, wb: np.ndarray, n: int) -> np.ndarray:
        """matvec_f32's product (the same bits) from the weight's blocked copy wb (cpu_matmul.blocked: (ceil(n /
        16), k, 16) C-contiguous): x (k,) -> (n,) float32."""
        k = wb.shape[1]
        x = np.ascontiguousarray(x, np.float32)
        y = np.empty(n, np.float32)
        if self._lib.ember_matvec_f32_blocked(wb.ctypes.data, n, k, x.ctypes.data, y.ctypes.data) != 0:
            raise ValueError(f"ember: native matvec: {k} inputs, not a multiple of 8")
        return y

    def matvec_f16(self, x: np.ndarray, wt: np.ndarray) -> np.ndarray:
        """matvec_f32 for wt (k, n) float16 C-contiguous: the bits matvec_f32 gives on wt as float32, from half
        the bytes (matvec_f16.c)."""
        return self._matvec(self._lib.ember_matvec_f16, x, wt)

    def f16_exact_copy(self, w: np.ndarray) -> np.ndarray | None:
        """w (float32, C-contiguous) as float16 of its shape where every value is exactly a half, else None
        (matvec_f16.c)."""
        h = np.empty(w.shape, np.float16)
        return h if self._lib.ember_f16_exact_copy(w.ctypes.data, w.size, h.ctypes.data) == 0 else None

    def f16_screen_copy(self, wt: np.ndarray, halves: np.ndarray | None) -> np.ndarray | None:
        """wt (k, n) float32 C-contiguous rounded to float16 into halves (k, n) (nearest even; None: not kept), and
        each output's norm of them rounded up ((n,) float32, returned): matvec_f32_argmax's screen; None where a value
        of wt is not finite or past the halves' range."""
        k, n = wt.shape
        norms = np.empty(n, np.float32)
        at = None if halves is None else halves.ctypes.data
        if self._lib.ember_f16_screen_copy(wt.ctypes.data, k, n, at, norms.ctypes.data) != 0:
            return None
        return norms

    def matvec_f32_argmax(self, x: np.ndarray, wt: np.ndarray, halves: np.ndarray, norms: np.ndarray,
                          max_exact: int) -> int:
        """argmax(matvec_f32(x, wt)) (the first of equal largest) from a screen over halves (wt rounded to float16,
        the same layout; norms: each output's norm of them, rounded up) and the outputs that can be the largest
        computed from wt (argmax_f32.c), or < 0 where the screen decides nothing (x too large or not finite, more
        than max_exact such outputs): the caller then computes them all."""
        k, n = wt.shape
        x = np.ascontiguousarray(x, np.float32)
        scratch = np.empty(2 * n, np.float32)
        exact = ctypes.c_int(0)
        return self._lib.ember_matvec_f32_argmax(wt.ctypes.data, wt.strides[0] // 4, halves.ctypes.data,
                                                 halves.strides[0] // 2, norms.ctypes.data, n, k, x.ctypes.data,
                                                 scratch.ctypes.data, max_exact, ctypes.byref(exact))

    def sgemm(self, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None,
              blocked: np.ndarray | None = None, act: int = 0, row_bias: np.ndarray | None = None,
              out: np.ndarray | None = None) -> np.ndarray:
        """a (m, k) @ b (k, n) (+ bias (n,) C-contiguous, added to each row after its sum) -> (m, n) float32
        C-contiguous (gemm_native.c, threads by panels of columns; into `out` where given, C-contiguous): float32
        operands of unit column stride and whole-float row strides, as they lie; or b read from `blocked`, its
        blocked copy (cpu_matmul.blocked: the same bits); then act(c) (cpu_float_kernels.ACTS' id: rows.c's
        bias_act's bits), or with row_bias (m,) act(c + row_bias) a row at a time (conv.c's epilogue: a 1x1
        convolution's bits). Only where sgemm_width > 0."""
        (m, k), n = a.shape, b.shape[1]
        c = np.empty((m, n), np.float32) if out is None else out
        if blocked is not None and (blocked.shape != (-(-n // 16), k, 16) or not blocked.flags.c_contiguous):
            raise ValueError(f"ember: gemm_native.c: a blocked copy of shape {blocked.shape} for a ({k}, {n}) weight")
        bp, rsb = (b.ctypes.data, b.strides[0] // 4) if blocked is None else (blocked.ctypes.data, 0)
        if self._lib.ember_sgemm_native(m, n, k, a.ctypes.data, a.strides[0] // 4, bp, rsb,
                                        None if bias is None else bias.ctypes.data,
                                        None if row_bias is None else row_bias.ctypes.data, c.ctypes.data, n,
                                        act) != 0:
            raise ValueError(f"ember: gemm_native.c refused a ({m}, {k}) x ({k}, {n}) product")
        return c

    def sgemm_rows(self, a: np.ndarray, parts, row_bias: np.ndarray | None, act: int, out: np.ndarray) -> np.ndarray:
        """a (m, k) @ the concatenation of parts' rows (each (k_i, n), unit column stride, whole-float row strides;
        k = sum k_i) -> out (m, n) C-contiguous, act(c + row_bias) a row at a time (gemm_native.c, reading each
        part where it lies: the bits of sgemm on their concatenation). Only where sgemm_width > 0."""
        m, k = a.shape
        n = out.shape[1]
        rows = np.concatenate([p.ctypes.data + np.arange(p.shape[0], dtype=np.intp) * p.strides[0] for p in parts])
        if rows.size != k or self._lib.ember_sgemm_native_rows(
                m, n, k, a.ctypes.data, a.strides[0] // 4, rows.ctypes.data,
                None if row_bias is None else row_bias.ctypes.data, out.ctypes.data, n, act) != 0:
            raise ValueError(f"ember: gemm_native.c refused a ({m}, {k}) x ({rows.size}, {n}) product")
        return out

    @staticmethod
    def _matvec(fn, x, wt):
        k, n = wt.shape
        x = np.ascontiguousarray(x, np.float32)
        y = np.empty(n, np.float32)
        if fn(wt.ctypes.data, n, n, k, x.ctypes.data, y.ctypes.data) != 0:
            raise ValueError(f"ember: native matvec: {k} inputs, not a multiple of 8")
        return y

    def decode_scratch_bytes(self, plan: np.ndarray, max_length: int) -> int:
        return self._lib.ember_decode_scratch_bytes(plan.ctypes.data, max_length)

    def act_bytes(self, type_id: int, m: int, k: int) -> int:
        return self._lib.ember_q8_act_bytes(type_id, m, k)

    def q8_matmul(self, x: np.ndarray, w: np.ndarray, type_id: int, out_features: int) -> np.ndarray:
        """x (m, k) float32 C-contiguous @ W.T -> (m, out_features) float32, W as uint8 GGML rows (out_features,
        row_bytes) C-contiguous, x quantized as llama.cpp quantizes it for W's type (ember.backends.cpu_q8dot)."""
        m, k = x.shape
        y = np.empty((m, out_features), np.float32)
        size = self._lib.ember_q8_act_bytes(type_id, m, k)
        if size < 0:
            raise ValueError(f"ember: native q8 matmul: no kernel for GGML type {type_id} with rows of {k}")
        if m == 0 or out_features == 0:
            return y
        own = self._act_lock.acquire(blocking=False)
        act = self._act if own and self._act.size >= size else np.empty(size, np.uint8)
        if own and act is not self._act and size <= 1 << 26:
            self._act = act  # keep the grown buffer (up to 64 MiB) for the next calls
        try:  # (threads.c runs one parallel job at a time: a second caller's runs on its own thread)
            self._lib.ember_q8_matmul(type_id, m, out_features, k, w.ctypes.data, x.ctypes.data, k, y.ctypes.data,
                                      out_features, act.ctypes.data)
        finally:
            if own:
                self._act_lock.release()
        return y


MAX_THREADS = 64  # parallel.h's PARALLEL_MAX_THREADS


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads() -> int:
    """EMBER_NUM_THREADS, else the CPUs this process may run on, at most MAX_DEFAULT_THREADS."""
    if settings.get("EMBER_NUM_THREADS") is not None:  # 1..MAX_THREADS, else SettingError naming it
        return settings.get("EMBER_NUM_THREADS")
    return max(1, min(_cpus(), MAX_DEFAULT_THREADS))


def compiler() -> str | None:
    """The C compiler to build with: $CC, else cc, gcc or clang on PATH; None when there is none."""
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cpu_identity() -> str:
    """What -march=native depends on: a library built for one CPU may not run on another sharing the cache."""
    ident = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            ident += sorted({line.strip() for line in f if line.startswith(("model name", "flags", "Features"))})
    except OSError:
        pass
    return "\n".join(ident)


def _library_path(cc: str) -> Path:
    h = hashlib.sha256()
    for name in FILES + HEADERS:
        h.update(name.encode() + b"\0" + (SOURCES / name).read_bytes())
    h.update(" ".join(FLAGS + NATIVE).encode())
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    h.update(version.encode() + _cpu_identity().encode())
    return cache_dir("kernels", f"cpu-{h.hexdigest()[:20]}.so")


def _failure(cmd: list, proc) -> str:
    return f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-2000:]}"


def _compile_all(cc: str, flags: list, objects: Path) -> str | None:
    """Each source into its own object file in `objects`, as many compilers at once as this process has CPUs (the
    sources take 1 to 13 s each: one after the other ~32 s, ~17 s on two cores); None, or the first failure's
    stderr."""
    def one(name):
        cmd = [cc, *flags, "-c", "-o", str(objects / (name + ".o")), str(SOURCES / name)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return None if proc.returncode == 0 else _failure(cmd, proc)
    # the largest sources first, roughly the slowest, so that no core is left with a long one at the end
    names = sorted(FILES, key=lambda f: -(SOURCES / f).stat().st_size)
    with ThreadPoolExecutor(min(len(names), _cpus())) as ex:
        return next(filter(None, ex.map(one, names)), None)


def build(cc: str, out: Path, extra_flags=NATIVE) -> Path:
    """Compile the kernels with `cc` into `out` (written to a temporary name, then renamed: processes that build
    at once each get a whole file); without extra_flags when the compiler refuses them."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.stem + "-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        with tempfile.TemporaryDirectory(prefix="ember-objects-") as objects:
            for extra in (list(extra_flags), []) if extra_flags else ([],):
                failed = _compile_all(cc, [*FLAGS, *extra], Path(objects))
                if failed is None:
                    cmd = [cc, *FLAGS, *extra, "-o", tmp, *(str(Path(objects) / (f + ".o")) for f in FILES)]
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                    failed = None if proc.returncode == 0 else _failure(cmd, proc)
                if failed is None:
                    break
            else:
                raise OSError(failed)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load() -> tuple[NativeKernels | None, str]:
    """(kernels, "native <simd>, <n> threads (<library>)") when they run here, else (None, why not)."""
    if sys.platform == "emscripten":
        return None, "running under Pyodide (the wasm kernels serve)"
    if not settings.get("EMBER_NATIVE_KERNELS"):
        return None, "switched off by EMBER_NATIVE_KERNELS=0"
    cc = compiler()
    if cc is None:
        return None, "no C compiler ($CC, cc, gcc or clang) to build them with"
    try:
        path = _library_path(cc)
        if not path.is_file():
            build(cc, path)
        kernels = NativeKernels(ctypes.CDLL(str(path)), path)
    except SettingError:  # a bad EMBER_NUM_THREADS is the user's to fix, not a reason to run without the kernels
        raise
    except Exception as exc:  # a failed build (its stderr), an unwritable cache, a library that does not load
        return None, f"kernel build or load failed: {type(exc).__name__}: {exc}"
    blas = cpu_blas_pool.install(kernels.lib)  # (what it cannot do it says: the kernels serve either way)
    return kernels, f"native {kernels.simd}, {kernels.threads} threads, {blas} ({path})"
