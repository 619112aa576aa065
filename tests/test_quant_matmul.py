"""Quantized matmul and QTensor.

qmatmul(x, W) must equal x @ dequantize(W).T: both multiply the same float32 values, so the only
difference is BLAS summation order — tolerance 1e-5 relative to |x| @ |W|.T for every type.
The extra memory must stay bounded by a few slabs, far below a float32 copy of W (tracemalloc).
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ember.ggml import codec
from ember.quant import QTensor, qmatmul

gguf = pytest.importorskip("gguf")

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "F16", "BF16", "F32"]


@pytest.mark.parametrize("name", TYPES)
def test_qmatmul_equals_dequantize_then_matmul(name, rng):
    w = rng.standard_normal((300, 512)).astype(np.float32)  # 300 rows: slabs do not divide evenly
    raw = codec.quantize(w, name)
    wd = codec.dequantize(raw, name, w.shape)
    if name in gguf.quants._type_traits or name == "F16":  # gguf-py's dequantization as the reference
        wd_ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]).reshape(w.shape)
        assert np.array_equal(wd, wd_ref)
    for lead in [(1,), (7,), (2, 3)]:
        x = rng.standard_normal((*lead, 512)).astype(np.float32)
        got = qmatmul(x, raw, name, w.shape, scratch_bytes=64 * 512 * 4)  # 64-row slabs
        assert got.shape == (*lead, 300) and got.dtype == np.float32
        ref = x @ wd.T
        assert np.all(np.abs(got - ref) <= 1e-5 * (np.abs(x) @ np.abs(wd).T) + 1e-30)


def test_qmatmul_memory_is_bounded():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB in float32
    for name in ("Q4_0", "Q4_K", "Q8_0"):
        raw = codec.quantize(w, name)
        x = rng.standard_normal((4, 2048)).astype(np.float32)
        tracemalloc.start()
        y = qmatmul(x, raw, name, w.shape, scratch_bytes=512 << 10)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 3 << 20, f"{name}: {peak / 2**20:.1f} MiB extra for an 8 MiB weight with 0.5 MiB slabs"
        assert np.allclose(y, x @ codec.dequantize(raw, name, w.shape).T, rtol=1e-4, atol=1e-3)


def test_qmatmul_errors(rng):
    raw = codec.quantize(rng.standard_normal((8, 64)).astype(np.float32), "q8_0")
    with pytest.raises(ValueError, match=r"input of shape \(2, 32\) does not match weight of shape \(8, 64\)"):
        qmatmul(np.zeros((2, 32), np.float32), raw, "q8_0", (8, 64))
    with pytest.raises(ValueError, match="needs a 2-d weight"):
        qmatmul(np.zeros((2, 64), np.float32), raw, "q8_0", (2, 4, 64))


def test_qtensor_api(rng):
    w = rng.standard_normal((16, 256)).astype(np.float32)
    q = QTensor.quantize(w, "q6_k", name="proj")
    assert q.ggml_type == "Q6_K" and q.ggml_type.name == "Q6_K" and q.shape == (16, 256)
    assert q.nbytes == 16 * 210 and q.data.dtype == np.uint8
    ref = gguf.quants.dequantize(q.data, gguf.GGMLQuantizationType.Q6_K)
    assert np.array_equal(q.numpy(), ref)
    t = q.dequantize()
    assert t.dtype.name == "float32" and np.array_equal(t.numpy(), ref)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    assert np.allclose(q.matmul_t(x), x @ ref.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="tensor 'proj': 5 bytes of Q6_K data for shape \\(16, 256\\)"):
        QTensor(np.zeros(5, np.uint8), "q6_k", (16, 256), name="proj")
    with pytest.raises(TypeError, match="cannot quantize tensor of dtype int64"):
        QTensor.quantize(np.arange(32), "q8_0")
