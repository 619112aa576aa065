"""The WebGPU linear primitive: x @ W^T + b as one matmul dispatch whose store adds the bias (matmul.wgsl,
matmul_vec4.wgsl), against float64 numpy and the cpu backend: odd shapes (the tiled kernel), aligned ones (vec4
loads), batched inputs, strided inputs and a bias that is an offset view, float16/bfloat16 in every storage
mode; and the composed form (matmul, then the add) giving the same numbers in one more dispatch."""
from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember.device import device_status

if not device_status("webgpu")[0]:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {device_status('webgpu')[1]}", allow_module_level=True)

from test_webgpu_f16 import BE, MODES, _pair, _rnd, storage  # noqa: E402  (the same backend and 16-bit modes)

# (lead dims of x, in, out): a decode row and odd sizes take the tiled kernel, multiples of 4 the vec4 one
SHAPES = [((1,), 33, 17), ((2, 5), 7, 9), ((3,), 64, 384), ((2, 3), 32, 12), ((70,), 20, 68)]


def _dispatches(fn):
    d0 = BE.dispatches
    y = fn().numpy()
    return y, BE.dispatches - d0


@pytest.mark.parametrize("lead,k,n", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_is_one_dispatch_matching_numpy(lead, k, n, bias):
    x, w, b = _rnd(*lead, k), _rnd(n, k, seed=1), _rnd(n, seed=2)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    with ember.no_grad():
        g = [ember.tensor(a, device="webgpu") for a in (x, w, b)]
        c = [ember.tensor(a) for a in (x, w, b)]
        got, d = _dispatches(lambda: F.linear(g[0], g[1], g[2] if bias else None))
        cpu = F.linear(c[0], c[1], c[2] if bias else None).numpy()
        with ember.kernels.disabled("linear", backend="webgpu"):  # the composed form: matmul, then the pending add
            composed, dc = _dispatches(lambda: F.linear(g[0], g[1], g[2] if bias else None))
    assert got.shape == lead + (n,) and d == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_allclose(got, cpu, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_allclose(got, composed, rtol=1e-6, atol=1e-6 * np.sqrt(k))
    assert dc == (2 if bias else 1)


def test_strided_input_and_offset_bias():
    """x a transposed view (no vec4 loads), the bias a slice at an element offset of its buffer."""
    xt, w, b = _rnd(24, 6), _rnd(10, 24, seed=1), _rnd(13, seed=2)
    want = xt.T.astype(np.float64) @ w.T + b[3:]
    with ember.no_grad():
        gx, gw, gb = (ember.tensor(a, device="webgpu") for a in (xt, w, b))
        got, d = _dispatches(lambda: F.linear(gx.t(), gw, gb[3:]))
    assert d == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("lead,k,n", [((1,), 33, 17), ((2, 3), 32, 12)])
def test_half_linear_rounds_once(mode, dtype, lead, k, n):
    """16-bit linear accumulates in f32 and rounds the biased sum once (as torch); the cpu backend rounds the
    matmul and the add each, so the two may differ by about one rounding of the output."""
    dt = getattr(ember, dtype)
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    with storage(mode), ember.no_grad():
        gx, cx = _pair(_rnd(*lead, k), dt)
        gw, cw = _pair(_rnd(n, k, seed=1), dt)
        gb, cb = _pair(_rnd(n, seed=2), dt)
        y = F.linear(gx, gw, gb).float().numpy()
        want = cx.float().numpy().astype(np.float64) @ cw.float().numpy().T + cb.float().numpy()
        ref = ember.tensor(want.astype(np.float32)).to(dt).float().numpy()   # rounded once
        cpu = F.linear(cx, cw, cb).float().numpy()
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(y, cpu, rtol=tol, atol=tol * 4)
