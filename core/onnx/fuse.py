"""Load-time rewrites of common operator patterns into one ember call (the backend's fused kernel where it
has one): SiLU (every convolution of a YOLOv8) and erf GELU (every feed-forward of a BERT-style export).

A plan is a list of (node, fn, attrs, ctx); a fused pattern becomes one step on a `_Renamed` node whose
inputs are the pattern's input and whose outputs are its last node's. Every intermediate value must be
used once, by the pattern, and be no graph output, or the rewrite would lose it.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops_elementwise import gelu, silu

_DEFAULT = ("", "ai.onnx")


class _Renamed:
    """A node read through other inputs (a fused pattern's): everything else is the original's."""

    def __init__(self, node, inputs):
        self._node, self.input = node, inputs

    def __getattr__(self, name):
        return getattr(self._node, name)


def _silu(ctx, ins, at):
    return silu(ins[0])


def _gelu(ctx, ins, at):
    return gelu(ins[0])


class _Graph:
    """Who makes and who reads each value of one plan."""

    def __init__(self, plan, graph):
        self.uses, self.maker = {}, {}
        for step in plan:
            node = step[0]
            for n in node.input:
                self.uses.setdefault(n, []).append(node)
            for n in node.output:
                self.maker[n] = node
        self.outputs = {o.name for o in graph.output}

    def only_reader(self, name, op_type):
        """The one node reading `name` when it is an `op_type` of the default domain and `name` is no
        graph output; else None."""
        readers = self.uses.get(name, [])
        if len(readers) != 1 or name in self.outputs:
            return None
        r = readers[0]
        return r if r.op_type == op_type and r.domain in _DEFAULT and len(r.input) == 2 else None

    def made_by(self, name, op_type):
        m = self.maker.get(name)
        return m if m is not None and m.op_type == op_type and m.domain in _DEFAULT else None


def fuse_silu(plan, graph):
    """Sigmoid(x) -> Mul(x, s), s used nowhere else: one silu."""
    g = _Graph(plan, graph)
    fused, drop = [], set()
    for node, fn, attrs, ctx in plan:
        if node.op_type == "Mul" and node.domain in _DEFAULT and len(node.input) == 2:
            for s, x in (node.input, reversed(node.input)):
                sig = g.made_by(s, "Sigmoid")
                if sig is not None and list(sig.input) == [x] and g.only_reader(s, "Mul") is node:
                    drop.add(id(sig))
                    fused.append((_Renamed(node, [x]), _silu, attrs, ctx))
                    break
            else:
                fused.append((node, fn, attrs, ctx))
            continue
        fused.append((node, fn, attrs, ctx))
    return [p for p in fused if id(getattr(p[0], "_node", p[0])) not in drop]


def fuse_gelu(plan, graph, consts):
    """x * 0.5 * (1 + Erf(x / sqrt 2)), in the associations exporters write (torch's erf GELU), with
    x / sqrt 2 as Div or as Mul by 1 / sqrt 2: one gelu. `consts` holds the load-time values."""
    g = _Graph(plan, graph)

    def scalar(name, want):
        t = consts.get(name)
        if t is None or t.numel() != 1 or not t.dtype.is_float:
            return False
        return abs(float(np.asarray(t.numpy()).reshape(-1)[0]) - want) <= 1e-6 * max(1.0, abs(want))

    def other(node, name):
        a, b = node.input
        return b if a == name else a

    replaced, drop = {}, set()
    for erf, *_ in plan:
        if erf.op_type != "Erf" or erf.domain not in _DEFAULT or len(erf.input) != 1:
            continue
        scale = g.made_by(erf.input[0], "Div") or g.made_by(erf.input[0], "Mul")
        if scale is None or len(scale.input) != 2 or g.uses.get(erf.input[0], []) != [erf] \
                or erf.input[0] in g.outputs:
            continue
        x, c = scale.input
        if not scalar(c, math.sqrt(2) if scale.op_type == "Div" else 1 / math.sqrt(2)):
            continue
        add = g.only_reader(erf.output[0], "Add")
        if add is None or not scalar(other(add, erf.output[0]), 1.0):
            continue
        m1 = g.only_reader(add.output[0], "Mul")
        if m1 is None:
            continue
        o1 = other(m1, add.output[0])
        if o1 == x:                                   # (x * (1 + erf)) * 0.5
            last = g.only_reader(m1.output[0], "Mul")
            ok = last is not None and scalar(other(last, m1.output[0]), 0.5)
            extra = [m1]
        elif scalar(o1, 0.5):                         # x * (0.5 * (1 + erf))
            last = g.only_reader(m1.output[0], "Mul")
            ok = last is not None and other(last, m1.output[0]) == x
            extra = [m1]
        else:                                         # (x * 0.5) * (1 + erf)
            half = g.made_by(o1, "Mul")
            last, extra = m1, []
            ok = half is not None and g.only_reader(o1, "Mul") is m1 and len(half.input) == 2 \
                and x in half.input and scalar(other(half, x), 0.5)
            if ok:
                extra = [half]
        if not ok:
            continue
        for n in [scale, erf, add] + extra:
            drop.add(id(n))
        replaced[id(last)] = x
    out = []
    for node, fn, attrs, ctx in plan:
        if id(node) in drop:
            continue
        if id(node) in replaced:
            out.append((_Renamed(node, [replaced[id(node)]]), _gelu, attrs, ctx))
        else:
            out.append((node, fn, attrs, ctx))
    return out
