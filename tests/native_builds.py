"""The compiled CPU kernels built once per vector path this machine can run (its -march=native build; plain AVX2
where the native one adds VNNI's byte dot products; SSSE3; plain C), for the tests that hold every build to the same
bits."""
from __future__ import annotations

import ctypes

import pytest

from ember.backends import cpu_native_kernels as cnk

FLAGS = {"native": cnk.NATIVE, "avx2": ["-mavx2", "-mfma", "-mf16c"], "ssse3": ["-mssse3"],
         "scalar": ["-DEMBER_SIMD_SCALAR"]}


_BUILT: dict = {}  # tag -> NativeKernels: each build once per session (~15 s each), shared by the test modules


def build_variants(tmp_path_factory, tags=("native", "avx2", "ssse3", "scalar")) -> dict:
    """{tag: NativeKernels} for each build in tags, each in its own folder; skips the test without a C compiler.
    "avx2" is built only after a native build with VNNI (a CPU without AVX2 could not run it; one without VNNI
    would build the native one again). A test that changes a build's thread count sets the count it needs first:
    the builds are shared."""
    cc = cnk.compiler()
    if cc is None:
        pytest.skip("no C compiler")
    for tag in tags:
        if tag == "avx2" and ("native" not in _BUILT or _BUILT["native"].simd != "avx2-vnni"):
            continue
        if tag not in _BUILT:
            path = cnk.build(cc, tmp_path_factory.mktemp(tag) / "k.so", FLAGS[tag])
            _BUILT[tag] = cnk.NativeKernels(ctypes.CDLL(str(path)), path)
    return {tag: _BUILT[tag] for tag in tags if tag in _BUILT}


def by_simd(kernels: dict) -> dict:
    """{simd: NativeKernels}, the first build of each vector path (the native build may be SSSE3's or plain C's)."""
    out = {}
    for k in kernels.values():
        out.setdefault(k.simd, k)
    return out
