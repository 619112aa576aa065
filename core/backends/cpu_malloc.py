"""Process-wide memory tuning for the CPU backend's activations and weights, for applications to opt into.

A library must not retune the host process when it is imported, so nothing in ember calls these on import;
the entry points do (the `ember` CLI before running a command, the benchmarks). Your own program can too:

    from ember.backends.cpu_malloc import keep_freed_memory, no_huge_page_stalls
    keep_freed_memory()
    no_huge_page_stalls()
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


MADV_HUGEPAGE = 14
HUGE_PAGE = 2 << 20


def no_huge_page_stalls() -> bool:
    """numpy asks the kernel to back every array of 4 MB or more with transparent huge pages (madvise). Where the
    kernel makes them on demand (/sys/kernel/mm/transparent_hugepage/defrag "madvise", Debian's default), a page
    fault in such an array waits while the kernel compacts memory to free 2 MB, for as long as that takes on a
    host whose memory is fragmented: a cold `ember whisper` of a 3.8 s clip took 1.2 to 2.4 s from one process to
    the next (loading tiny.en 0.35 to 1.04 s), 1.25-1.31 s every time without the requests. This stops numpy's
    requests for the process; the weights a decode plan streams every token still ask (huge_pages(), on the
    blocked arena made once at load), while a warm forward's activations, reused from the heap
    (keep_freed_memory), lose ~1-3% (YOLOv8s). EMBER_MALLOC_TUNING=0 leaves numpy alone. Returns whether numpy's
    requests were stopped."""
    if not settings.get("EMBER_MALLOC_TUNING"):
        return False
    import numpy as np
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:  # (a numpy without the switch: it asks or not as it always has)
        return False
    switch(False)
    return True


def huge_pages(a) -> None:
    """Ask the kernel to back the whole 2 MB pages inside array a's memory with huge pages (Linux; a no-op
    elsewhere, or where the kernel declines): for the weights a decode plan streams every token, whose TLB misses
    in 4 KB pages cost ~1/3 of the rate (cpu_decode.py). Call it before a's first write: a page is made at its first
    touch."""
    if sys.platform != "linux" or a.nbytes < 2 * HUGE_PAGE:
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        start = -(-a.ctypes.data // HUGE_PAGE) * HUGE_PAGE
        end = (a.ctypes.data + a.nbytes) // HUGE_PAGE * HUGE_PAGE
        if end > start:
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_HUGEPAGE)
    except (OSError, AttributeError):
        pass  # (no madvise: 4 KB pages, as before)
