"""ember.custom_op: a user's fused op per backend, its composed and host fallbacks, its autograd, and the
errors it gives; ember's own rotary embedding and flash attention, which are declared through it, against
torch and against their composed forms on every device (odd shapes, float16/bfloat16 storage)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
import ember.nn.functional as F
from ember.device import device_status
from ember.nn import fused_ops


def _t(a, device, grad=False):
    return ember.tensor(a, device=device, requires_grad=grad)


def _rope_inputs(B, T, H, D, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, T, H, D)).astype(np.float32), rng.standard_normal((T, D // 2)).astype(np.float32),
            rng.standard_normal((T, D // 2)).astype(np.float32))


def _torch_rope(x, c, s):
    half = x.shape[-1] // 2
    c, s = c[None, :, None, :], s[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


# ------------------------------------------------------------------ ember's rotary embedding

@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (2, 7, 3, 10), (1, 5, 2, 66)])
def test_rotary_forward_and_gradients_match_torch(device, shape):
    x, c, s = _rope_inputs(*shape)
    tx, tc, ts = (torch.tensor(a, requires_grad=True) for a in (x, c, s))
    ty = _torch_rope(tx, tc, ts)
    (ty * ty).sum().backward()
    ex, ec, es = (_t(a, device, True) for a in (x, c, s))
    ey = F.rotary_embedding(ex, ec, es)
    (ey * ey).sum().backward()
    np.testing.assert_allclose(ey.numpy(), ty.detach().numpy(), atol=1e-5, rtol=1e-5)
    for e, t in ((ex, tx), (ec, tc), (es, ts)):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rotary_kernel_matches_composed(device, dtype):
    """The kernel (one dispatch on webgpu) against the Tensor-op form on the same device, in low precision too:
    the kernel computes in float32 and rounds once, the composed form rounds after each op."""
    x, c, s = _rope_inputs(3, 5, 2, 18, seed=1)
    dt = getattr(ember, dtype)
    with ember.no_grad():
        ex = _t(x, "cpu").to(dt).to(device)  # cast on the host: a pending webgpu cast would count here
        ec, es = _t(c, device), _t(s, device)
        be = ex.device.backend
        before = getattr(be, "dispatches", 0)
        got = F.rotary_embedding(ex, ec, es)
        n = getattr(be, "dispatches", 0) - before
        ref = fused_ops.rope_composed(ex, ec, es)
    assert got.dtype is dt and got.shape == (3, 5, 2, 18)
    tol = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    np.testing.assert_allclose(got.float().numpy(), ref.float().numpy(), atol=tol * 8, rtol=tol)
    if device == "webgpu":
        assert fused_ops.rotary.path(ex.device) == "kernel" and n == 1


# ------------------------------------------------------------------ ember's flash attention

@pytest.mark.parametrize("mask", ["none", "causal", "bool"])
def test_flash_attention_forward_and_gradients_match_torch(device, mask):
    """Forward through the kernel (webgpu) or the composed form; gradients through the composed form."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in [(2, 3, 5, 12), (2, 1, 9, 12), (2, 1, 9, 7)])
    keep = rng.random((5, 9)) > 0.3
    keep[:, 0] = True
    kw, tkw = {}, {}
    if mask == "causal":
        kw = tkw = {"is_causal": True}
    elif mask == "bool":
        kw, tkw = {"attn_mask": _t(keep, device)}, {"attn_mask": torch.tensor(keep)}
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk.expand(2, 3, 9, 12), tv.expand(2, 3, 9, 7), **tkw)
    ty.square().sum().backward()
    with ember.no_grad():
        y = fused_ops.flash_attention(_t(q, device), _t(k, device), _t(v, device), **kw)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=2e-5, rtol=1e-4)
    eq, ek, ev = (_t(a, device, True) for a in (q, k, v))
    fused_ops.flash_attention(eq, ek, ev, **kw).square().sum().backward()
    for e, t in ((eq, tq), (ek, tk), (ev, tv)):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ a user's op: paths and autograd

_SCALE_WGSL = """
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    out[i] = to_out(f32(in0[i]) * bitcast<f32>(prm[1]) + f32(in1[i]));
}
"""


def _axpy(name, **kw):
    """a * x + y, with a an attribute: a kernel per backend given by the test."""
    return ember.custom_op(name, replace=True, backward=lambda ctx, g: (g * ctx.attrs["a"], g), **kw)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 7, 1001])
def test_user_kernel_matches_numpy_with_gradients(device, dtype, n):
    op = _axpy("test_axpy", forward={"cpu": lambda x, y, a: a * x + y, "webgpu": ember.WGSL(
        _SCALE_WGSL, params=lambda x, y, a: [float(a)])})
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    dt = getattr(ember, dtype)
    ex, ey = _t(x, device).to(dt).detach(), _t(y, device).to(dt).detach()
    ex.requires_grad = ey.requires_grad = True
    out = op(ex, ey, a=1.5)
    assert out.dtype is dt
    xs, ys = ex.float().numpy(), ey.float().numpy()
    want = (torch.tensor(xs) * 1.5 + torch.tensor(ys)).to(getattr(torch, dtype)).float().numpy()
    np.testing.assert_array_equal(out.float().numpy(), want)   # f32 math, one rounding: exactly torch's
    out.float().sum().backward()
    np.testing.assert_allclose(ex.grad.float().numpy(), np.full(n, 1.5))
    np.testing.assert_allclose(ey.grad.float().numpy(), np.ones(n))


