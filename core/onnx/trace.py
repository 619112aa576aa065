"""Replaying a graph's run: the steps one run took, with its host values bound in, kept for the next run fed the
same shapes.

The planned executor (plan.run) walks every step each run: it looks host steps up in their shape caches, picks If
branches, reads and writes each value by name and drops it after its last reader. For a small model called many
times (Silero VAD's 512-sample chunk: ~80 steps, ~40 of them shape work) that walk costs as much as the
operators. A run fed the same input shapes and dtypes as an earlier one takes the same path wherever the shapes
its Shape/Size steps read and the conditions its If steps test come out the same, and then every host value is the
same (host steps compute from shapes and constants alone). So a run fed the shapes of the run before it is recorded
(`Recorder`, called from plan.run; the session's policy) and later runs of those shapes replay the recording
(`Trace.replay`, a Python function written for it): only the operator steps, each reading numbered slots
(constants, host values and feeds bound once), their dead values cleared after the last reader, with a guard
wherever the recorded path read a shape or a condition. A guard that fails (a shape that
depends on the data, as after NonZero, or an If whose condition changed) abandons the replay, and the session
runs the planned executor from the start: steps compute from their inputs alone, so nothing the abandoned
replay did is seen.
"""
from __future__ import annotations

import numpy as np

from ..ops_movement import reshape
from .guard import broadcast_check
from .values import host


class Stale(Exception):
    """A replay's guard failed: this run leaves the recorded path (plan.run takes it from the start)."""


_SHAPE, _COND, _STEP = 0, 1, 2


class Recorder:
    """What plan.run reports while it runs a graph once: each operator step (its inputs' sources: a slot another
    recorded step or a feed filled, or a constant), each shape a Shape/Size step read of a computed value and each
    condition an inlined If tested on one."""

    def __init__(self, feeds):
        self.origin = {n: i for i, n in enumerate(feeds)}  # value name -> the slot holding it this run
        self.slots = len(self.origin)
        self.consts = []  # [(slot, value)]: constants and host values the steps read
        self.items = []   # (_STEP, st, srcs, dsts) | (_SHAPE, slot, shape) | (_COND, slot, branch)
        self.broken = False  # a step a replay cannot redo ran: a subgraph's, reading the environment by name
        self.constant = set()  # the constants' slots
        self.reshapes = {}     # item index -> (input shape, output shape) of a reshape (ran)

    def _const(self, v) -> int:
        self.constant.add(self.slots)
        self.consts.append((self.slots, v))
        self.slots += 1
        return self.slots - 1

    def shape(self, name, key):
        slot = self.origin.get(name)
        if slot is not None:  # (a constant's shape never changes: no guard)
            self.items.append((_SHAPE, slot, key))

    def cond(self, name, branch):
        slot = self.origin.get(name)
        if slot is not None:
            self.items.append((_COND, slot, branch))

    def alias(self, name, branch_name):
        """An inlined If's output: the value of its branch's output (a slot, or a constant left unrecorded)."""
        slot = self.origin.get(branch_name)
        if slot is not None:
            self.origin[name] = slot

    def step(self, st, ins):
        """Operator step st about to run on `ins` (the values it reads, host values at its host indices)."""
        if st.scoped:
            self.broken = True
        if st.identity:  # its output is its input's value: no step, the same slot (or constant)
            slot = self.origin.get(st.ins[0])
            if slot is not None:
                self.origin[st.outs[0]] = slot
            return
        srcs = []
        for i, n in enumerate(st.ins):
            slot = self.origin.get(n) if n and i not in st.host_idx else None
            srcs.append(self._const(ins[i]) if slot is None else slot)
        dsts = []
        for n in st.outs:
            if n:
                self.origin[n] = self.slots
                dsts.append(self.slots)
                self.slots += 1
            else:
                dsts.append(-1)
        self.items.append((_STEP, st, tuple(srcs), tuple(dsts)))

    def ran(self, st, ins, out):
        """Operator step st, just recorded, gave `out`. A Cast that handed back its input (of the type it casts to)
        is dropped, its output read from its input's slot (or the same constant). A reshape (Reshape, Squeeze,
        Unsqueeze, Flatten) whose other inputs are constants keeps its input's and output's shapes: the replay
        reshapes an input of that shape straight to that output shape."""
        if st.cast and out is ins[0]:
            self.items.pop()
            slot = self.origin.get(st.ins[0])
            if slot is None:
                self.origin.pop(st.outs[0], None)  # (its readers read the constant)
            else:
                self.origin[st.outs[0]] = slot
        elif st.reshape and self.items and self.items[-1][1] is st and hasattr(out, "shape") and \
                hasattr(ins[0], "shape"):
            srcs = self.items[-1][2]
            if all(s in self.constant for s in srcs[1:]):
                self.reshapes[len(self.items) - 1] = (tuple(ins[0].shape), tuple(out.shape))

    def trace(self, feeds, outputs, env) -> "Trace | None":
        """The recorded run as a Trace returning `outputs` (a constant where no recorded step made one)."""
        if self.broken:
            return None
        outs = [self.origin[n] if n in self.origin else self._const(env[n]) for n in outputs]
        return Trace(self, feeds, outs)


