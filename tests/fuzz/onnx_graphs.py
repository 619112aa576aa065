"""ONNX graphs for the fuzzer: generated from a catalogue of operators (a chain of 1-4 nodes over one float input,
attributes drawn from plausible and hostile values) and mutated structurally (an attribute dropped or set to a
hostile int, an input removed or swapped, an initializer's dims changed, the declared input shape changed). Each
graph is then loaded and run on feeds made from its declared inputs. Runs in the fuzz worker (onnx, no torch)."""
from __future__ import annotations

import numpy as np

HOSTILE = [-1, 0, 1, 2, 3, -2, 7, 2 ** 31 - 1, -(2 ** 31), 2 ** 40, 2 ** 63 - 1]


def _pick(rng, usual, hostile=0.15):
    return rng.choice(HOSTILE) if rng.random() < hostile else rng.choice(usual)


def _ints(rng, n, usual, hostile=0.1):
    return [_pick(rng, usual, hostile) for _ in range(n)]


def _axis(rng, rank):
    return _pick(rng, list(range(-rank, rank)) or [0])


def _const(h, name, values, dtype=np.int64):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(values, dtype), name)


# each maker: (rng, h, x, rank, k) -> (nodes, initializers, output name); k makes names unique
def _unary(op, **attrs):
    def make(rng, h, x, rank, k):
        return [h.make_node(op, [x], [f"y{k}"], **{a: f(rng) for a, f in attrs.items()})], [], f"y{k}"
    return make


def _binary(op):
    def make(rng, h, x, rank, k):
        other = f"c{k}"
        shape = [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, rank))]
        return [h.make_node(op, [x, other], [f"y{k}"])], [_const(h, other, np.ones(shape), np.float32)], f"y{k}"
    return make


def _with_ints(op, name, n_of, usual, **attrs):
    """op(x, int64 initializer `name`) with n_of(rank) values from `usual` (and hostile ones)."""
    def make(rng, h, x, rank, k):
        c = f"{name}{k}"
        vals = _ints(rng, n_of(rng, rank), usual(rank))
        node = h.make_node(op, [x, c], [f"y{k}"], **{a: f(rng, rank) for a, f in attrs.items()})
        return [node], [_const(h, c, vals)], f"y{k}"
    return make


def _slice(rng, h, x, rank, k):
    n = rng.randint(1, max(rank, 1))
    names = [f"s{k}", f"e{k}", f"a{k}", f"st{k}"]
    vals = [_ints(rng, n, [0, 1, -1]), _ints(rng, n, [1, 2, -1, 2 ** 62]), _ints(rng, n, list(range(-rank, rank))),
            _ints(rng, n, [1, 1, 2, -1], 0.2)]
    used = rng.randint(2, 4)
    return ([h.make_node("Slice", [x] + names[:used], [f"y{k}"])],
            [_const(h, nm, v) for nm, v in zip(names[:used], vals[:used])], f"y{k}")


def _concat(rng, h, x, rank, k):
    attrs = {} if rng.random() < 0.1 else {"axis": _axis(rng, rank)}  # Concat without axis: a found bug
    return [h.make_node("Concat", [x, x], [f"y{k}"], **attrs)], [], f"y{k}"


def _split(rng, h, x, rank, k):
    axis = _axis(rng, rank)
    ins, inits = [x], []
    if rng.random() < 0.5:
        ins.append(f"sp{k}")
        inits.append(_const(h, f"sp{k}", _ints(rng, rng.randint(1, 3), [1, 2, 0])))
    return [h.make_node("Split", ins, [f"y{k}", f"z{k}"], axis=axis)], inits, f"y{k}"


def _gather(op):
    def make(rng, h, x, rank, k):
        idx = np.array(_ints(rng, rng.randint(1, 4), [0, 1, -1, 2], 0.2)).reshape(
            rng.choice([(-1,), (1, -1)]))
        attrs = {"axis": _axis(rng, rank)} if op != "GatherND" else {"batch_dims": _pick(rng, [0, 1])}
        if op == "GatherND":
            idx = idx.reshape(-1, 1)
        return [h.make_node(op, [x, f"i{k}"], [f"y{k}"], **attrs)], [_const(h, f"i{k}", idx)], f"y{k}"
    return make


def _reduce(op):
    def make(rng, h, x, rank, k):
        ins, inits = [x], []
        if rng.random() < 0.7:
            ins.append(f"ax{k}")
            inits.append(_const(h, f"ax{k}", _ints(rng, rng.randint(1, 2), list(range(-rank, rank)))))
        return [h.make_node(op, ins, [f"y{k}"], keepdims=_pick(rng, [0, 1]))], inits, f"y{k}"
    return make


