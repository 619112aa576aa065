"""InferenceSession: onnxruntime's API over ember. Loads the model, checks every operator against the
registry up front, puts initializers on the device and runs the graph node by node."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..autograd import no_grad
from ..device import CPU, device as as_device
from ..tensor import Tensor, tensor
from . import plan as P
from .trace import Recorder, Stale
from .fuse import dedupe, fuse_attention, fuse_conv_act, fuse_gelu, fuse_linear, fuse_silu
from .proto import load_model
from .registry import HOST_INPUTS, Attrs, lookup
from .tensor_data import BFLOAT16, NAMES, NP_OF, STRING, to_numpy
from .lowbit import LOWBIT, ML_NAMES
from .ops_string import as_text
from .values import cast
from .wire import OnnxFormatError
from . import ops_math, ops_nn, ops_shape, ops_control, ops_attention, ops_quant, ops_rnn, ops_host, ops_training, ops_string, ops_ml  # noqa: F401  (they fill the registry)
from . import ops_contrib_attention, ops_contrib_norm, ops_contrib_quant  # noqa: F401  (com.microsoft)

# numpy dtypes ember lacks run in a wider one; outputs are cast back to the declared ONNX type
WIDER = {np.dtype(np.int16): np.int32, np.dtype(np.uint16): np.int32, np.dtype(np.uint64): np.int64}




class UnsupportedOperatorError(OnnxFormatError):
    """The model uses operators (at its opsets) that ember does not implement; `.missing` lists them."""

    def __init__(self, where, missing):
        self.missing = missing
        listed = ", ".join(f"{d + '.' if d else ''}{op} (opset {v})" for d, op, v in missing)
        super().__init__(f"ember: {where}: unsupported ONNX operators: {listed}")


class NodeArg:
    """One graph input or output, as onnxruntime describes it: name, shape (ints, strings or None), type."""
    __slots__ = ("name", "shape", "type")

    def __init__(self, vi):
        tt = vi.type.tensor_type if vi.type is not None else None
        self.name = vi.name
        if tt is None:
            self.shape, self.type = None, "unknown"
            return
        self.type = f"tensor({NAMES.get(tt.elem_type, tt.elem_type)})"
        self.shape = None if tt.shape is None else [
            d.dim_value if d.dim_param == "" and d.dim_value else (d.dim_param or None) for d in tt.shape.dim]

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


_PLAIN = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8,
                                         np.bool_))


def to_tensor(a, dev) -> Tensor:
    """A numpy array as an ember Tensor on `dev` (int16/uint16/uint64 widened, see WIDER); strings as
    the host array the string operators read."""
    a = np.asarray(a)
    if a.dtype in _PLAIN:  # (most feeds: none of the cases below, whose dtype.name costs more than the rest)
        return Tensor._from_storage(np.array(a, copy=True, order="C"), D.FROM_NP[a.dtype], dev)
    if a.dtype.name in ML_NAMES:  # ml_dtypes' float8/int4/... (as onnx's numpy_helper returns them)
        a = a.astype(ML_NAMES[a.dtype.name])
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 (what onnx's numpy_helper returns): keep the bits
        return Tensor._from_storage(a.copy().view(np.uint16), D.bfloat16, dev)
    if a.dtype in WIDER:
        a = a.astype(WIDER[a.dtype])
    if a.dtype.kind in "OUS":  # strings stay on the host as object arrays of str (ops_string.py)
        return as_text(a)
    return tensor(a if a.flags.c_contiguous else a.copy(), device=dev)  # (ascontiguousarray makes 0-d 1-d)


_I32 = np.iinfo(np.int32)
_TRACES_MAX = 8  # recorded runs a session keeps (by feed shapes and dtypes)
_STALE_MAX = 3   # replays that may leave their recorded path before a session stops recording


def _signature(feeds: dict):
    """The feeds' names, shapes, dtypes and devices (what a recorded run is replayed for), or None where a feed is
    not a tensor (a sequence, an omitted optional input, strings)."""
    sig = []
    for n, v in feeds.items():
        if type(v) is not Tensor:
            return None
        sig.append((n, v.shape, v.dtype, v.device))
    return tuple(sig)


def constant(a, dev) -> Tensor:
    """A model's own int64 constant on `dev`; where the device keeps int64 as int32 (WebGPU), values past
    int32 saturate: they are the sentinels exports use for "to the end" (Slice ends of INT64_MAX, ...),
    which keep their meaning for every tensor a device can hold. Feeds never saturate."""
    try:
        return to_tensor(a, dev)
    except ValueError:
        a = np.asarray(a)
        if a.dtype != np.int64:
            raise
        return to_tensor(np.clip(a, _I32.min, _I32.max), dev)


class Context:
    """What an operator may need besides its inputs: the device, the opset, subgraph execution."""

    def __init__(self, session, opset):
        self.session, self.opset = session, opset
        self.device, self.where = session.device, session.where
        self.scope = {}

    def const(self, a, dtype=None):
        return constant(np.asarray(a, dtype), self.device)

    def run_graph(self, graph, feeds: dict, outer: dict):
        return self.session._run_graph(graph, feeds, outer)

    def on_host(self):
        """This context with the CPU as its device: what shape-only steps run with (plan.py)."""
        h = Context(self.session, self.opset)
        h.device = CPU
        return h

    def on_device(self, t):
        """A host step's value as the session's device holds it (what a tensor-reading consumer gets)."""
        if self.session.device is CPU or not isinstance(t, Tensor):
            return t
        d = constant(t.numpy(), self.session.device)
        return d if d.dtype is t.dtype else cast(d, t.dtype)


def _nodes(graph):
    """Every node of a graph and of its subgraphs."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.g is not None else []) + list(a.graphs):
                yield from _nodes(g)


