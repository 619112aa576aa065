"""The CPU backend's weight layout (numpy_backend.weight_layout): a 2-D float weight stored input-major for BLAS,
cast to float32 on the way, by maps.c's threaded transpose where the native kernels run and by numpy's blocks of
rows otherwise: the same values as numpy's w.T.astype(float32), every element, on every path and thread count."""
from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember.backends import numpy_backend as NB
from ember.backends.cpu_matmul import native_kernels

# (rows, cols): past and short of the 32 x 32 blocks, one row, a Whisper-sized table
SHAPES = [(128, 128), (33, 517), (1000, 37), (1, 16400), (16400, 1), (2593, 384)]


def _weight(shape, dtype, seed):
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 4
    w.flat[:: 7] = 0.0
    w.flat[1:: 11] = -0.0
    if w.size > 3:
        w.flat[3] = np.inf
        w.flat[2] = np.nan
    w = w.astype(dtype)
    if dtype == np.float16:  # a few subnormal halves, exact as floats
        w.flat[5:: 13] = np.float16(3e-6)
    return w


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_weight_layout_is_the_transposed_float32_weight(shape, dtype, monkeypatch):
    backend = NB.NumpyBackend()
    w = _weight(shape, dtype, seed=sum(shape))
    want = w.astype(np.float32)
    nk, calls = native_kernels(), []
    assert nk is not None, "the native kernels should build here (CI has a C compiler)"

    class Counted:  # the native kernels, counting the transposes they make
        def transpose_f32(self, a):
            calls.append(a.shape)
            return nk.transpose_f32(a)

    for name, kernels in (("native", Counted()), ("numpy", None)):
        monkeypatch.setattr(NB, "native_kernels", lambda k=kernels: k)
        got = backend.weight_layout(w, D.float32)
        assert (calls == [shape]) == (name == "native" and w.size >= 16384), (name, calls)
        calls.clear()
        assert got.dtype == np.float32 and got.shape == shape, name
        if w.size >= 16384:  # (the layout of the weights the rule stores: input-major, its transpose C-contiguous)
            assert got.T.flags.c_contiguous and not got.flags.c_contiguous or 1 in shape, name
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name  # (every bit: NaN, -0.0, subnormals)


def test_native_transpose_gives_the_same_bits_on_any_thread_count():
    nk = native_kernels()
    assert nk is not None
    w = _weight((3001, 389), np.float16, seed=3)
    want = w.T.astype(np.float32)
    before = nk.threads
    try:
        for n in (1, 2, 3):
            nk.set_threads(n)
            got = nk.transpose_f32(w)
            assert got.flags.c_contiguous and np.array_equal(got.view(np.uint32), want.view(np.uint32)), n
    finally:
        nk.set_threads(before)