def _conv(rng, h, x, rank, k):
    c = rng.choice([1, 2, 3])
    w = np.ones([rng.choice([1, 2]), c] + [rng.choice([1, 2, 3])] * max(rank - 2, 1), np.float32)
    attrs = {}
    if rng.random() < 0.5:
        attrs["pads"] = _ints(rng, 2 * max(rank - 2, 1), [0, 1])
    if rng.random() < 0.5:
        attrs["strides"] = _ints(rng, max(rank - 2, 1), [1, 2])
    if rng.random() < 0.3:
        attrs["group"] = _pick(rng, [1, 2])
    if rng.random() < 0.3:
        attrs["dilations"] = _ints(rng, max(rank - 2, 1), [1, 2])
    return [h.make_node("Conv", [x, f"w{k}"], [f"y{k}"], **attrs)], [_const(h, f"w{k}", w, np.float32)], f"y{k}"


def _pool(op):
    def make(rng, h, x, rank, k):
        n = max(rank - 2, 1)
        attrs = {"kernel_shape": _ints(rng, n, [1, 2, 3])}
        if rng.random() < 0.5:
            attrs["strides"] = _ints(rng, n, [1, 2])
        if rng.random() < 0.4:
            attrs["pads"] = _ints(rng, 2 * n, [0, 1])
        return [h.make_node(op, [x], [f"y{k}"], **attrs)], [], f"y{k}"
    return make


def _topk(rng, h, x, rank, k):
    return ([h.make_node("TopK", [x, f"k{k}"], [f"y{k}", f"i{k}"], axis=_axis(rng, rank))],
            [_const(h, f"k{k}", [_pick(rng, [1, 2, 3])])], f"y{k}")


def _layernorm(rng, h, x, rank, k):
    n = rng.choice([1, 2, 3])
    return ([h.make_node("LayerNormalization", [x, f"g{k}", f"b{k}"], [f"y{k}"], axis=_axis(rng, rank))],
            [_const(h, f"g{k}", np.ones(n), np.float32), _const(h, f"b{k}", np.zeros(n), np.float32)], f"y{k}")


def _batchnorm(rng, h, x, rank, k):
    n = rng.choice([1, 2, 3])
    names = [f"{p}{k}" for p in "gbmv"]
    return ([h.make_node("BatchNormalization", [x] + names, [f"y{k}"])],
            [_const(h, nm, np.ones(n), np.float32) for nm in names], f"y{k}")


def _einsum(rng, h, x, rank, k):
    eq = rng.choice(["ij->ji", "ij,jk->ik", "bij->bji", "i,i->", "ii->i", "ab->", "...i->...", "ij->j", "x->xx"])
    n = eq.split("->")[0].count(",") + 1
    return [h.make_node("Einsum", [x] * n, [f"y{k}"], equation=eq)], [], f"y{k}"


def _pad(rng, h, x, rank, k):
    pads = _ints(rng, 2 * rank, [0, 1, 2, -1])
    mode = rng.choice(["constant", "reflect", "edge", "wrap"])
    return [h.make_node("Pad", [x, f"p{k}"], [f"y{k}"], mode=mode)], [_const(h, f"p{k}", pads)], f"y{k}"


def _resize(rng, h, x, rank, k):
    scales = [float(rng.choice([1, 2, 0.5, 3])) for _ in range(rank)]
    mode = rng.choice(["nearest", "linear", "cubic"])
    return ([h.make_node("Resize", [x, "", f"sc{k}"], [f"y{k}"], mode=mode)],
            [_const(h, f"sc{k}", scales, np.float32)], f"y{k}")


def _cumsum(rng, h, x, rank, k):
    return ([h.make_node("CumSum", [x, f"a{k}"], [f"y{k}"], exclusive=_pick(rng, [0, 1]), reverse=_pick(rng, [0, 1]))],
            [_const(h, f"a{k}", _pick(rng, list(range(-rank, rank)) or [0]))], f"y{k}")


def _cast(rng, h, x, rank, k):
    return [h.make_node("Cast", [x], [f"y{k}"], to=_pick(rng, [1, 6, 7, 9, 10, 11, 16, 2, 3]))], [], f"y{k}"


def _where(rng, h, x, rank, k):
    return ([h.make_node("Greater", [x, f"z{k}"], [f"m{k}"]), h.make_node("Where", [f"m{k}", x, f"z{k}"], [f"y{k}"])],
            [_const(h, f"z{k}", np.zeros([rng.choice([1, 2])] * rng.randint(0, rank)), np.float32)], f"y{k}")


