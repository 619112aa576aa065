"""The planned executor: what one graph runs, resolved once at load.

Each node becomes a `Step` holding its implementation, attributes, input/output names and the values
it frees. Two things make a run cheaper than walking the nodes:

- Shape-only subgraphs (Shape/Size and every node computed from them and constants alone: the
  Gather/Unsqueeze/Concat/Cast chains exports build Reshape targets from) run on the host, on CPU
  tensors, and are cached by the input shapes they derive from: a second run with the same shapes
  does none of them, and on a GPU device their values never make a round trip through the device
  (a consumer that reads them as host ints, Reshape's shape or Slice's starts, is handed the host
  tensor; any other consumer gets a device copy made once per cached entry).
- A value is dropped from the run's environment after its last reader, so a large model holds only
  the activations still needed (YOLOv8 at 640x640).
"""
from __future__ import annotations

from ..device import CPU
from ..errors import EmberError, LimitError
from ..tensor import Tensor
from .guard import BROADCAST, broadcast_check, out_of_memory
from .values import host
from .wire import OnnxFormatError


class OnnxNodeError(OnnxFormatError):
    """A node failed at run time on what the model gave it (an attribute or input shape its operator cannot
    take): names the model, the node, its operator and its inputs' shapes."""

# op_type -> the input indices it reads only as host numbers (host_ints / host), never as a tensor
_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
HOST_READ = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Unsqueeze": (1,), "Squeeze": (1,),
             "Slice": (1, 2, 3, 4), "Split": (1,), "ConstantOfShape": (0,), "Resize": (1, 2, 3),
             "Upsample": (1,), "TopK": (1,), "Pad": (1, 2, 3), "Range": (0, 1, 2), "If": (0,),
             **{r: (1,) for r in _REDUCE}}

# operators whose outputs differ run to run: never folded into constants at load, never cached
RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
          "Dropout"}  # (Dropout draws only in training mode; an inference Dropout is the identity either way)
# operators never run on the host: their values are not tensors (sequences, optionals) or differ run to run
_NOT_HOST = {"SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength",
             "SequenceEmpty", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "Optional",
             "OptionalHasElement", "OptionalGetElement"} | RANDOM
_CACHE_MAX = 16  # cached shape keys per host step (a model fed many shapes recomputes, never grows)


class Step:
    __slots__ = ("node", "fn", "attrs", "ctx", "ins", "outs", "host", "of_shape", "host_idx", "need_dev",
                 "drop", "cache", "broadcasts", "named", "out1", "branches", "scoped", "cond", "identity", "cast", "reshape")

    def __init__(self, node, fn, attrs, ctx):
        self.node, self.fn, self.attrs, self.ctx = node, fn, attrs, ctx
        self.ins, self.outs = tuple(node.input), tuple(node.output)
        self.named = all(self.ins)  # no omitted optional input: every input is read from the environment
        self.out1 = self.outs[0] if self.outs else ""  # where a single (non-list) result goes
        self.branches = None  # an inlined If: ((steps, output names, names to drop after) of then, of else)
        self.host = self.of_shape = False
        self.host_idx, self.need_dev, self.drop, self.cache = (), (), (), {}
        self.broadcasts = node.op_type in BROADCAST and node.domain in ("", "ai.onnx")
        # an Identity of one tensor: a replay (trace.py) reads its input's slot in its place
        self.identity = node.op_type == "Identity" and node.domain in ("", "ai.onnx") and len(self.ins) == 1 and \
            self.named and len(self.outs) == 1 and bool(self.outs[0])
        # a Cast: where it hands back its input (already of the type it casts to, which the feeds' types decide),
        # a replay reads its input's slot in its place too; a reshape: a replay reshapes to the shape it gave
        one = node.domain in ("", "ai.onnx") and self.named and len(self.outs) == 1 and bool(self.outs[0])
        self.cast = one and node.op_type in ("Cast", "CastLike")
        self.reshape = one and node.op_type in ("Reshape", "Squeeze", "Unsqueeze", "Flatten")
        self.scoped = _has_subgraph(node)  # its subgraphs read the scope it runs in (ctx.scope)
        self.cond = (None, 0)  # an inlined If's last condition value and the branch it chose


