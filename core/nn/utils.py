"""Parameter and gradient utilities with torch.nn.utils' names and rules (the module mirrors that one, so
code moving from torch finds them where it looks): gradient clipping by norm or value, and parameters as
one flat vector."""
from __future__ import annotations

import math

from ..autograd import no_grad
from ..ops_movement import cat, stack
from ..tensor import tensor


def _listed(parameters):
    from ..autograd import TensorBase
    return [parameters] if isinstance(parameters, TensorBase) else list(parameters)


@no_grad()
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
    """Scale every gradient by min(1, max_norm / (total_norm + 1e-6)), total_norm being the norm of all
    gradients together; -> total_norm (a 0-d float32 Tensor on the gradients' device), as torch."""
    grads = [p.grad for p in _listed(parameters) if p.grad is not None]
    if not grads:
        return tensor(0.0)
    norm_type = float(norm_type)
    total = get_total_norm(grads, norm_type)
    t = float(total.item())
    if error_if_nonfinite and not math.isfinite(t):
        raise RuntimeError(f"ember: the total {norm_type}-norm of the gradients is {t}; clipping would "
                           "make every gradient non-finite (set error_if_nonfinite=False to scale anyway)")
    coef = min(1.0, max_norm / (t + 1e-6)) if math.isfinite(t) else float("nan")
    if coef != 1.0:
        for p in _listed(parameters):
            if p.grad is not None:
                p.grad = p.grad * coef
    return total


@no_grad()
def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clamp every gradient element to [-clip_value, clip_value]."""
    for p in _listed(parameters):
        if p.grad is not None:
            p.grad = p.grad.clamp(-clip_value, clip_value)


def get_total_norm(tensors, norm_type: float = 2.0):
    """The norm of several tensors taken together (torch.nn.utils.get_total_norm)."""
    tensors = _listed(tensors)
    if math.isinf(norm_type):
        return stack([t.abs().amax().float() for t in tensors]).amax()
    return stack([(t.float().abs() ** norm_type).sum() for t in tensors]).sum() ** (1.0 / norm_type)


def parameters_to_vector(parameters):
    """All parameters flattened and joined, in order: one 1-D Tensor (differentiable, as torch's)."""
    return cat([p.reshape(-1) for p in _listed(parameters)])


@no_grad()
def vector_to_parameters(vec, parameters) -> None:
    """Copy consecutive slices of `vec` into the parameters (the inverse of parameters_to_vector)."""
    params = _listed(parameters)
    need = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != need:
        raise ValueError(f"ember: vector_to_parameters got a vector of shape {tuple(vec.shape)}, the "
                         f"parameters hold {need} values")
    at = 0
    for p in params:
        n = p.numel()
        p.copy_(vec[at:at + n].reshape(p.shape))
        at += n