def _loop(rng, h, x, rank, k):
    """A counted Loop whose body adds 1 to the carried value (trip counts hostile too)."""
    from onnx import TensorProto
    body = h.make_graph([h.make_node("Add", [f"v_in{k}", f"one{k}"], [f"v_out{k}"]),
                         h.make_node("Identity", [f"cond_in{k}"], [f"cond_out{k}"])], "body",
                        [h.make_tensor_value_info(f"it{k}", TensorProto.INT64, []),
                         h.make_tensor_value_info(f"cond_in{k}", TensorProto.BOOL, []),
                         h.make_tensor_value_info(f"v_in{k}", TensorProto.FLOAT, None)],
                        [h.make_tensor_value_info(f"cond_out{k}", TensorProto.BOOL, []),
                         h.make_tensor_value_info(f"v_out{k}", TensorProto.FLOAT, None)],
                        [_const(h, f"one{k}", 1.0, np.float32)])
    trip = _pick(rng, [0, 1, 3], 0.3)
    return ([h.make_node("Loop", [f"M{k}", "", x], [f"y{k}"], body=body)], [_const(h, f"M{k}", trip)], f"y{k}")


CATALOGUE = {
    "Relu": _unary("Relu"), "Sigmoid": _unary("Sigmoid"), "Tanh": _unary("Tanh"), "Abs": _unary("Abs"),
    "Sqrt": _unary("Sqrt"), "Erf": _unary("Erf"), "Neg": _unary("Neg"), "Floor": _unary("Floor"),
    "Softmax": _unary("Softmax", axis=lambda r: _pick(r, [-1, 0, 1, 2])),
    "LogSoftmax": _unary("LogSoftmax", axis=lambda r: _pick(r, [-1, 0, 1])),
    "Hardmax": _unary("Hardmax", axis=lambda r: _pick(r, [-1, 0, 1])),
    "Flatten": _unary("Flatten", axis=lambda r: _pick(r, [0, 1, 2, -1])),
    "Transpose": _unary("Transpose", perm=lambda r: r.choice([[1, 0], [0, 2, 1], [2, 0, 1], [0], [3, 2, 1, 0], [0, 0]])),
    "Elu": _unary("Elu", alpha=lambda r: r.choice([1.0, 0.5, -1.0])),
    "LeakyRelu": _unary("LeakyRelu", alpha=lambda r: r.choice([0.1, 2.0])),
    "DepthToSpace": _unary("DepthToSpace", blocksize=lambda r: _pick(r, [1, 2])),
    "SpaceToDepth": _unary("SpaceToDepth", blocksize=lambda r: _pick(r, [1, 2])),
    "ArgMax": _unary("ArgMax", axis=lambda r: _pick(r, [0, 1, -1]), keepdims=lambda r: _pick(r, [0, 1])),
    "Shape": _unary("Shape", start=lambda r: _pick(r, [0, 1, -1]), end=lambda r: _pick(r, [1, 2, -1, 100])),
    "Size": _unary("Size"), "NonZero": _unary("NonZero"), "Trilu": _unary("Trilu", upper=lambda r: _pick(r, [0, 1])),
    "Add": _binary("Add"), "Sub": _binary("Sub"), "Mul": _binary("Mul"), "Div": _binary("Div"), "Pow": _binary("Pow"),
    "MatMul": _binary("MatMul"), "Max": _binary("Max"), "PRelu": _binary("PRelu"), "Equal": _binary("Equal"),
    "Reshape": _with_ints("Reshape", "sh", lambda r, rank: r.randint(1, 4), lambda rank: [-1, 0, 1, 2, 3, 6]),
    "Expand": _with_ints("Expand", "ex", lambda r, rank: r.randint(1, 4), lambda rank: [1, 2, 3]),
    "Tile": _with_ints("Tile", "rp", lambda r, rank: rank, lambda rank: [1, 2, 3]),
    "Squeeze": _with_ints("Squeeze", "sq", lambda r, rank: r.randint(1, 2), lambda rank: list(range(-rank, rank))),
    "Unsqueeze": _with_ints("Unsqueeze", "us", lambda r, rank: r.randint(1, 2), lambda rank: list(range(-rank - 1, rank + 1))),
    "ConstantOfShape": lambda rng, h, x, rank, k: ([h.make_node("Shape", [x], [f"s{k}"]),
                                                    h.make_node("ConstantOfShape", [f"s{k}"], [f"y{k}"])], [], f"y{k}"),
    "Slice": _slice, "Concat": _concat, "Split": _split, "Gather": _gather("Gather"),
    "GatherElements": _gather("GatherElements"), "GatherND": _gather("GatherND"),
    "ReduceSum": _reduce("ReduceSum"), "ReduceMean": _reduce("ReduceMean"), "ReduceMax": _reduce("ReduceMax"),
    "Conv": _conv, "MaxPool": _pool("MaxPool"), "AveragePool": _pool("AveragePool"), "TopK": _topk,
    "LayerNormalization": _layernorm, "BatchNormalization": _batchnorm, "Einsum": _einsum, "Pad": _pad,
    "Resize": _resize, "CumSum": _cumsum, "Cast": _cast, "Where": _where, "Loop": _loop,
}


