"""The operator table: (domain, op_type) -> implementations by the opset version they appeared in.

An implementation is `fn(ctx, inputs, attrs) -> Tensor | list`, where inputs holds one value per
node input (None for an omitted optional one) and attrs is an `Attrs`. A node runs the newest
implementation whose `since` is at most the model's opset for that domain.
"""
from __future__ import annotations

import numpy as np

from .tensor_data import to_numpy
from .wire import OnnxFormatError, numbers

OPS: dict = {}  # (domain, op_type) -> [(since, fn)] sorted by since
# (domain, op_type) -> input indices whose initializers stay on the host (the op reads them into its own form,
# as MatMulNBits packs its weight: uploading them as tensors first would only cost device memory)
HOST_INPUTS: dict = {}


def op(*names, since=1, domain="", host=()):
    def register(fn):
        for n in names:
            impls = OPS.setdefault((domain, n), [])
            impls.append((since, fn))
            impls.sort(key=lambda p: p[0])
            if host:
                HOST_INPUTS[(domain, n)] = tuple(host)
        return fn
    return register


def lookup(domain: str, op_type: str, version: int):
    """The implementation for this opset, or None."""
    best = None
    for since, fn in OPS.get((domain, op_type), ()):
        if since <= version:
            best = fn
    return best


# AttributeProto.type
FLOAT, INT, STRING, TENSOR, GRAPH, FLOATS, INTS, STRINGS, TENSORS, GRAPHS = range(1, 11)


class Attrs:
    """A node's attributes by name; getters take the default the op's opset defines."""

    def __init__(self, node, where):
        self.node, self.where = node, where
        self.by_name = {a.name: a for a in node.attribute}
        self._decoded = {}  # (getter, name) -> the attribute's value, decoded on first read (ops run often)
        # what an operator derives once from its attributes and constant inputs and reuses run to run (an LSTM's
        # reordered weights, a Conv's resolved pads); its users keep it bounded
        self.memo = {}

    def __contains__(self, name):
        return name in self.by_name

    def _get(self, name, kinds):
        a = self.by_name.get(name)
        if a is not None and a.type and a.type not in kinds:
            raise OnnxFormatError(f"ember: {self.where}: node {self.node.name or self.node.op_type!r} "
                                  f"({self.node.op_type}): attribute {name!r} has type {a.type}, expected {kinds}")
        return a

    def i(self, name, default=None):
        a = self._get(name, (INT,))
        return default if a is None else int(a.i)

    def f(self, name, default=None):
        a = self._get(name, (FLOAT,))
        return default if a is None else float(a.f)

    def s(self, name, default=None):
        a = self._get(name, (STRING,))
        return default if a is None else a.s.decode("utf-8", "replace")

    def ints(self, name, default=None):
        v = self._decoded.get(("ints", name))
        if v is None:
            a = self._get(name, (INTS,))
            if a is None:
                return default
            v = self._decoded[("ints", name)] = [int(v) for v in a.ints]
        return list(v)  # a copy: callers may edit theirs

    def floats(self, name, default=None):
        v = self._decoded.get(("floats", name))
        if v is None:
            a = self._get(name, (FLOATS,))
            if a is None:
                return default
            v = self._decoded[("floats", name)] = numbers(a.floats, np.float64).tolist()
        return list(v)  # a copy: callers may edit theirs

    def strings(self, name, default=None):
        v = self._decoded.get(("strings", name))
        if v is None:
            a = self._get(name, (STRINGS,))
            if a is None:
                return default
            v = self._decoded[("strings", name)] = [v.decode("utf-8", "replace") for v in a.strings]
        return list(v)  # a copy: callers may edit theirs

    def tensor(self, name, base_dir=None):
        a = self._get(name, (TENSOR,))
        return None if a is None else to_numpy(a.t, self.where, base_dir, f"attribute {name!r}")

    def graph(self, name):
        a = self._get(name, (GRAPH,))
        return None if a is None else a.g
