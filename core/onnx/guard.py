"""Bounds on what a model's data can make an operator allocate or repeat.

Most outputs are no bigger than their inputs, which the file bounds. These are not: ConstantOfShape,
Expand, Tile, Range, Pad, Resize, OneHot, StringSplit, the random generators, AffineGrid, Col2Im and
DFT size their result from numbers in the graph, and broadcasting multiplies its inputs' sizes; a few
bytes of model can ask for terabytes, or a Loop for 2^63 iterations. Each such operator asks here first
(budget.max_tensor_bytes, budget.max_loop_iterations), so the answer is an ember LimitError naming the
model, the node and the limit instead of a MemoryError, an OOM kill or a run that never ends.
"""
from __future__ import annotations

import math

from ..limits import budget, check
from .wire import OnnxFormatError


def _node(at):
    n = at.node
    return f"node {n.name or n.op_type!r} ({n.op_type})"


def sized(at, field, shape, itemsize=4):
    """`shape` (ints) of an output that `field` of node `at.node` decides: refused when a dimension is
    negative or the tensor would take more than budget.max_tensor_bytes. Returns the shape as ints."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise OnnxFormatError(f"ember: {at.where}: {_node(at)}: {field} gives the negative shape {dims}")
    check(at.where, f"{_node(at)}: {field} (output {dims})", math.prod(dims) * int(itemsize),
          "max_tensor_bytes", " bytes")
    return dims


def node_error(at, msg):
    """An operator's refusal of what the model gives it, as ember's error naming the model and the node."""
    return OnnxFormatError(f"ember: {at.where}: {_node(at)}: {msg}")


def iterations(at, n):
    """A Loop's iteration count so far (or its trip count): at most budget.max_loop_iterations."""
    check(at.where, f"{_node(at)}: iterations", n, "max_loop_iterations")


def out_of_memory(where, node, e):
    """A MemoryError an operator raised anyway (an allocation past what the machine has), as ember's error."""
    return OnnxFormatError(f"ember: {where}: node {node.name or node.op_type!r} ({node.op_type}) ran out of memory "
                           f"({e}); a tensor this model asks for does not fit (see ember.limits.budget.max_tensor_bytes)")


# operators whose output broadcasts their inputs' shapes (checked by the planned executor when they differ)
BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "Equal", "Less", "Greater",
             "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr",
             "BitwiseXor", "PRelu", "MatMul"}


def broadcast_check(at, ins):
    """Before a broadcasting operator runs: its output's size from its inputs' shapes (MatMul: the batch
    dims broadcast, times rows times columns), against budget.max_tensor_bytes. Runs on every such node,
    so the common case returns after a product of sizes: the output has at most that many elements."""
    shapes = [v.shape for v in ins if v is not None and hasattr(v, "shape")]
    limit = budget.max_tensor_bytes
    if len(shapes) == 2:  # (most nodes: two inputs of one shape, or one a scalar: the output has the other's size)
        a, b = shapes
        same = a if a == b or not b else b if not a else None
        if same is not None and math.prod(same) * 4 <= limit and at.node.op_type != "MatMul":
            return
    if at.memo.get("broadcast") == (shapes, limit):  # (these shapes passed on this node's last run, this budget)
        return
    seen = shapes
    prod = math.prod
    bound = prod(prod(s) for s in shapes)
    matmul = at.node.op_type == "MatMul"
    if (bound * 4 <= budget.max_tensor_bytes and (bound or not matmul)) or len(shapes) < 2:
        return
    if matmul:  # (a zero inner size leaves the bound at 0 however big the output)
        a, b = shapes[0], shapes[1]
        if len(a) < 2 or len(b) < 2:
            return  # a vector side: the output is no bigger than the other input
        core, shapes = [a[-2], b[-1]], [a[:-2], b[:-2]]
    else:
        core = []
    rank = max(len(s) for s in shapes)
    dims = [max(s[len(s) - rank + i] if len(s) - rank + i >= 0 else 1 for s in shapes) for i in range(rank)]
    if prod(dims) * prod(core) * 4 > budget.max_tensor_bytes:
        sized(at, "broadcast inputs " + " x ".join(str(list(s)) for s in shapes), dims + core)
    at.memo["broadcast"] = (seen, limit)