def generate(rng) -> bytes:
    """A random graph: one float32 input of rank 1-4, 1-4 catalogue nodes chained, declared output float."""
    from onnx import TensorProto, helper as h
    rank = rng.randint(1, 4)
    shape = [rng.choice([1, 2, 3, 4]) for _ in range(rank)]
    x, nodes, inits = "x", [], []
    for k in range(rng.randint(1, 4)):
        op = rng.choice(list(CATALOGUE))
        ns, ins, x = CATALOGUE[op](rng, h, x, rank, k)
        nodes += ns
        inits += ins
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                     [h.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", rng.choice([13, 17, 18, 21]))]).SerializeToString()


def mutate(rng, raw: bytes) -> bytes:
    """A structural edit of a model: attributes, inputs, initializer dims, the declared input shape."""
    import onnx
    m = onnx.load_from_string(raw)
    g = m.graph
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        nodes = list(g.node)
        if kind < 0.35 and nodes:
            n = rng.choice(nodes)
            if n.attribute and rng.random() < 0.4:
                del n.attribute[rng.randrange(len(n.attribute))]
            elif n.attribute:
                a = rng.choice(list(n.attribute))
                if a.type == onnx.AttributeProto.INT:
                    a.i = rng.choice(HOSTILE)
                elif a.type == onnx.AttributeProto.INTS and a.ints:
                    a.ints[rng.randrange(len(a.ints))] = rng.choice(HOSTILE)
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])
                elif a.type == onnx.AttributeProto.STRING:
                    a.s = rng.choice([b"", b"zzz", b"ij,jk->ikl", b"->", b"nearest" * 100])
        elif kind < 0.55 and nodes:
            n = rng.choice(nodes)
            if n.input and rng.random() < 0.5:
                del n.input[rng.randrange(len(n.input))]
            elif len(n.input) > 1:
                i, j = rng.sample(range(len(n.input)), 2)
                n.input[i], n.input[j] = n.input[j], n.input[i]
            else:
                n.input.append(rng.choice(["x", n.input[0] if n.input else "x", ""]))
        elif kind < 0.75 and g.initializer:
            t = rng.choice(list(g.initializer))
            arr = onnx.numpy_helper.to_array(t)
            new = arr.reshape(-1)[:rng.randint(0, arr.size)] if arr.size else arr
            if new.dtype.kind in "iu" and new.size and rng.random() < 0.5:
                new = new.copy()
                new[rng.randrange(new.size)] = rng.choice(HOSTILE)
            t.CopyFrom(onnx.numpy_helper.from_array(new.reshape(rng.choice([(-1,), (1, -1)]) if new.size else new.shape),
                                                    t.name))
        else:
            dims = g.input[0].type.tensor_type.shape.dim
            if dims and rng.random() < 0.5:
                dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 5, 7])
            elif rng.random() < 0.5:
                dims.add().dim_value = rng.choice([1, 2])
            elif dims:
                del dims[rng.randrange(len(dims))]
    return m.SerializeToString()


def feeds(sess) -> dict:
    """Inputs for every declared input: small random values, symbolic or bad dims as 2, at most 4096 elements."""
    rng = np.random.default_rng(0)
    out = {}
    for arg in sess.get_inputs():
        shape = [d if isinstance(d, int) and 0 <= d <= 64 else 2 for d in (arg.shape or [])][:6]
        while shape and int(np.prod(shape)) > 4096:
            shape[shape.index(max(shape))] //= 2
        t = str(arg.type)
        if "int64" in t:
            out[arg.name] = rng.integers(-2, 3, shape).astype(np.int64)
        elif "int32" in t:
            out[arg.name] = rng.integers(-2, 3, shape).astype(np.int32)
        elif "bool" in t:
            out[arg.name] = rng.random(shape) < 0.5
        else:
            out[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return out
