"""The page's float kernels built natively, for deterministic mode (EMBER_DETERMINISTIC=1, `ember whisper
--deterministic`, ember.backends.cpu_matmul.set_deterministic): cpu_kernels/gemm.c and elementwise.c, the sources of
the page's WebAssembly GEMM, GELU, SiLU and softmax exponentials, compiled for this machine with
cpu_kernels/native/wasm_simd128.h standing in for clang's WebAssembly intrinsics (each one the lane-wise IEEE
operation the WebAssembly spec defines) and -ffp-contract=off, as the page's plain module is built. Every float
operation then happens in the same order with the same rounding: the page's plain module and this library give the
same bits, and a model gives the same tokens on both.

Built at first use like cpu_native_kernels.py (cc -O2, ~1 s, cached under <cache>/kernels/page-<hash>.so); no
-march=native: vector width and instruction choice do not change IEEE lane results, and a portable build can be
shared by any x86-64 / arm64 machine. Its jobs run on threads.c's workers (as many threads as the native kernels
use): parallel.h splits them into chunks computed by the same code on any thread, as on the page's kernel pool,
so the bits do not depend on the count (a 1500 x 384 x 1536 product: 169 -> 90 ms on two threads).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import subprocess
from pathlib import Path

import numpy as np

from ..paths import cache_dir
from . import cpu_native_kernels
from .cpu_wasm_kernels import WasmKernels

SOURCES = Path(__file__).with_name("cpu_kernels")
FILES = ("gemm.c", "elementwise.c", "threads.c")  # threads.c: parallel.h on this machine's threads
SHIM = SOURCES / "native"
FLAGS = ["-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-pthread", "-std=gnu11", "-Wno-attributes",
         "-Wno-unknown-attributes", "-Wno-ignored-attributes", "-Wno-unknown-warning-option"]
_P, _I = ctypes.c_void_p, ctypes.c_int


class PageKernels(WasmKernels):
    """WasmKernels' float methods (matmul with the same choice of calls, gelu, silu, exp_rowmax) on the native
    build; native addresses are 64-bit, so pointers go through ctypes as c_void_p."""

    def __init__(self, lib: ctypes.CDLL, path: Path):
        self.path = path
        lib.ember_sgemm.argtypes = [_I, _I, _I, _P, _I, _I, _P, _I, _I, _P, _I, _P, _I]
        lib.ember_sgemm_batched.argtypes = [_I, _I, _I, _I, _P, _P, _P, _P, _P, _I]
        # SiLU / GELU (which 0 / 1) and the softmax exponentials with their blocks or rows split between threads:
        # every lane is computed alone, so the bits are the single-threaded entry points' (the page's)
        lib.ember_unary_blocks_f32.argtypes = [_I, _P, _P, _I]
        lib.ember_exp_rowmax_rows_f32.argtypes = [_P, _I, _I, _I]
        self._ptr, self._addr = _address, int
        self._sgemm, self._sgemm_batched = lib.ember_sgemm, lib.ember_sgemm_batched
        lib.ember_threads.argtypes = [_I]
        self._lib = lib
        self.set_threads(cpu_native_kernels.default_threads())
        self._strides = np.empty(8, np.int32)
        self._strides_ptr = _address(self._strides)
        self._silu, self._gelu = (functools.partial(lib.ember_unary_blocks_f32, which) for which in (0, 1))
        self._exp_rowmax = lib.ember_exp_rowmax_rows_f32

    def set_threads(self, n: int) -> int:
        """Compute on n threads (the same bits on any count); returns how many are in use."""
        self.threads = self._lib.ember_threads(n)
        # GEMM's packing scratch: ember_sgemm_scratch_floats() floats per thread
        self._scratch = np.empty(self._lib.ember_sgemm_scratch_floats() * self.threads, np.float32)
        self._scratch_ptr = _address(self._scratch)
        return self.threads


def _address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def _library_path(cc: str) -> Path:
    h = hashlib.sha256()
    for p in [SOURCES / f for f in FILES] + sorted(SOURCES.glob("*.h")) + [SHIM / "wasm_simd128.h"]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    h.update(" ".join(FLAGS).encode())
    h.update(subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.encode())
    return cache_dir("kernels", f"page-{h.hexdigest()[:20]}.so")


def load() -> tuple[PageKernels | None, str]:
    """(kernels, "page kernels built natively (<library>)"), or (None, why not)."""
    cc = cpu_native_kernels.compiler()
    if cc is None:
        return None, "no C compiler ($CC, cc, gcc or clang) to build the page's kernels with"
    try:
        path = _library_path(cc)
        if not path.is_file():
            _build(cc, path)
        return PageKernels(ctypes.CDLL(str(path)), path), f"page kernels built natively ({path})"
    except Exception as exc:  # a failed build (its stderr), an unwritable cache, a library that does not load
        return None, f"page kernel build or load failed: {type(exc).__name__}: {exc}"


def _build(cc: str, out: Path) -> None:
    import os
    import tempfile
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.stem + "-", suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        cmd = [cc, *FLAGS, f"-I{SHIM}", "-o", tmp, *(str(SOURCES / f) for f in FILES)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise OSError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
