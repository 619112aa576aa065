"""The CUDA kernel sources (core/backends/cuda/*.cu) and their compiled modules.

Each .cu file is compiled once per GPU by NVRTC through cupy.RawModule, on first use, with the
folder on the include path (the kernels share common.cuh). `SOURCES` also lets tests compile every
file with nvcc where it exists, so a syntax error cannot land unnoticed on machines without a GPU.
"""
from __future__ import annotations

import os

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")
SOURCES = ("rows.cu", "attention.cu", "quant.cu")  # compiled units; *.cuh are included by them
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}  # kernel name suffix per ember dtype

_MODULES: dict = {}  # (device index, file) -> cupy.RawModule


def source(name: str) -> str:
    with open(os.path.join(KERNEL_DIR, name), encoding="utf-8") as f:
        return f.read()


def module(cupy, device_index: int, name: str):
    """The compiled RawModule of one .cu file on one device (compiled on first use, then cached)."""
    key = (device_index, name)
    mod = _MODULES.get(key)
    if mod is None:
        mod = cupy.RawModule(code=source(name), options=("-std=c++14", f"-I{KERNEL_DIR}"))
        _MODULES[key] = mod
    return mod


def function(cupy, device_index: int, name: str, kernel: str):
    """One __global__ entry point, e.g. function(cupy, 0, "rows.cu", "softmax_f16")."""
    return module(cupy, device_index, name).get_function(kernel)


_CUSTOM: dict = {}  # (device index, source, name) -> cupy.RawKernel of an ember.custom_op


def custom_function(cupy, device_index: int, source_text: str, kernel: str):
    """An ember.custom_op's CUDA kernel, compiled by NVRTC on first use and cached."""
    key = (device_index, source_text, kernel)
    fn = _CUSTOM.get(key)
    if fn is None:
        fn = cupy.RawKernel(source_text, kernel, options=("-std=c++14", f"-I{KERNEL_DIR}"))
        fn.compile()  # raise here, with NVRTC's log, rather than at the first launch
        _CUSTOM[key] = fn
    return fn