def free_names(graph) -> set:
    """The names a graph reads from its outer scopes: what its nodes (and their subgraphs, recursively) read that
    it does not define itself (its inputs, initializers and node outputs)."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    read = set()
    for node in graph.node:
        read.update(n for n in node.input if n)
        read.update(_subgraph_names(node))
        defined.update(node.output)
    read.update(o.name for o in graph.output)
    return read - defined


def _subgraph_names(node):
    """What a node's subgraphs read from the scope the node runs in (their free names): values that scope must
    keep alive until the node has run, and that a subgraph run copies from it."""
    names = set()
    for a in node.attribute:
        for g in ([a.g] if a.g is not None else []) + list(a.graphs):
            names.update(free_names(g))
    return names


def _has_subgraph(node):
    return any(a.g is not None or a.graphs for a in node.attribute)


def to_host(t):
    """A device tensor's CPU twin (same dtype and bits)."""
    return t if not isinstance(t, Tensor) or t.device is CPU else Tensor._from_storage(t._storage_numpy(), t.dtype, CPU)


def build(plan, graph, consts, host_context, is_main):
    """Steps for `plan` [(node, fn, attrs, ctx)]; `consts` are the graph's load-time values (initializers
    and folded nodes). Returns (steps, host_consts: CPU twins of the constants host steps read)."""
    fed = {v.name for v in graph.input}
    known = {n for n in consts if n not in fed}
    hostvals, steps = set(), []
    for node, fn, attrs, ctx in plan:
        st = Step(node, fn, attrs, ctx)
        plain = node.domain in ("", "ai.onnx") and node.op_type not in _NOT_HOST and not _has_subgraph(node)
        real = [n for n in st.ins if n]
        if plain and node.op_type in ("Shape", "Size") and len(st.ins) == 1 and real:
            st.host = st.of_shape = True
        elif plain and real and any(n in hostvals for n in real) and all(n in hostvals or n in known for n in real):
            st.host = True
        if st.host:
            st.ctx = host_context(ctx)
            hostvals.update(n for n in st.outs if n)
        steps.append(st)
    # who needs a device copy of a host value: a non-host reader at an index it reads as a tensor,
    # a subgraph reading it from the outer scope, or the parent op (a subgraph's outputs)
    need = {o.name for o in graph.output} if not is_main else set()
    for st in steps:
        if st.host:  # host steps read host values (Shape/Size of one, only its shape)
            continue
        hr = HOST_READ.get(st.node.op_type, ())
        idx = []
        for i, n in enumerate(st.ins):
            if n in hostvals:
                if i in hr:
                    idx.append(i)
                else:
                    need.add(n)
        st.host_idx = tuple(idx)
        need.update(n for n in _subgraph_names(st.node) if n in hostvals)
    for st in steps:
        if st.host:
            st.need_dev = tuple(bool(n) and n in need for n in st.outs)
    host_consts = {n: to_host(consts[n]) for st in steps if st.host and not st.of_shape
                   for n in st.ins if n in known}
    # last readers: a value leaves the environment after the step that reads it last
    last = {}
    for i, st in enumerate(steps):
        for n in st.ins:
            if n:
                last[n] = i
        for n in _subgraph_names(st.node):
            last[n] = i
    keep = {o.name for o in graph.output} | known
    # only what this graph's run puts in its environment is dropped: its inputs and its nodes' outputs (an outer
    # scope's values and names its subgraphs use internally are not there to drop)
    mine = {v.name for v in graph.input} | {n for st in steps for n in st.outs if n}
    drops = [[] for _ in steps]
    for n, i in last.items():
        if n not in keep and n in mine:
            drops[i].append(n)
    for st, d in zip(steps, drops):
        st.drop = tuple(d)
    return steps, host_consts


