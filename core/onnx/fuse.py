"""Load-time rewrites of common operator patterns into one ember call (the backend's fused kernel where it
has one): SiLU (every convolution of a YOLOv8) and erf GELU (every feed-forward of a BERT-style export).

A plan is a list of (node, fn, attrs, ctx); a fused pattern becomes one step on a `_Renamed` node whose
inputs are the pattern's input and whose outputs are its last node's. Every intermediate value must be
used once, by the pattern, and be no graph output, or the rewrite would lose it.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops_elementwise as E
from ..nn.functional import linear, linear_act, scaled_dot_product_attention
from ..ops_elementwise import gelu, silu
from ..ops_movement import transpose
from .plan import free_names

_DEFAULT = ("", "ai.onnx")


class _Renamed:
    """A node read through other inputs (a fused pattern's), and written to other outputs where given: everything
    else is the original's."""

    def __init__(self, node, inputs, outputs=None):
        self._node, self.input = node, inputs
        self.output = node.output if outputs is None else outputs

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
            for a in node.attribute:  # what its subgraphs read counts as read by the node (never fused away)
                for sub in ([a.g] if a.g is not None else []) + list(a.graphs):
                    for n in free_names(sub):
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


def fuse_conv_act(plan, graph):
    """Conv, then Relu or SiLU (a fused silu step) as its output's only reader: one conv with the activation (the
    backend's conv_bias_act epilogue: Silero's encoder, YOLOv8's every Conv-BatchNorm-SiLU)."""
    from .ops_nn import conv_act_step
    g = _Graph(plan, graph)
    act_of = {}  # id(reader node) -> "relu" | "silu"
    for node, fn, attrs, ctx in plan:
        if fn is _silu:
            act_of[id(node)] = "silu"
        elif node.op_type == "Relu" and node.domain in _DEFAULT and len(node.input) == 1:
            act_of[id(node)] = "relu"
    fused, drop = [], set()
    for node, fn, attrs, ctx in plan:
        if node.op_type == "Conv" and node.domain in _DEFAULT and len(node.output) == 1 \
                and node.output[0] not in g.outputs:
            readers = g.uses.get(node.output[0], [])
            act = act_of.get(id(readers[0])) if len(readers) == 1 else None
            if act is not None and list(readers[0].input) == [node.output[0]]:
                drop.add(id(readers[0]))
                fused.append((_Renamed(node, list(node.input), list(readers[0].output)), conv_act_step(act), attrs,
                              ctx))
                continue
        fused.append((node, fn, attrs, ctx))
    return [p for p in fused if id(p[0]) not in drop]


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


# ============================================================================ MatMul + bias, attention, duplicates

def _is_const_vector(consts, name, n):
    t = consts.get(name)
    return t is not None and t.dtype.is_float and tuple(t.shape) == (n,)


def fuse_linear(plan, graph, consts):
    """MatMul(x, W) then Add(·, b), W a constant (K, N) and b a constant (N,) read nowhere else in between: one
    linear (the backend's matmul with the bias added in place; onnxruntime's MatMulAdd fusion); with a fused erf
    GELU (fuse_gelu's) as its only reader, one linear_act (the activation in the product's epilogue)."""
    g = _Graph(plan, graph)
    gelus = {id(node) for node, fn, *_ in plan if fn is _gelu}
    replaced, drop, acts = {}, set(), {}
    for node, *_ in plan:
        if node.op_type != "MatMul" or node.domain not in _DEFAULT or len(node.input) != 2:
            continue
        w = consts.get(node.input[1])
        if w is None or w.ndim != 2 or not w.dtype.is_float or node.input[0] in consts:
            continue
        add = g.only_reader(node.output[0], "Add")
        if add is None:
            continue
        b = add.input[1] if add.input[0] == node.output[0] else add.input[0]
        if not _is_const_vector(consts, b, w.shape[1]) or consts[b].dtype is not w.dtype:
            continue
        drop.add(id(node))
        replaced[id(add)] = [node.input[0], node.input[1], b]
        readers = g.uses.get(add.output[0], [])
        if len(readers) == 1 and id(readers[0]) in gelus and add.output[0] not in g.outputs:
            drop.add(id(readers[0]))
            acts[id(add)] = list(readers[0].output)
    out = []
    for n, fn, at, ctx in plan:
        if id(n) in drop:
            continue
        if id(n) in acts:
            out.append((_Renamed(n, replaced[id(n)], acts[id(n)]), _linear_gelu, at, ctx))
        elif id(n) in replaced:
            out.append((_Renamed(n, replaced[id(n)]), _linear, at, ctx))
        else:
            out.append((n, fn, at, ctx))
    return out


def _linear(ctx, ins, at):
    x, w, b = ins
    return linear(x, transpose(w, 0, 1), b)


def _linear_gelu(ctx, ins, at):
    x, w, b = ins
    return linear_act(x, transpose(w, 0, 1), b, "gelu")


def _scalar(consts, name):
    t = consts.get(name)
    if t is None or t.numel() != 1 or not t.dtype.is_float:
        return None
    return float(np.asarray(t.numpy()).reshape(-1)[0])


def _const_factor(consts, node):
    """(c, x) for a two-input Mul by a scalar constant c (on either side) or a Div of x by one; (None, None)
    where neither input is one."""
    x, y = node.input
    c = _scalar(consts, y)
    if c is not None:
        return c, x
    c = _scalar(consts, x) if node.op_type == "Mul" else None
    return (c, y) if c is not None else (None, None)


def fuse_attention(plan, graph, consts):
    """softmax(MatMul(q [* a constant], kᵀ [* a constant]) [* or / a constant] [+ mask], last axis) [NaN -> 0] then
    MatMul(·, v), every intermediate read only by the pattern: one scaled_dot_product_attention (the backend's fused
    attention: the (L, S) scores are made once, not once per op; onnxruntime's AttentionFusion), the constants
    one scale (q and kᵀ are not each multiplied: two passes a layer). The mask may be any tensor
    that broadcasts; the optional Where(IsNaN(p), 0, p) that exporters add after the softmax becomes NaN -> 0 on
    the output, which is what it gives (a fully masked row: all-NaN probabilities, zeros out)."""
    g = _Graph(plan, graph)
    out, drop = {}, set()
    for sm, _, at, ctx in plan:
        if sm.op_type != "Softmax" or sm.domain not in _DEFAULT or len(sm.input) != 1:
            continue
        axis_attr = at.i("axis")
        if not (axis_attr == -1 or (axis_attr is None and ctx.opset >= 13)):
            continue
        nodes = [sm]
        # back from the softmax: [Add mask] <- [Mul/Div scale] <- MatMul(q, kT)
        x, mask, scale = sm.input[0], None, 1.0
        add = g.made_by(x, "Add")
        if add is not None and g.uses.get(x) == [sm] and x not in g.outputs:
            a, b = add.input
            inner = a if g.made_by(a, "MatMul") or g.made_by(a, "Mul") or g.made_by(a, "Div") else b
            mask = b if inner == a else a
            nodes.append(add)
            x = inner
        sc = g.made_by(x, "Mul") or g.made_by(x, "Div")
        if sc is not None and g.uses.get(x) == [nodes[-1]] and x not in g.outputs and len(sc.input) == 2:
            c, other = _const_factor(consts, sc)
            if c is not None and c != 0:
                scale = 1.0 / c if sc.op_type == "Div" else c
                x = other
                nodes.append(sc)
        qk = g.made_by(x, "MatMul")
        if qk is None or g.uses.get(x) != [nodes[-1]] or x in g.outputs:
            continue
        nodes.append(qk)
        # MatMul(Mul(q, a), Mul(kT, b)): torch's exporter scales q and kT each by sqrt(scale); a and b join the scale
        q_name, k_name = qk.input[0], qk.input[1]
        for i, name in enumerate((q_name, k_name)):
            m = g.made_by(name, "Mul")
            if m is None or g.uses.get(name) != [qk] or name in g.outputs or len(m.input) != 2:
                continue
            c, other = _const_factor(consts, m)
            if c is not None and math.isfinite(c):
                scale *= c
                nodes.append(m)
                q_name, k_name = (other, k_name) if i == 0 else (q_name, other)
        # forward: [Where(IsNaN(p), 0, p)] -> MatMul(p, v)
        p, nan_zero = sm.output[0], False
        readers = g.uses.get(p, [])
        if p in g.outputs:
            continue
        if len(readers) == 2 and {r.op_type for r in readers} == {"IsNaN", "Where"}:
            isnan = next(r for r in readers if r.op_type == "IsNaN")
            where = next(r for r in readers if r.op_type == "Where")
            if (list(where.input) != [isnan.output[0], where.input[1], p] or _scalar(consts, where.input[1]) != 0.0
                    or g.uses.get(isnan.output[0]) != [where] or isnan.output[0] in g.outputs):
                continue
            nodes += [isnan, where]
            p, nan_zero = where.output[0], True
            readers = g.uses.get(p, [])
            if p in g.outputs:
                continue
        if len(readers) != 1 or readers[0].op_type != "MatMul" or readers[0].domain not in _DEFAULT \
                or readers[0].input[0] != p:
            continue
        pv = readers[0]
        if any(id(n) in drop for n in nodes + [pv]):
            continue
        drop.update(id(n) for n in nodes)
        out[id(pv)] = ([q_name, k_name, pv.input[1]] + ([mask] if mask else []), scale, nan_zero)
    fused = []
    for n, fn, at, ctx in plan:
        if id(n) in drop:
            continue
        if id(n) in out:
            ins, scale, nan_zero = out[id(n)]
            fused.append((_Renamed(n, ins), _attention_step(scale, nan_zero), at, ctx))
        else:
            fused.append((n, fn, at, ctx))
    return fused


def _attention_step(scale, nan_zero):
    def run(ctx, ins, at):
        q, kt, v = ins[:3]
        mask = ins[3] if len(ins) > 3 else None
        if mask is not None and mask.dtype is not q.dtype and mask.dtype.is_float:
            mask = mask.to(q.dtype)
        y = scaled_dot_product_attention(q, transpose(kt, -1, -2), v, attn_mask=mask, scale=scale)
        return E.where(E.isnan(y), 0.0, y) if nan_zero else y
    return run


def _attr_key(a):
    if a.g is not None or a.graphs or a.t is not None or a.tensors or a.sparse_tensor is not None:
        return None
    return (a.name, a.type, a.f, a.i, a.s, tuple(a.floats), tuple(a.ints), tuple(a.strings))


def dedupe(plan, graph, random_ops):
    """Common subexpressions: a node of the default domain whose operator, inputs and attributes equal an earlier
    one's is dropped and its outputs read the earlier node's (exports repeat the same mask arithmetic in every
    layer; onnxruntime's CommonSubexpressionElimination)."""
    seen, alias, kept = {}, {}, []
    outputs = {o.name for o in graph.output}
    for step in plan:
        node = step[0]
        ins = [alias.get(n, n) for n in node.input]
        if ins != list(node.input):
            node = _Renamed(node, ins)
            step = (node,) + tuple(step[1:])
        attrs = [_attr_key(a) for a in node.attribute]
        if node.domain not in _DEFAULT or node.op_type in random_ops or None in attrs \
                or any(o in outputs for o in node.output):
            kept.append(step)
            continue
        key = (node.op_type, tuple(ins), tuple(sorted(attrs)), len(node.output))
        first = seen.get(key)
        if first is None:
            seen[key] = node
            kept.append(step)
            continue
        for mine, theirs in zip(node.output, first.output):
            if mine:
                alias[mine] = theirs
    return kept
