"""ONNX control flow: If, Loop, Scan, with subgraphs run by the session (they see the outer scope)."""
from __future__ import annotations

import numpy as np

from .. import ops_movement as M
from .guard import iterations
from .registry import op
from .values import host
from .wire import OnnxFormatError


@op("If")
def _if(ctx, ins, at):
    branch = at.graph("then_branch") if bool(host(ins[0]).reshape(-1)[0]) else at.graph("else_branch")
    return ctx.run_graph(branch, {}, ctx.scope)


def _body_inputs(body):
    return [v.name for v in body.input]


def _counted(body) -> bool:
    """Does the body hand its condition back unchanged (a for loop: it runs exactly its trip count)? Exports
    of while loops carry a trip count of 2^63-1 and a computed condition: those are bounded as they run."""
    if len(body.input) < 2 or not body.output:
        return False
    cond_in, cond_out = body.input[1].name, body.output[0].name
    if cond_out == cond_in:
        return True
    made = next((n for n in body.node if cond_out in n.output), None)
    if made is None:
        return False
    if made.op_type == "Identity" and list(made.input) == [cond_in]:
        return True
    if made.op_type == "Constant":  # a constant true
        for a in made.attribute:
            if a.name == "value" and a.t is not None:
                from .tensor_data import to_numpy
                try:
                    return bool(np.asarray(to_numpy(a.t, "", None, "Loop condition")).reshape(-1)[0])
                except Exception:  # noqa: BLE001  (a malformed constant: decided as the loop runs)
                    return False
    return False


@op("Loop")
def _loop(ctx, ins, at):
    """Loop(M, cond, v...): the body maps (i, cond, v...) -> (cond, v..., scan outputs...)."""
    body = at.graph("body")
    trip = int(host(ins[0]).reshape(-1)[0]) if len(ins) > 0 and ins[0] is not None else None
    cond = bool(host(ins[1]).reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else True
    if cond and _counted(body):  # a for loop of a known count: refused before it runs
        if trip is None:
            raise OnnxFormatError(f"ember: {at.where}: node {at.node.name or 'Loop'!r} (Loop) has no trip count "
                                  "and its body hands the condition back unchanged: it would never stop")
        iterations(at, trip)
    carried = list(ins[2:])
    names = _body_inputs(body)
    n_carried = len(carried)
    scans = None
    i = 0
    while cond and (trip is None or i < trip):
        iterations(at, i + 1)
        feeds = dict(zip(names, [ctx.const(np.array(i, np.int64)), ctx.const(np.array(cond))] + carried))
        outs = ctx.run_graph(body, feeds, ctx.scope)
        cond = bool(host(outs[0]).reshape(-1)[0])
        carried = list(outs[1:1 + n_carried])
        step = outs[1 + n_carried:]
        scans = [[s] for s in step] if scans is None else [acc + [s] for acc, s in zip(scans, step)]
        i += 1
    n_scan = len(at.node.output) - n_carried
    if scans is None:  # no iteration ran: scan outputs are empty along the new axis
        scans = [[] for _ in range(n_scan)]
    stacked = [M.stack(s, 0) if s else ctx.const(np.zeros((0,), np.float32)) for s in scans]
    return carried + stacked


@op("Scan", since=9)
def _scan(ctx, ins, at):
    """Scan(states..., scan inputs...): the body maps (states..., slices...) -> (states..., outputs...)."""
    body = at.graph("body")
    n_in = at.i("num_scan_inputs")
    states, xs = list(ins[:len(ins) - n_in]), list(ins[len(ins) - n_in:])
    in_axes = [a % x.ndim for a, x in zip(at.ints("scan_input_axes", [0] * n_in), xs)]
    in_dirs = at.ints("scan_input_directions", [0] * n_in)
    length = xs[0].shape[in_axes[0]] if xs else 0
    names = _body_inputs(body)
    n_out = len(at.node.output) - len(states)
    outs_acc = [[] for _ in range(n_out)]
    for t in range(length):
        slices = [M.squeeze(M.narrow(x, a, length - 1 - t if d else t, 1), a) for x, a, d in zip(xs, in_axes, in_dirs)]
        outs = ctx.run_graph(body, dict(zip(names, states + slices)), ctx.scope)
        states = list(outs[:len(states)])
        for acc, o in zip(outs_acc, outs[len(states):]):
            acc.append(o)
    out_axes = at.ints("scan_output_axes", [0] * n_out)
    out_dirs = at.ints("scan_output_directions", [0] * n_out)
    stacked = []
    for acc, a, d in zip(outs_acc, out_axes, out_dirs):
        if d:
            acc = acc[::-1]
        y = M.stack(acc, 0)
        a = a % y.ndim
        if a:
            y = M.movedim(y, 0, a)
        stacked.append(y)
    return states + stacked


@op("Optional", since=15)
def _optional(ctx, ins, at):
    return ins[0] if ins else None


@op("OptionalHasElement", since=15)
def _optional_has(ctx, ins, at):
    return ctx.const(np.array(bool(ins) and ins[0] is not None))


@op("OptionalGetElement", since=15)
def _optional_get(ctx, ins, at):
    if not ins or ins[0] is None:
        raise ValueError(f"ember: {ctx.where}: OptionalGetElement of an empty optional")
    return ins[0]


@op("Scan", since=8)
def _scan8(ctx, ins, at):
    """Scan-8: a leading batch axis on every state and scan input (scanned along axis 1), and an optional
    sequence_lens first input (every row runs the full length when it is omitted)."""
    if ins[0] is not None:
        lens = host(ins[0]).reshape(-1)
        if (lens != lens[0]).any():
            raise ValueError(f"ember: {ctx.where}: Scan-8 with unequal sequence_lens is not supported")
    rest = list(ins[1:])
    n_in = at.i("num_scan_inputs")
    per_batch = []
    for b in range(rest[0].shape[0]):
        row = [M.squeeze(M.narrow(x, 0, b, 1), 0) for x in rest]
        per_batch.append(_scan(ctx, row, _Scan9Attrs(at, n_in)))
    return [M.stack([outs[k] for outs in per_batch], 0) for k in range(len(per_batch[0]))]


class _Scan9Attrs:
    """Scan-8's attributes read as Scan-9's (directions only; every axis is the sequence axis 0)."""

    def __init__(self, at, n_in):
        self._at, self.node = at, at.node
        self._dirs = at.ints("directions", [0] * n_in)

    def graph(self, name):
        return self._at.graph(name)

    def i(self, name, default=None):
        return self._at.i(name, default)

    def ints(self, name, default=None):
        return self._dirs if name == "scan_input_directions" else default