def _host_only(graph):
    """Names read only at inputs their operators keep on the host (registry.HOST_INPUTS): those initializers
    stay CPU tensors whatever the session's device."""
    on_host, elsewhere = set(), {o.name for o in graph.output}
    for node in _nodes(graph):
        at = HOST_INPUTS.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type), ())
        for i, n in enumerate(node.input):
            (on_host if i in at else elsewhere).add(n)
    return on_host - elsewhere


def _output_type(vi):
    tt = vi.type.tensor_type if vi.type is not None else None
    return tt.elem_type if tt is not None and tt.elem_type else None


class InferenceSession:
    def __init__(self, path_or_bytes, device="cpu", providers=None):
        self.model = load_model(path_or_bytes)
        self.where, self.device = self.model.where, as_device(device)
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in self.model.opset_import}
        self.opsets.setdefault("", 1)
        graph = self.model.graph
        self._plans = {}
        self._sub_initializers = {}  # id(subgraph) -> its initializers (and folded constants) as tensors
        self._subgraphs, self._parent = [], {}  # every subgraph, nested ones too; id(subgraph) -> its graph
        self.value_types = {}  # value name -> declared ONNX elem type (CastLike's target when held wide)
        missing = []
        self._plan(graph, missing)
        if missing:
            raise UnsupportedOperatorError(self.where, sorted(set(missing)))
        on_host = _host_only(graph)
        with no_grad():
            self._initializers = {t.name: constant(to_numpy(t, self.where, self.model.base_dir, "initializer"),
                                                    CPU if t.name in on_host else self.device)
                                  for t in graph.initializer}
        for sp in graph.sparse_initializer:
            raise OnnxFormatError(f"ember: {self.where}: sparse initializer {sp.values.name!r} is not supported")
        self._inputs = [NodeArg(v) for v in graph.input if v.name not in self._initializers]
        # the constants each graph sees: its own initializers and folded values, and its outer graphs'
        # (a subgraph's weights are often the main graph's: Silero's LSTM slices them in an If branch)
        visible = {id(graph): self._fold_constants(graph, self._initializers, {})}
        with no_grad():
            for g in self._subgraphs:  # (parents come before their subgraphs in this list)
                inits = {t.name: constant(to_numpy(t, self.where, self.model.base_dir, "initializer"), self.device)
                         for t in g.initializer}
                visible[id(g)] = self._fold_constants(g, inits, visible[id(self._parent[id(g)])])
                self._sub_initializers[id(g)] = inits
        self._outputs = [NodeArg(v) for v in graph.output]
        self._out_types = {o.name: _output_type(o) for o in graph.output}
        self._steps, self._host_consts = {}, {}
        self._free = {id(g): tuple(P.free_names(g)) for g in self._subgraphs}  # what a subgraph run copies in
        # each graph's output names, as a tuple and a set (read on every run of it)
        self._out_names = {id(g): (tuple(o.name for o in g.output), frozenset(o.name for o in g.output))
                           for g in [graph] + self._subgraphs}
        for g in [graph] + self._subgraphs:
            plan = fuse_gelu(self._plans.pop(id(g)), g, visible[id(g)])
            plan = fuse_attention(fuse_linear(plan, g, visible[id(g)]), g, visible[id(g)])
            self._steps[id(g)], self._host_consts[id(g)] = P.build(
                plan, g, visible[id(g)], lambda ctx: ctx.on_host(), is_main=g is graph)
        # If branches run in the environment of the graph holding the If: their constants join that graph's
        self._consts = {id(graph): dict(self._initializers)}
        self._consts.update((id(g), dict(self._sub_initializers[id(g)])) for g in self._subgraphs)
        # replays of the main graph's runs by their feeds' shapes and dtypes (trace.py): a signature is recorded when
        # it is fed twice in a row (a streaming model's chunks, a batch of one size), replayed from then on; a decoder
        # fed ever longer caches, one generation after another, records nothing
        self._traces, self._last, self._stale = {}, None, 0
        self._branch_names = set()  # what inlined branches hold: in the main environment, yet no value of its graph
        if P.defined_once(graph):
            runs_in = P.inline_ifs(self._steps, [graph] + self._subgraphs)
            for g in self._subgraphs:
                if id(g) in runs_in:
                    self._branch_names.update(n for node in g.node for n in node.output)
                    self._branch_names.update(self._sub_initializers[id(g)])
            for g in reversed(self._subgraphs):  # (children after parents in the list: nested branches first)
                home = runs_in.get(id(g))
                if home is not None:
                    self._consts[home].update(self._consts[id(g)])
                    self._host_consts[home] = {**self._host_consts[id(g)], **self._host_consts[home]}

    # -------------------------------------------------------------- load: resolve every node once
    def _plan(self, graph, missing):
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            t = _output_type(vi)
            if t:
                self.value_types[vi.name] = t
        for t in graph.initializer:
            self.value_types[t.name] = t.data_type
        plan = []
        for node in graph.node:
            domain = "" if node.domain == "ai.onnx" else node.domain
            version = self.opsets.get(domain)
            fn = lookup(domain, node.op_type, version) if version is not None else None
            if fn is None:
                missing.append((domain, node.op_type, version or 0))
            attrs = Attrs(node, self.where)
            plan.append((node, fn, attrs, Context(self, version)))
            for a in node.attribute:  # subgraphs (If/Loop/Scan bodies) are checked now too
                for g in ([a.g] if a.g is not None else []) + list(a.graphs):
                    self._subgraphs.append(g)
                    self._parent[id(g)] = graph
                    self._plan(g, missing)
        self._plans[id(graph)] = fuse_conv_act(fuse_silu(dedupe(plan, graph, P.RANDOM), graph), graph)

    def _fold_constants(self, graph, store, outer):
        """Run, once at load, every node whose inputs are all constants (`store`: the graph's initializers,
        `outer`: its outer graphs' constants) or folded values (int8 weights dequantized, shapes of
        constants ...): their outputs join `store` and the nodes leave the plan. Initializers that are
        also graph inputs may be fed, so they are not constants. Returns every constant the graph sees."""
        fed = {v.name for v in graph.input}
        consts = {n: v for n, v in outer.items() if n not in fed}
        consts.update((n, v) for n, v in store.items() if n not in fed)
        known = set(consts)
        kept = []
        with no_grad():
            for step in self._plans[id(graph)]:
                node, fn, attrs, ctx = step
                if (node.op_type in P.RANDOM or any(a.g is not None or a.graphs for a in node.attribute)
                        or not all(n in known for n in node.input if n)):
                    kept.append(step)
                    continue
                ctx.scope = consts
                try:
                    outs = fn(ctx, [consts[n] if n else None for n in node.input], attrs)
                except Exception:  # noqa: BLE001 (left to run time, which reports it with the feeds)
                    kept.append(step)
                    continue
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                for n, v in zip(node.output, outs):
                    if n:
                        store[n] = consts[n] = v
                        known.add(n)
        self._plans[id(graph)] = kept
        return consts

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_modelmeta(self):
        return {e.key: e.value for e in self.model.metadata_props}

    # -------------------------------------------------------------- run
    def run(self, output_names, input_feed: dict, run_options=None):
        graph = self.model.graph
        feeds = {}
        for arg in self._inputs:
            if arg.name not in input_feed:
                raise ValueError(f"ember: {self.where}: missing input {arg.name!r} ({arg.type}, shape {arg.shape})")
        with no_grad():
            for name, a in input_feed.items():
                feeds[name] = a if isinstance(a, (Tensor, list)) or a is None else to_tensor(a, self.device)
            values = self._run_graph(graph, feeds, {}, output_names)
        names = self._out_names[id(graph)][0] if output_names is None else output_names
        types = self._out_types
        return [self._to_numpy(values[n], types.get(n)) for n in names]

    def _run_graph(self, graph, feeds, outer, wanted=None):
        gid = id(graph)
        main = graph is self.model.graph
        out_names, out_set = self._out_names[gid]
        free = wanted is None or out_set.issuperset(wanted)
        if wanted is not None:
            out_names = wanted
        rec = None
        if main and free and self._traces is not None:
            sig = _signature(feeds)
            trace = self._traces.get(sig)
            if trace is not None:
                try:
                    return dict(zip(self._out_names[gid][0], trace.replay(feeds)))
                except Stale:  # this run's shapes or conditions leave the recorded path: run it step by step
                    del self._traces[sig]
                    self._stale += 1
                    if self._stale >= _STALE_MAX:  # (shapes that follow the data: replays would mostly fail)
                        self._traces = None
                except Exception:  # noqa: BLE001  (the planned executor raises it again, naming the node)
                    pass
            elif sig is not None and sig == self._last:
                rec = Recorder(feeds)
            self._last = sig
        if main:
            env = dict(outer)
        else:  # a subgraph sees the outer values it reads, not a copy of the whole scope
            env = {n: outer[n] for n in self._free[gid] if n in outer}
        # its initializers and (a subgraph's) folded constants, made at load, with those of the If branches
        # it runs inline
        env.update(self._consts[gid])
        if feeds:
            env.update(feeds)
        P.run(self._steps[gid], env, dict(self._host_consts[gid]), self.where, free, rec)
        if not main:
            try:
                return [env[n] for n in out_names]
            except KeyError:
                pass
        missing = [n for n in out_names if n not in env or main and n in self._branch_names]
        if missing:
            raise OnnxFormatError(f"ember: {self.where}: graph {graph.name!r}: outputs {missing} are never produced")
        if rec is not None and self._traces is not None:
            trace = rec.trace(feeds, self._out_names[gid][0], env)
            if trace is not None:
                if len(self._traces) >= _TRACES_MAX:
                    self._traces.clear()
                self._traces[sig] = trace
        return env

    @staticmethod
    def _to_numpy(v, onnx_type):
        if v is None:
            return None
        if isinstance(v, list):
            return [InferenceSession._to_numpy(x, onnx_type) for x in v]
        if isinstance(v, np.ndarray):  # a string tensor
            return v
        a = v.numpy()  # bfloat16 comes back as float32 values, float8/int4/... in their wide dtype
        want = NP_OF.get(onnx_type) if onnx_type not in (BFLOAT16, STRING) and onnx_type not in LOWBIT else None
        return a.astype(want) if want is not None and a.dtype != want else a
