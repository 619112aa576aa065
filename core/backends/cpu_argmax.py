"""The CPU's linear_argmax (the kernel registry's): greedy decoding's pick from a float32 output layer. Natively,
where the layer's product is decode.c's row-vector one (an LM head each decoded token), cpu_kernels/argmax_f32.c
screens the weight's float16 copy for the outputs that can be the largest and computes only those from the weight,
as that product computes them: the same index as argmax of every output, from about half the bytes."""
from __future__ import annotations

import numpy as np

from .cpu_matmul import native_kernels, screen_copy
from .numpy_backend import row_matvec

# outputs past which the screen gives up and every one is computed (x all zeros makes them all candidates); a
# candidate's exact sum reads a column of the weight, a cache line an input
MAX_EXACT = 64


def linear_argmax(be, x, w) -> int:
    """int(argmax(x @ w.T)) for one row x (..., K) and a weight w (N, K), the first of equal largest."""
    b = w.T  # (K, N): how the CPU backend's product reads a Linear's weight
    if row_matvec(x, b):
        screen = screen_copy(b)
        if screen is not None:
            arg = native_kernels().matvec_f32_argmax(x.reshape(-1), b, *screen, MAX_EXACT)
            if arg >= 0:
                return arg
    return int(np.argmax(be.matmul(x, b)))


def describe(be=None) -> str:
    k = native_kernels()
    return "cpu_kernels/argmax_f32.c ember_matvec_f32_argmax (a float16 screen)" if k is not None else \
        "every output (matmul)"
