"""numpy's OpenBLAS runs its threaded jobs on the native kernels' threads (threads.c's ember_blas_jobs) instead of
its own, through OpenBLAS's caller-managed threading (openblas_set_threads_callback_function, OpenBLAS >= 0.3.28).

Why: OpenBLAS's workers spin for ~0.1 s of CPU after every BLAS call (a `nop` loop, no yield), and a model mixes
BLAS with ember's threaded kernels (a prefill's GEMMs, then the decode step; an encoder's linear layers beside
attention.c; YOLO's GEMMs beside conv.c). On two cores a kernel worker then shared its core with that spin and waited
out the scheduler's time slices: the stories15M shape decoded at the same speed on two threads as on one after a
prefill, and the Whisper encoder gained nothing from a second thread. On one set of threads, a worker between jobs
spins ~0.1 ms and yields while it does.

OpenBLAS's own thread count (threadpoolctl, OPENBLAS_NUM_THREADS) still says how many jobs a call makes; the pool
starts workers as needed. Off with EMBER_BLAS_POOL=0, and where numpy's BLAS is not an OpenBLAS with the callback
(macOS's Accelerate, MKL, an older OpenBLAS): then nothing changes.
"""
from __future__ import annotations

import ctypes
import os
import re

from .. import settings

# the callback's setter and the configuration string, by the names builds export them under (scipy-openblas: the
# numpy wheels' 64-bit-integer build, prefixed and suffixed)
_SETTERS = ("scipy_openblas_set_threads_callback_function64_", "scipy_openblas_set_threads_callback_function",
            "openblas_set_threads_callback_function64_", "openblas_set_threads_callback_function")
_CONFIGS = ("scipy_openblas_get_config64_", "scipy_openblas_get_config", "openblas_get_config64_",
            "openblas_get_config")
# threads' per-job buffers are allocated on first use from 0.3.28; with 0.3.27's callback a job past the count
# OpenBLAS started threads for had none
_OLDEST = (0, 3, 28)


def _loaded_openblas() -> list[str]:
    """The OpenBLAS libraries this process has loaded, numpy's first (Linux: /proc/self/maps; else none)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if line.count(" ") >= 5 and "/" in line}
    except OSError:
        return []
    found = sorted(p for p in paths if "openblas" in os.path.basename(p).lower() and ".so" in p)
    return sorted(found, key=lambda p: "numpy" not in p)  # torch's own BLAS (a test reference) is left alone


def _symbol(lib, names):
    for name in names:
        try:
            return getattr(lib, name)
        except AttributeError:
            continue
    return None


def _version(lib) -> tuple | None:
    get = _symbol(lib, _CONFIGS)
    if get is None:
        return None
    get.restype = ctypes.c_char_p
    m = re.search(rb"OpenBLAS (\d+)\.(\d+)\.(\d+)", get() or b"")
    return tuple(int(g) for g in m.groups()) if m else None


def install(kernels_lib: ctypes.CDLL) -> str:
    """Point numpy's OpenBLAS at kernels_lib's ember_blas_jobs; what was done, for `ember info`."""
    if not settings.get("EMBER_BLAS_POOL"):
        return "BLAS keeps its own threads (EMBER_BLAS_POOL=0)"
    paths = _loaded_openblas()
    if not paths:
        return "BLAS keeps its own threads (no OpenBLAS loaded)"
    try:
        lib = ctypes.CDLL(paths[0], mode=getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1))
    except OSError as exc:
        return f"BLAS keeps its own threads ({exc})"
    setter, version = _symbol(lib, _SETTERS), _version(lib)
    if setter is None or version is None or version < _OLDEST:
        found = ".".join(map(str, version)) if version else "unknown"
        return f"BLAS keeps its own threads (OpenBLAS {found}: no caller-managed threading before 0.3.28)"
    setter.argtypes, setter.restype = [ctypes.c_void_p], None
    setter(ctypes.cast(kernels_lib.ember_blas_jobs, ctypes.c_void_p))
    return f"OpenBLAS {'.'.join(map(str, version))}'s jobs on these threads"
