"""Process-wide glibc malloc tuning for the CPU backend's activations, for applications to opt into.

A library must not retune the host process when it is imported, so nothing in ember calls this on import;
the entry points do (the `ember` CLI before running a command, the benchmarks). Your own program can too:

    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()
"""
from __future__ import annotations

import sys

from .. import settings


def keep_freed_memory() -> bool:
    """glibc hands every freed block past its mmap threshold (128 KB, rising to at most 32 MB) back to the
    OS, so the next activation of that size lands on fresh pages: a page fault per 4 KB at ~2 us here, as
    costly as the op that fills them (Whisper's encoder bias adds ran 4x slower). Keep blocks up to 32 MB in
    the heap for reuse and trim it only past 128 MB free, as a caching allocator would (Whisper tiny.en
    end to end 7% faster). Linux/glibc only; EMBER_MALLOC_TUNING=0 leaves malloc alone. Returns whether
    malloc was tuned."""
    if sys.platform != "linux" or not settings.get("EMBER_MALLOC_TUNING"):
        return False
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        return False  # another libc (musl): nothing to tune
    return True
