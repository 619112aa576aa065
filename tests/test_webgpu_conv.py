"""WebGPU convolution as GEMM (webgpu/conv_gemm.py: im2col on the GPU, then the tiled matmul) against the
CPU backend's conv (itself tested against torch) and against the direct kernel (conv.wgsl): 1-3 spatial
dims, odd sizes, stride, padding, dilation, groups (depthwise too), the 1x1 shortcut, several images,
and the column matrix cut into slabs (images, then position ranges) as a large image would be."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend

CASES = [  # (x shape, w shape, stride, padding, dilation, groups)
    ((2, 3, 11, 13), (5, 3, 3, 3), 1, 1, 1, 1),
    ((1, 4, 9, 10), (6, 2, 3, 2), (2, 1), (1, 0), (1, 2), 2),
    ((1, 6, 8, 7), (6, 1, 3, 3), 2, 1, 1, 6),          # depthwise
    ((3, 8, 5, 6), (7, 8, 1, 1), 1, 0, 1, 1),          # 1x1: no column matrix
    ((1, 8, 5, 6), (4, 8, 1, 1), 2, 0, 1, 1),          # strided 1x1 takes the columns
    ((2, 3, 17), (4, 3, 5), 3, 2, 2, 1),               # 1-d
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 3), 1, (1, 0, 1), 1, 1),  # 3-d
]


def _conv(x, w, stride, padding, dilation, groups):
    from ember.nn.functional import conv_nd  # conv3d has no public name; the shared one takes nd
    with ember.no_grad():
        return conv_nd(x, w, None, stride, padding, dilation, groups, x.ndim - 2).numpy()


@pytest.mark.parametrize("case", CASES, ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(CASES)])
def test_conv_gemm_matches_cpu_and_direct(case):
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(len(xs) * 7 + ws[0])
    x, w = rng.standard_normal(xs, np.float32), rng.standard_normal(ws, np.float32)
    want = _conv(ember.tensor(x), ember.tensor(w), stride, padding, dilation, groups)
    gx, gw = ember.tensor(x, device="webgpu"), ember.tensor(w, device="webgpu")
    got = _conv(gx, gw, stride, padding, dilation, groups)
    assert BE.conv_kernel == "gemm"
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    BE.conv_kernel = "direct"
    try:
        direct = _conv(gx, gw, stride, padding, dilation, groups)
    finally:
        BE.conv_kernel = "gemm"
    np.testing.assert_allclose(got, direct, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("limit", [3 * 27 * 143 * 4, 1000])  # a slab per image; then position ranges
def test_conv_gemm_slabs(monkeypatch, limit):
    import ember.webgpu.conv_gemm as cg
    monkeypatch.setattr(cg, "_COLS_BYTES", limit)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((3, 3, 11, 13), np.float32), rng.standard_normal((4, 3, 3, 3), np.float32)
    want = _conv(ember.tensor(x), ember.tensor(w), 1, 1, 1, 1)
    got = _conv(ember.tensor(x, device="webgpu"), ember.tensor(w, device="webgpu"), 1, 1, 1, 1)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_conv_gemm_half_and_dispatch_count():
    """float16 storage rounds like the CPU; a 3x3 conv is two dispatches (columns, matmul) plus the fused
    bias + SiLU epilogue: one elementwise kernel."""
    rng = np.random.default_rng(6)
    x, w, b = (rng.standard_normal(s, np.float32) for s in ((1, 4, 9, 9), (8, 4, 3, 3), (8,)))
    want = _conv(ember.tensor(x, dtype=ember.float16), ember.tensor(w, dtype=ember.float16), 1, 1, 1, 1)
    got = _conv(ember.tensor(x, dtype=ember.float16, device="webgpu"),
                ember.tensor(w, dtype=ember.float16, device="webgpu"), 1, 1, 1, 1)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-2, rtol=2e-2)
    gx, gw, gb = (ember.tensor(a, device="webgpu") for a in (x, w, b))
    with ember.no_grad():
        F.silu(F.conv2d(gx, gw, gb, padding=1)).numpy()          # warm-up: pipelines compiled
        c0 = BE.counters()["dispatches"]
        y = F.silu(F.conv2d(gx, gw, gb, padding=1))
        c1 = BE.counters()["dispatches"]
        got = y.numpy()
    z = _conv(ember.tensor(x), ember.tensor(w), 1, 1, 1, 1) + b[None, :, None, None]
    np.testing.assert_allclose(got, z / (1 + np.exp(-z)), atol=1e-4, rtol=1e-4)
    assert c1 - c0 == 2, c1 - c0   # the bias + SiLU kernel runs when y is read