class Trace:
    """A recorded run, replayable: `replay(feeds)` -> the outputs' values, or Stale.

    The replay is a Python function written for the recording (compiled once): each step a call on local variables,
    so a step costs its call and nothing of a loop's bookkeeping (Silero VAD's 36 steps: ~0.1 against ~0.6 us a
    step walking a list of them). Its source names values by number alone (v<slot> a step's, k<slot> a constant's,
    f<k> / c<k> / a<k> step k's function, context and attributes, g<k> guard k's shape or reshape k's input shape,
    h<k> reshape k's output shape): nothing of the model's text is in it; the constants and steps are in the
    namespace it runs in."""

    def __init__(self, rec, feeds, outs):
        self.feeds, self.outs = tuple(feeds), tuple(outs)
        consts = rec.constant
        # each slot's last reader: the item after which it is cleared (never an output's, a constant's)
        last = {}
        for k, item in enumerate(rec.items):
            if item[0] == _STEP:
                for s in item[2]:
                    last[s] = k
            else:
                last[item[1]] = k
        keep = set(self.outs) | consts
        frees = [[] for _ in rec.items]
        for s, k in last.items():
            if s not in keep:
                frees[k].append(s)
        for k, item in enumerate(rec.items):  # outputs no step reads (an LSTM's unused Y): cleared at once
            if item[0] == _STEP:
                frees[k].extend(s for s in item[3] if s >= 0 and s not in last and s not in keep)
        ns = {"Stale": Stale, "host": host, "bc": broadcast_check, "spread": _spread, "reshape": reshape,
              "nd": np.ndarray}
        ns.update((f"k{slot}", v) for slot, v in rec.consts)
        name = lambda slot: f"k{slot}" if slot in consts else f"v{slot}"  # noqa: E731
        lines = ["def replay(feeds):"]
        lines += [f"    v{i} = feeds[n{i}]" for i in range(len(self.feeds))]
        ns.update((f"n{i}", n) for i, n in enumerate(self.feeds))
        for k, (item, free) in enumerate(zip(rec.items, frees)):
            if item[0] == _STEP:
                st, srcs, dsts = item[1], item[2], item[3]
                ns[f"f{k}"], ns[f"c{k}"], ns[f"a{k}"] = st.fn, st.ctx, st.attrs
                shapes = rec.reshapes.get(k)
                if shapes is not None:  # (the shape this input had: the output's shape, a view or copy of it;
                    ns[f"g{k}"], ns[f"h{k}"] = shapes  # numpy's reshape of a host array, as the reshape op's)
                    x = name(srcs[0])
                    lines.append(f"    if {x}.shape == g{k}:\n"
                                 f"        v{dsts[0]} = {x}._new({x}._data.reshape(h{k})) if {x}._data.__class__ is nd "
                                 f"else reshape({x}, *h{k})\n"
                                 f"    else:\n        v{dsts[0]} = f{k}(c{k}, [{', '.join(name(s) for s in srcs)}], a{k})")
                    lines += [f"    v{s} = None" for s in free]
                    continue
                lines.append(f"    i = [{', '.join(name(s) for s in srcs)}]")
                if st.broadcasts:
                    lines.append(f"    bc(a{k}, i)")
                lines.append(f"    o = f{k}(c{k}, i, a{k})")
                targets = ", ".join("_" if d < 0 else f"v{d}" for d in dsts)
                # (as plan.run: a list or tuple fills the outputs in order, anything else is the first output)
                if len(dsts) > 1:
                    lines.append(f"    {targets}, = spread(o, {len(dsts)})")
                elif dsts:
                    lines.append(f"    {targets} = spread(o, 1)[0] if isinstance(o, (list, tuple)) else o")
            elif item[0] == _SHAPE:
                ns[f"g{k}"] = item[2]
                lines.append(f"    if tuple(v{item[1]}.shape) != g{k}:\n        raise Stale")
            else:
                lines.append(f"    if (0 if bool(host(v{item[1]}).reshape(-1)[0]) else 1) != {int(item[2])}:\n"
                             f"        raise Stale")
            lines += [f"    v{s} = None" for s in free]
        lines.append(f"    return [{', '.join(name(s) for s in self.outs)}]")
        exec(compile("\n".join(lines) + "\n", "<ember.onnx replay>", "exec"), ns)  # noqa: S102  (source above)
        self.replay = ns["replay"]


def _spread(outs, n):
    """A step's result as n outputs, as plan.run stores them: a list or tuple in order (outputs past its end left
    empty), anything else the first."""
    if not isinstance(outs, (list, tuple)):
        return (outs,) + (None,) * (n - 1)
    return tuple(outs[:n]) + (None,) * (n - len(outs)) if len(outs) != n else tuple(outs)
