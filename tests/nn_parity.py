"""One ember module against the same torch module: torch's state_dict loaded strictly, forward outputs, and the
gradients of inputs and every parameter under a random weighting of the outputs (a plain sum would hide
softmax-shaped errors: its gradient through a softmax is zero)."""
from __future__ import annotations

import numpy as np
import torch

import ember


def load_torch(em, tm, device="cpu", ordered=True):
    """em.load_state_dict(tm.state_dict()) strictly, then em on `device`; checks the names (and their order)."""
    sd = tm.state_dict()
    names = list(em.state_dict()), list(sd)
    assert names[0] == names[1] if ordered else sorted(names[0]) == sorted(names[1]), f"names differ from torch: {names}"
    em.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in sd.items()}, strict=True)
    return em.to(device)


def _flat(out):
    if isinstance(out, (tuple, list)):
        r = []
        for o in out:
            r += _flat(o)
        return r
    return [out]


def compare(em, tm, inputs, device, call=None, atol=1e-5, grad_atol=1e-4, grads=True, seed=0, frozen=()):
    """Run call(module, *inputs) in both (inputs: numpy arrays; float ones get gradients unless their index is
    in `frozen`; None passes through).
    Returns the largest forward and gradient differences seen (all asserted within atol / grad_atol)."""
    call = call or (lambda m, *xs: m(*xs))
    wants = [grads and x is not None and x.dtype.kind == "f" and i not in frozen for i, x in enumerate(inputs)]
    tx = [None if x is None else torch.tensor(x, requires_grad=w) for x, w in zip(inputs, wants)]
    ex = [None if x is None else ember.tensor(x, device=device, requires_grad=w) for x, w in zip(inputs, wants)]
    tout = [o for o in _flat(call(tm, *tx)) if o is not None]
    eout = [o for o in _flat(call(em, *ex)) if o is not None]
    assert len(tout) == len(eout), (len(tout), len(eout))
    fwd = 0.0
    for i, (a, b) in enumerate(zip(eout, tout)):
        assert tuple(a.shape) == tuple(b.shape), (i, a.shape, b.shape)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=atol, rtol=atol, err_msg=f"output {i}")
        fwd = max(fwd, float(np.abs(a.numpy() - b.detach().numpy()).max(initial=0)))
    if not grads:
        return fwd, 0.0
    rng = np.random.default_rng(seed)
    tl, el = 0, 0
    for a, b in zip(eout, tout):
        if not b.dtype.is_floating_point or not b.requires_grad:
            continue
        r = rng.standard_normal(tuple(b.shape)).astype(np.float32)
        tl = tl + (b * torch.tensor(r)).sum()
        el = el + (a * ember.tensor(r, device=device)).sum()
    tl.backward()
    el.backward()
    bwd = 0.0
    pairs = [(f"input {i}", e.grad, t.grad) for i, (e, t) in enumerate(zip(ex, tx)) if t is not None and t.requires_grad]
    tp = dict(tm.named_parameters())
    pairs += [(k, p.grad, tp[k].grad) for k, p in em.named_parameters()]
    for name, g, tg in pairs:
        if tg is None:
            assert g is None or not np.any(g.numpy()), name
            continue
        assert g is not None, f"no gradient for {name}"
        np.testing.assert_allclose(g.numpy(), tg.numpy(), atol=grad_atol, rtol=grad_atol, err_msg=name)
        bwd = max(bwd, float(np.abs(g.numpy() - tg.numpy()).max(initial=0)))
    return fwd, bwd