def defined_once(graph) -> bool:
    """Is every value name of the model (graph inputs, initializers, node outputs, in every graph and subgraph)
    defined once? ONNX asks for it; where a model breaks the rule, a subgraph's names could shadow its outer
    scope's, and its If branches are not run in the enclosing environment (inline_ifs)."""
    seen = set()

    def walk(g):
        for name in [v.name for v in g.input] + [t.name for t in g.initializer] + \
                [n for node in g.node for n in node.output if n]:
            if name in seen:
                return False
            seen.add(name)
        return all(walk(sub) for node in g.node for a in node.attribute
                   for sub in ([a.g] if a.g is not None else []) + list(a.graphs))
    return walk(graph)


def inline_ifs(steps_of, graphs):
    """Mark each default-domain If step of `graphs` to run its chosen branch's steps in its own environment
    (plan.run) instead of a subgraph run (a fresh environment, its outer values copied in): Silero VAD runs 7
    small branches a call. Call only where `defined_once`. The branch's constants must be in the environment
    the If runs in (the session puts them there). Returns {id(branch graph): id(graph it runs in)}."""
    runs_in = {}
    for g in graphs:
        for st in steps_of[id(g)]:
            if st.node.op_type != "If" or st.node.domain not in ("", "ai.onnx") or st.host:
                continue
            subs = {a.name: a.g for a in st.node.attribute if a.g is not None}
            pair = (subs.get("then_branch"), subs.get("else_branch"))
            if None in pair or any(len(b.output) < len([n for n in st.outs]) for b in pair):
                continue
            branches = []
            for b in pair:
                outs = tuple(o.name for o in b.output)
                made = {n for bst in steps_of[id(b)] for n in bst.outs if n}
                branches.append((steps_of[id(b)], outs, tuple(n for n in outs if n in made)))
                runs_in[id(b)] = id(g)
            st.branches = tuple(branches)
    return runs_in


def run(steps, env, hv, where, free=True, rec=None):
    """Run `steps` over `env` (names -> values, holding constants, feeds and the outer scope) and `hv`
    (names -> host values: the host constants at the start); `rec`, a trace.Recorder, is told the path taken."""
    keys = {}
    st = None
    try:
        for st in steps:
            if st.host:
                if st.of_shape:  # (Shape and Size have one input)
                    n = st.ins[0]
                    v = hv.get(n)
                    if v is None:
                        v = _read(env, n, st, where)
                    key = tuple(v.shape)
                    ins = (v,)
                    if rec is not None:
                        rec.shape(n, key)
                else:
                    key = tuple(keys.get(n) for n in st.ins)
                    ins = None
                hit = st.cache.get(key)
                if hit is None:
                    if ins is None:
                        ins = [hv[n] if n else None for n in st.ins]
                    outs = st.fn(st.ctx, list(ins), st.attrs)
                    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                    dev = [st.ctx.on_device(o) if need else o for o, need in zip(outs, st.need_dev)]
                    if len(st.cache) >= _CACHE_MAX:
                        st.cache.clear()
                    st.cache[key] = hit = (outs, dev)
                for n, h, d in zip(st.outs, hit[0], hit[1]):
                    if n:
                        hv[n], env[n], keys[n] = h, d, key
            elif st.branches is not None:  # an If run in this environment (inline_ifs): no subgraph run
                c = st.ins[0]
                v = hv[c] if st.host_idx else _read(env, c, st, where)
                if st.cond[0] is not v:  # (a host step's cached value: the same tensor every run of the same shapes)
                    st.cond = (v, 0 if bool(host(v).reshape(-1)[0]) else 1)
                if rec is not None and not st.host_idx:
                    rec.cond(c, st.cond[1])
                b_steps, b_outs, b_local = st.branches[st.cond[1]]
                run(b_steps, env, hv, where, free, rec)
                try:
                    for n, b in zip(st.outs, b_outs):
                        if n:
                            env[n] = env[b]
                            if rec is not None:
                                rec.alias(n, b)
                except KeyError as e:
                    raise OnnxFormatError(f"ember: {where}: node {st.node.name or 'If'!r} (If): its branch's "
                                          f"output {e.args[0]!r} is never produced") from None
                for b in b_local:
                    env.pop(b, None)
            else:
                try:
                    ins = [env[n] for n in st.ins] if st.named else [env[n] if n else None for n in st.ins]
                except KeyError as e:
                    raise _unknown(st, e.args[0], where) from None
                if st.host_idx:
                    for i in st.host_idx:
                        ins[i] = hv[st.ins[i]]
                ctx = st.ctx
                if st.scoped:
                    ctx.scope = env  # what a subgraph of this node sees
                if st.broadcasts:
                    broadcast_check(st.attrs, ins)
                if rec is not None:
                    rec.step(st, ins)
                outs = st.fn(ctx, ins, st.attrs)
                if rec is not None:
                    rec.ran(st, ins, outs)
                if isinstance(outs, (list, tuple)):
                    for n, v in zip(st.outs, outs):
                        if n:
                            env[n] = v
                elif st.out1:
                    env[st.out1] = outs
            if free and st.drop:
                for n in st.drop:
                    env.pop(n, None)
    except MemoryError as e:  # past what guard.py's checks bound: still ember's error, naming the node
        raise out_of_memory(where, st.node, e) from None
    except EmberError as e:
        raise _with_node(where, st, env, hv, e) from None
    except (NameError, ImportError, SyntaxError):  # ember's own bug, never the model's: left as it is
        raise
    except Exception as e:  # noqa: BLE001  an operator's own failure (IndexError, ValueError ...) on this model
        raise node_failed(where, st, env, hv, e) from None
    return env


