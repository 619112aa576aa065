"""Gradient checkpointing (torch.utils.checkpoint's idea): a module's forward keeps no graph; backward runs it
again with gradients on and back-propagates through that fresh graph. Memory for activations falls from every
layer's at once to one layer's at a time (plus each layer's input), for one more forward per step.

    y = checkpoint(block, x, rope, mask, None, i)     # inside a model's layer loop while training

The forward records its graph as usual and then drops it, so the output is bit-identical to the plain call's
(the no-gradient path may pick fused kernels whose rounding differs). Only Tensor arguments are inputs of the
recorded node (the others pass through as they are); the module's own parameters get their gradients when the
recomputed graph is back-propagated. The random generator is put back to its state at the forward for the
recompute (dropout draws the same mask) and restored after.
"""
from __future__ import annotations

from .. import autograd as A
from ..autograd import TensorBase
from ..tensor import default_generator
from .module import Module


def checkpoint(module: Module, *args):
    """module(*args) (one Tensor out) without keeping its activations for backward; see the module docstring."""
    trainable = [p for p in module.parameters() if p.requires_grad]
    inputs = [a for a in args if isinstance(a, TensorBase)]
    if not A.is_grad_enabled() or not (trainable or any(t.requires_grad for t in inputs)):
        return module(*args)
    rng = default_generator().bit_generator.state
    out = module(*args)
    if not isinstance(out, TensorBase):
        raise TypeError(f"ember: checkpoint needs a module that returns one Tensor; "
                        f"{type(module).__name__} returned {type(out).__name__}")
    result = out.detach()  # the graph under `out` goes with it: only the inputs stay alive, in the node
    del out
    tensor_at = [i for i, a in enumerate(args) if isinstance(a, TensorBase)]

    def backward(node, g):
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in node.inputs]
        call = list(args)
        for i, t in zip(tensor_at, leaves):
            call[i] = t
        after = default_generator().bit_generator.state
        default_generator().bit_generator.state = rng
        try:
            with A.enable_grad():
                again = module(*call)
        finally:
            default_generator().bit_generator.state = after
        if again.requires_grad:
            A.backward(again, g)
        return tuple(t.grad if t.requires_grad else None for t in leaves)

    result.requires_grad = True
    # leaves by identity (their .grad is the result), the rest as snapshots (safe from later in-place rebinding)
    result._ctx = A.Node("custom", tuple(t if t._ctx is None and t.requires_grad else A.snapshot(t)
                                         for t in inputs), backward)
    return result