def test_fallbacks_composed_then_host(device):
    x = _t(np.arange(6, dtype=np.float32), device)
    composed = ember.custom_op("test_double_c", replace=True, composed=lambda t: t * 2)
    host = ember.custom_op("test_double_h", replace=True, forward={"cpu": lambda a: a * 2})
    assert composed.path(x.device) == "composed"
    assert host.path(x.device) == ("kernel" if device == "cpu" else "host")
    be = x.device.backend
    np.testing.assert_array_equal(composed(x).numpy(), np.arange(6) * 2)
    reads = getattr(be, "readbacks", 0)
    y = host(x)
    if device != "cpu":   # the host path is a counted round trip, never a silent one
        assert be.readbacks == reads + 1
    np.testing.assert_array_equal(y.numpy(), np.arange(6) * 2)


def test_gradients_without_backward_go_through_composed(device):
    op = ember.custom_op("test_cube", replace=True, forward={"cpu": lambda a: a ** 3 + 100},  # wrong on purpose
                         composed=lambda t: t * t * t)
    x = _t(np.array([1.0, -2.0, 3.0], np.float32), device, True)
    y = op(x)                                  # recording gradients: the composed form runs
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [1, -8, 27])
    np.testing.assert_allclose(x.grad.numpy(), [3, 12, 27])


# ------------------------------------------------------------------ errors name the op

def test_declaration_and_call_errors():
    with pytest.raises(ember.CustomOpError, match="neither a forward kernel nor a composed"):
        ember.custom_op("test_empty")
    with pytest.raises(ember.CustomOpError, match="WGSL kernel, which runs on 'webgpu'"):
        ember.custom_op("test_misplaced", forward={"cuda": ember.WGSL("")})
    ember.custom_op("test_twice", replace=True, composed=lambda t: t)
    with pytest.raises(ember.CustomOpError, match="'test_twice' is already declared"):
        ember.custom_op("test_twice", composed=lambda t: t)
    nograd = ember.custom_op("test_nograd", replace=True, forward={"cpu": lambda a: a})
    with pytest.raises(ember.CustomOpError, match="'test_nograd' has no backward and no composed form"):
        nograd(ember.ones(2, requires_grad=True))
    shape = ember.custom_op("test_shape", replace=True, forward={"cpu": lambda a: a[:1]})
    with pytest.raises(ember.CustomOpError, match=r"'test_shape' \(cpu\): forward returned shape \(1,\), but the "
                                                  r"output is \(3,\)"):
        shape(ember.ones(3))
    comp = ember.custom_op("test_comp_shape", replace=True, composed=lambda t: t.sum())
    with pytest.raises(ember.CustomOpError, match=r"'test_comp_shape' \(composed\): returned \(\)"):
        comp(ember.ones(3))
    badbw = ember.custom_op("test_bw", replace=True, forward={"cpu": lambda a, b: a + b},
                            backward=lambda ctx, g: g)
    x = ember.ones(2, requires_grad=True)
    with pytest.raises(ember.CustomOpError, match="'test_bw': backward gave 1 gradients for 2 inputs"):
        badbw(x, ember.ones(2)).sum().backward()


_BAD = {
    "syntax": ("fn main( { out[0] = in0[0] + in1[0]; }", "its WGSL failed to compile"),
    "types": ("""@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                 out[g.x] = in0[g.x] + in1[g.x] + 1u; }""", "its WGSL failed to compile"),
    "unread": ("""@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                  // in1 is mentioned only here, in a comment
                  out[g.x] = in0[g.x]; }""", "never reads binding in1"),
    "extra": ("""@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                 out[g.x] = in0[g.x] + in1[g.x] + in2[g.x]; }""", "reads in2, but the op was called with 2 input"),
    "no_out": ("""@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                  let a = in0[g.x] + in1[g.x]; }""", "never writes the output binding 'out'"),
}


@pytest.mark.parametrize("case", sorted(_BAD))
def test_bad_wgsl_names_the_op(case):
    ok, why = device_status("webgpu")
    if not ok:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
        pytest.skip(f"webgpu unavailable: {why}")
    device = "webgpu"
    src, msg = _BAD[case]
    op = ember.custom_op(f"test_bad_{case}", replace=True, forward={"webgpu": ember.WGSL(src)})
    a = _t(np.ones(4, np.float32), device)
    with pytest.raises(ember.CustomOpError, match=f"custom op 'test_bad_{case}' \\(webgpu\\): .*{msg}"):
        op(a, a)


def test_cuda_kernel_arguments_without_a_gpu():
    """The CUDA backend's custom_kernel marshalling, over numpy with the launch emulated (no GPU here): the
    argument order (out, inputs, long long n, params as int / float), contiguous inputs, the default grid."""
    from ember.backends.cuda_backend import FusedKernels
    launches = []

    class Emulated(FusedKernels):
        def _launch_source(self, kernel, grid, block, args):
            launches.append((kernel.name, grid, block, [type(a) for a in args]))
            out, x, y, n, a, flag = args
            assert x.flags.c_contiguous and y.flags.c_contiguous and int(n) == out.size
            out[...] = (a * x + y).astype(out.dtype) if flag else 0

    k = ember.CUDA("/* never compiled here */", "axpy", block=128, params=lambda x, y, a: [float(a), 1])
    be = Emulated(np)
    x = np.arange(300, dtype=np.float32).reshape(3, 100)
    y = np.ones((100, 3), np.float32).T                       # a transposed view: made contiguous first
    got = be.custom_kernel(k, [x, y], (3, 100), ember.float32, {"a": 2.0})
    np.testing.assert_array_equal(got, 2 * x + 1)
    assert launches == [("axpy", (3,), (128,), [np.ndarray, np.ndarray, np.ndarray, np.int64, np.float32, np.int32])]