def _inputs(st, env, hv) -> str:
    ins = []
    for n in st.ins:
        if not n:
            ins.append("(none)")
            continue
        v = hv.get(n) if st.host else env.get(n, hv.get(n))
        ins.append(f"{n!r}: {describe_value(v)}")
    return "[" + ", ".join(ins) + "]"


def _with_node(where, st, env, hv, e):
    """An ember error an operator raised, with the node and its inputs added when the message lacks them (the
    same class, so callers catching it still do); one that names a node (a guard's LimitError, a subgraph's
    node) is left as it is."""
    msg = str(e)
    if st is None or "node '" in msg or isinstance(e, LimitError):
        return e
    prefix = f"ember: {where}: "
    rest = msg[len(prefix):] if msg.startswith(prefix) else msg[len("ember: "):] if msg.startswith("ember: ") else msg
    node = st.node
    text = f"{prefix}node {node.name or node.op_type!r} ({node.op_type}) on inputs {_inputs(st, env, hv)}: {rest}"
    try:
        return type(e)(text)
    except TypeError:  # a class with its own constructor
        return OnnxNodeError(text)


def describe_value(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return f"a sequence of {len(v)}"
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    if shape is None:
        return type(v).__name__
    name = getattr(dtype, "name", None) or str(dtype)
    return f"{name} {tuple(shape)}"


def node_failed(where, st, env, hv, e) -> OnnxNodeError:
    """An operator's raw exception as ember's error: the node, its op, each input's dtype and shape."""
    node = st.node
    return OnnxNodeError(f"ember: {where}: node {node.name or node.op_type!r} ({node.op_type}) failed on inputs "
                         f"{_inputs(st, env, hv)}: {type(e).__name__}: {str(e)[:300]}")


def _read(env, n, st, where):
    try:
        return env[n]
    except KeyError:
        raise _unknown(st, n, where) from None


def _unknown(st, name, where):
    node = st.node
    return OnnxFormatError(f"ember: {where}: node {node.name or node.op_type!r} ({node.op_type}) "
                           f"reads {name!r}, which no earlier node, input or initializer makes")
