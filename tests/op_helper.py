"""Run the same expression in torch and ember; compare forward values and input gradients.

`fn(m, *xs)` receives the module (`torch` or `ember`) and tensors, so one lambda serves both:
    check(lambda m, x: m.nn.functional.gelu(x), [(3, 4)])
"""
from __future__ import annotations

import numpy as np
import torch

import ember

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8,
                "bool": torch.bool}
TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float64": (1e-10, 1e-10)}


def make(shape, dtype="float32", low=-2.0, high=2.0, rng=None, transpose=False):
    rng = rng or np.random.default_rng(sum(shape) * 7 + len(shape))
    if dtype == "bool":
        a = rng.random(shape) > 0.5
    elif dtype in ("int64", "int32", "uint8"):
        a = rng.integers(0 if dtype == "uint8" else int(low), int(high) + 1, size=shape).astype(dtype)
    else:
        a = np.asarray(rng.uniform(low, high, size=shape), dtype=np.float32)
    if transpose and len(shape) >= 2:  # a non-contiguous view with the requested shape
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    return a


def _to_torch(a, dtype, grad):
    t = torch.tensor(np.array(a)).to(TORCH_DTYPES[dtype])  # (np.ascontiguousarray would turn 0-d into 1-d)
    if grad:
        t.requires_grad_(True)
    return t


def _to_ember(a, dtype, grad, device, transpose):
    t = ember.tensor(np.array(a), dtype=dtype, device=device)
    if transpose and t.ndim >= 2:  # feed ember a real strided view too
        t = ember.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)), dtype=dtype, device=device).transpose(-1, -2)
        t = t.detach()
    if grad:
        t.requires_grad_(True)
    return t


def _np(t):
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return t.float().numpy() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy()
    return np.asarray(t.float().numpy() if t.dtype in (ember.bfloat16, ember.float16) else t.numpy())


def compare(got, want, atol, rtol, what):
    got, want = _np(got), _np(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch {want.shape}"
    if want.dtype == np.bool_ or want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, equal_nan=True, err_msg=what)


class _EmberOn:
    """`ember` as the test lambdas see it: tensors they create land on the device under test."""

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        return getattr(ember, name)

    def tensor(self, data, **kw):
        kw.setdefault("device", self._device)
        return ember.tensor(data, **kw)


def _is_float(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


def check(fn, shapes, device="cpu", dtype="float32", grad=True, atol=None, rtol=None, low=-2.0, high=2.0,
          inputs=None, transpose=False, grad_atol=None, dtypes=None):
    """Forward and (for float dtypes) backward parity of fn against torch.

    Strict on purpose: ember must return as many outputs as torch, every float output torch can
    differentiate takes part in the backward pass (a random weighted sum of all of them), and an input
    gradient ember produces where torch has none must be all zeros."""
    n_in = len(shapes if inputs is None else inputs)
    dtypes = dtypes or [dtype] * n_in
    assert len(dtypes) == n_in, f"test bug: {len(dtypes)} dtypes for {n_in} inputs"
    arrays = inputs if inputs is not None else [make(s, d, low, high, transpose=transpose) for s, d in zip(shapes, dtypes)]
    a0, r0 = TOL.get(dtype, (0, 0))
    atol, rtol = atol if atol is not None else a0, rtol if rtol is not None else r0
    grads = [grad and d in TOL for d in dtypes]
    tt = [_to_torch(a, d, g) for a, d, g in zip(arrays, dtypes, grads)]
    et = [_to_ember(a, d, g, device, transpose) for a, d, g in zip(arrays, dtypes, grads)]
    want = fn(torch, *tt)
    got = fn(_EmberOn(device), *et)
    many_w, many_g = isinstance(want, (tuple, list)), isinstance(got, (tuple, list))
    assert many_w == many_g, f"torch returns {type(want).__name__}, ember {type(got).__name__}"
    outs_w = list(want) if many_w else [want]
    outs_g = list(got) if many_g else [got]
    assert len(outs_g) == len(outs_w), f"ember returns {len(outs_g)} outputs, torch {len(outs_w)}"
    for i, (g, w) in enumerate(zip(outs_g, outs_w, strict=True)):
        compare(g, w, atol, rtol, f"forward output {i}")
        if isinstance(w, torch.Tensor):
            assert str(g.dtype).replace("ember.", "") == str(w.dtype).replace("torch.", ""), \
                f"output {i}: dtype {g.dtype} != torch {w.dtype}"
    if not any(grads):
        return got
    # every output torch can differentiate, weighted by its own random upstream gradient
    diff = [i for i, w in enumerate(outs_w) if _is_float(w) and w.requires_grad]
    if not diff:
        return got
    rng = np.random.default_rng(1)
    loss_w = loss_g = 0
    for i in diff:
        w, g = outs_w[i], outs_g[i]
        assert g.requires_grad, f"output {i}: torch can differentiate it, ember's has no gradient graph"
        up = rng.uniform(-1, 1, size=tuple(w.shape)).astype(np.float32)
        loss_w = loss_w + (w.float() * torch.tensor(up)).sum()
        loss_g = loss_g + (g.float() * ember.tensor(up, device=device)).sum()
    loss_w.backward()
    loss_g.backward()
    ga = grad_atol if grad_atol is not None else atol * 10
    for i, (e, t) in enumerate(zip(et, tt, strict=True)):
        if t.grad is None:  # torch: not differentiable here / not reached; ember may only say the same
            if e.grad is not None:
                eg = _np(e.grad)
                assert not np.any(eg), (f"input {i}: torch has no gradient, ember's is nonzero "
                                        f"(max |g| {np.max(np.abs(eg)):.3g})")
            continue
        assert e.grad is not None, f"input {i}: torch has a gradient, ember has none"
        assert str(e.grad.dtype).replace("ember.", "") == str(t.grad.dtype).replace("torch.", ""), \
            f"gradient of input {i}: dtype {e.grad.dtype} != torch {t.grad.dtype}"
        compare(e.grad, t.grad, ga, rtol * 10, f"gradient of input {i}")
    return got
