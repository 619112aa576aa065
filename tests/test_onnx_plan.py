"""The planned executor (core/onnx/plan.py): shape-only steps run on the host and are cached by the input
shapes they come from, values are freed after their last reader, patterns fuse. Each against onnxruntime
on the same model, with the input shape changing from run to run (a stale cached shape would show)."""
import numpy as np
import pytest

from expected_skips import missing



def _tools():
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        missing("onnx and onnxruntime are the references for ONNX models")
    return ort, TensorProto, helper, numpy_helper


def _shape_graph():
    """y = Reshape(x, [d0 * d1, -1]) * 0.5 * (1 + erf(. / sqrt 2)) + ConstantOfShape(Shape(.)) of 1s, the
    target built the way exports build it (Shape -> Gather -> Mul -> Unsqueeze -> Concat), and Sigmoid -> Mul."""
    ort, T, helper, nh = _tools()

    def c(name, v):
        return nh.from_array(np.asarray(v), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
        helper.make_node("Mul", ["d0", "d1"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "ax0"], ["rows1"]),
        helper.make_node("Concat", ["rows1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Div", ["r", "sqrt2"], ["rs"]),
        helper.make_node("Erf", ["rs"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["half", "e1"], ["he"]),
        helper.make_node("Mul", ["r", "he"], ["g"]),
        helper.make_node("Sigmoid", ["g"], ["sg"]),
        helper.make_node("Mul", ["g", "sg"], ["act"]),
        helper.make_node("Shape", ["act"], ["sa"]),
        helper.make_node("ConstantOfShape", ["sa"], ["ones"], value=nh.from_array(np.ones(1, np.float32))),
        helper.make_node("Add", ["act", "ones"], ["y"]),
        helper.make_node("Cast", ["sa"], ["shape_f"], to=T.FLOAT),
    ]
    inits = [c("i0", np.int64(0)), c("i1", np.int64(1)), c("ax0", np.array([0], np.int64)),
             c("minus1", np.array([-1], np.int64)), c("sqrt2", np.float32(np.sqrt(2))), c("one", np.float32(1)),
             c("half", np.float32(0.5))]
    g = helper.make_graph(nodes, "plan", [helper.make_tensor_value_info("x", T.FLOAT, ["a", "b", "c"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("shape_f", T.FLOAT, [2])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_shape_changes_between_runs(device):
    ort = _tools()[0]
    from ember.onnx import InferenceSession
    model = _shape_graph()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 4), (5, 1, 3), (2, 3, 4), (1, 1, 1), (3, 2, 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = ref.run(None, {"x": x})
        got = sess.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6, err_msg=str(shape))
        assert got[1].tolist() == want[1].tolist() == [shape[0] * shape[1], shape[2]]


def test_patterns_fused_and_shapes_planned_on_host():
    """What the plan holds for this graph: one gelu and one silu step in place of 7 nodes, and the
    target chain (Shape, Gather x2, Mul, Unsqueeze, Concat; Shape, ConstantOfShape, Cast) on the host."""
    from ember.onnx import InferenceSession
    sess = InferenceSession(_shape_graph())
    steps = sess._steps[id(sess.model.graph)]
    assert sorted(s.fn.__name__ for s in steps if s.fn.__name__ in ("_gelu", "_silu")) == ["_gelu", "_silu"]
    assert not any(s.node.op_type in ("Erf", "Sigmoid") for s in steps)
    assert sorted(s.node.op_type for s in steps if s.host) == sorted(
        ["Shape", "Gather", "Gather", "Mul", "Unsqueeze", "Concat", "Shape", "ConstantOfShape", "Cast"])


def test_intermediate_outputs_survive_freeing():
    """run() may name a value that is no graph output: the plan does not free it then."""
    from ember.onnx import InferenceSession
    sess = InferenceSession(_shape_graph())
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
    (r, y) = sess.run(["r", "y"], {"x": x})
    np.testing.assert_array_equal(r, x.reshape(6, 4))
    assert y.shape == (6, 4)


def _conv_if_lstm_graph():
    """Conv -> Relu, Conv -> Sigmoid -> Mul (SiLU), a Conv whose output an If branch also reads, nested Ifs on
    shapes (Shape -> Gather -> Equal) whose branches Squeeze / Slice / Unsqueeze, and a bidirectional LSTM with
    biases and initial states: each against onnxruntime, fed shapes that switch the branches run to run."""
    ort, T, helper, nh = _tools()
    rng = np.random.default_rng(1)

    def c(name, v):
        return nh.from_array(np.asarray(v), name)

    def f32(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)
    hid = 6
    then_inner = helper.make_graph([helper.make_node("Squeeze", ["a2", "ax2"], ["sq"])], "then_inner", [],
                                   [helper.make_tensor_value_info("sq", T.FLOAT, None)])
    else_inner = helper.make_graph([helper.make_node("Slice", ["a2", "st", "en", "ax2"], ["sl"]),
                                    helper.make_node("Squeeze", ["sl", "ax2"], ["sq2"])], "else_inner", [],
                                   [helper.make_tensor_value_info("sq2", T.FLOAT, None)])
    then_b = helper.make_graph([
        helper.make_node("Shape", ["a2"], ["s2"]),
        helper.make_node("Gather", ["s2", "i2"], ["width"], axis=0),
        helper.make_node("Equal", ["width", "one_i"], ["is1"]),
        helper.make_node("If", ["is1"], ["picked"], then_branch=then_inner, else_branch=else_inner),
        helper.make_node("Add", ["picked", "a1_last"], ["t_out"])], "then_b", [],
        [helper.make_tensor_value_info("t_out", T.FLOAT, None)])
    else_b = helper.make_graph([helper.make_node("ReduceMean", ["a2"], ["e_out"], axes=[2], keepdims=0)], "else_b",
                               [], [helper.make_tensor_value_info("e_out", T.FLOAT, None)])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1]),
        helper.make_node("Relu", ["c1"], ["a1"]),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], pads=[1, 1], strides=[2]),
        helper.make_node("Sigmoid", ["c2"], ["s"]),
        helper.make_node("Mul", ["c2", "s"], ["a2"]),
        helper.make_node("Conv", ["x", "w1", "b2"], ["c3"], pads=[1, 1]),  # a branch reads it too: not fused
        helper.make_node("Relu", ["c3"], ["a3"]),
        helper.make_node("Slice", ["c3", "m1", "big", "ax2"], ["a1_last"]),
        helper.make_node("Shape", ["a2"], ["s1"]),
        helper.make_node("Gather", ["s1", "i0"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "one_i"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], then_branch=then_b, else_branch=else_b),
        helper.make_node("Transpose", ["a3"], ["seq"], perm=[2, 0, 1]),  # (time, batch, channels)
        helper.make_node("LSTM", ["seq", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"], hidden_size=hid,
                         direction="bidirectional"),
    ]
    inits = [c("w1", f32(4, 3, 3)), c("b1", f32(4)), c("w2", f32(4, 4, 3)), c("b2", f32(4)),
             c("i0", np.int64(0)), c("i2", np.int64(2)), c("one_i", np.int64(1)), c("ax2", np.array([2], np.int64)),
             c("st", np.array([0], np.int64)), c("en", np.array([1], np.int64)), c("m1", np.array([-1], np.int64)),
             c("big", np.array([2 ** 62], np.int64)), c("W", f32(2, 4 * hid, 4)), c("R", f32(2, 4 * hid, hid)),
             c("B", f32(2, 8 * hid))]
    g = helper.make_graph(nodes, "fast", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3, "t"]),
                                          helper.make_tensor_value_info("h0", T.FLOAT, [2, "n", hid]),
                                          helper.make_tensor_value_info("c0", T.FLOAT, [2, "n", hid])],
                          [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "a3", "Y", "Yh", "Yc")],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_fused_convs_inlined_ifs_and_lstm_match_onnxruntime(device):
    ort = _tools()[0]
    from ember.onnx import InferenceSession
    model = _conv_if_lstm_graph()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(2)
    # batch 1 takes the then branch (inner then at width 1, inner else at 2+), batch 2 the else branch; each
    # shape twice in a row (what a node keeps from its last run is used) and again later (kept for another shape)
    for n, t in [(1, 2), (1, 2), (1, 4), (1, 4), (2, 5), (2, 5), (1, 1), (1, 4), (2, 3), (1, 2)]:
        feeds = {"x": rng.standard_normal((n, 3, t)).astype(np.float32),
                 "h0": rng.standard_normal((2, n, 6)).astype(np.float32),
                 "c0": rng.standard_normal((2, n, 6)).astype(np.float32)}
        want = ref.run(None, feeds)
        got = sess.run(None, feeds)
        for name, g, w in zip(("y", "a3", "Y", "Yh", "Yc"), got, want):
            assert g.shape == w.shape, (name, n, t)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name} at {(n, t)}")


def test_conv_activations_fuse_and_ifs_run_inline():
    """The plan of that graph: Conv+Relu and Conv+SiLU are one step each, the Conv whose output a branch reads
    keeps its Relu, both Ifs run inline (no subgraph run), and a branch's inner value is no output of run()."""
    import pytest

    from ember.onnx import InferenceSession
    from ember.onnx.wire import OnnxFormatError
    sess = InferenceSession(_conv_if_lstm_graph())
    steps = sess._steps[id(sess.model.graph)]
    assert sorted(s.fn.__name__ for s in steps if s.node.op_type == "Conv") == ["_conv", "_conv_relu", "_conv_silu"]
    assert [s.node.op_type for s in steps if s.node.op_type in ("Relu", "Sigmoid", "Mul")] == ["Relu"]
    assert all(s.branches is not None for g in sess._steps.values() for s in g if s.node.op_type == "If")
    runs = []
    run_graph = sess._run_graph
    sess._run_graph = lambda g, *a, **k: runs.append(g.name) or run_graph(g, *a, **k)
    x = np.ones((1, 3, 4), np.float32)
    h = np.zeros((2, 1, 6), np.float32)
    sess.run(None, {"x": x, "h0": h, "c0": h})
    assert runs == ["fast"]
    with pytest.raises(OnnxFormatError, match="never produced"):
        sess.run(["picked"], {"x": x, "h0": h, "c0": h})


def _linear_gelu_graph():
    """MatMul + Add + erf GELU (torch's export: x * 0.5 * (1 + erf(x / sqrt 2))) twice: h's GELU is its only
    reader (one linear_act step), y's linear output is also a graph output (a linear step and a gelu step)."""
    ort, T, helper, nh = _tools()
    rng = np.random.default_rng(3)

    def c(name, v):
        return nh.from_array(np.asarray(v), name)

    def gelu(x, out, tag):
        return [helper.make_node("Div", [x, "sqrt2"], [tag + "s"]), helper.make_node("Erf", [tag + "s"], [tag + "e"]),
                helper.make_node("Add", [tag + "e", "one"], [tag + "e1"]),
                helper.make_node("Mul", [x, tag + "e1"], [tag + "m"]),
                helper.make_node("Mul", [tag + "m", "half"], [out])]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["p1"]), helper.make_node("Add", ["p1", "b1"], ["l1"]),
             *gelu("l1", "h", "g1"),
             helper.make_node("MatMul", ["h", "w2"], ["p2"]), helper.make_node("Add", ["b2", "p2"], ["l2"]),
             *gelu("l2", "y", "g2")]
    inits = [c("w1", (rng.standard_normal((384, 256)) / 20).astype(np.float32)),
             c("b1", rng.standard_normal(256).astype(np.float32)),
             c("w2", (rng.standard_normal((256, 384)) / 16).astype(np.float32)),
             c("b2", rng.standard_normal(384).astype(np.float32)),
             c("sqrt2", np.float32(np.sqrt(2))), c("one", np.float32(1)), c("half", np.float32(0.5))]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 384])],
                          [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "l2")], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), \
        {i.name: nh.to_array(i) for i in inits}


def test_a_linear_and_its_gelu_fuse(device):
    """The plan: MatMul + Add + GELU is one linear_act step where the GELU is the linear's only reader; outputs
    against onnxruntime, and on cpu (the GELU in gemm_native.c's epilogue natively) the bits of the linear then
    the GELU, run after run (the weight's blocked copy from its second run on)."""
    ort = _tools()[0]
    import ember
    import ember.nn.functional as F
    from ember.onnx import InferenceSession
    model, consts = _linear_gelu_graph()
    sess = InferenceSession(model, device=device)
    steps = sess._steps[id(sess.model.graph)]
    assert sorted(s.fn.__name__ for s in steps) == ["_gelu", "_linear", "_linear_gelu"]
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    w1, b1 = consts["w1"], consts["b1"]
    rng = np.random.default_rng(4)
    for n in (32, 32, 5, 100):
        x = rng.standard_normal((n, 384)).astype(np.float32)
        got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        if device == "cpu":
            # the same product then the GELU: gemm_native.c's where it takes it (F.linear's weight, (out, in),
            # is a transposed view to it: BLAS, whose sums are gemm_native's only with OpenBLAS's AVX-512 kernel)
            from ember.backends import cpu_matmul
            lin = cpu_matmul.native_gemm(x, w1, b1, weight=True)
            if lin is None:
                lin = F.linear(ember.tensor(x), ember.tensor(w1.T.copy()), ember.tensor(b1)).numpy()
            h = F.gelu(ember.tensor(lin)).numpy()
            (h_got,) = sess.run(["h"], {"x": x})
            assert np.array_equal(h_got, h), n


def _scaled_attention_graph(fully_masked_row):
    """torch's SDPA export: MatMul(Mul(q, c), Mul(kᵀ, c)) with c = sqrt(1 / sqrt(d)), + mask, Softmax,
    Where(IsNaN(p), 0, p), MatMul(., v); q (1, 4, L, 8), kᵀ (1, 4, 8, L), v (1, 4, L, 8), the mask (1, 1, 1, L)
    (-inf on every key of one row's batch: all-NaN probabilities there, zeros out)."""
    ort, T, helper, nh = _tools()
    c = float(np.sqrt(1 / np.sqrt(8)))
    nodes = [
        helper.make_node("Mul", ["q", "c"], ["qs"]),
        helper.make_node("Mul", ["c", "kt"], ["ks"]),  # (the constant first: either order)
        helper.make_node("MatMul", ["qs", "ks"], ["s"]),
        helper.make_node("Add", ["s", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["p0"]),
        helper.make_node("MatMul", ["p0", "v"], ["y"]),
    ]
    f = T.FLOAT
    g = helper.make_graph(
        nodes, "sdpa",
        [helper.make_tensor_value_info("q", f, [1, 4, "L", 8]), helper.make_tensor_value_info("kt", f, [1, 4, 8, "L"]),
         helper.make_tensor_value_info("v", f, [1, 4, "L", 8]), helper.make_tensor_value_info("mask", f, [1, 1, 1, "L"])],
        [helper.make_tensor_value_info("y", f, [1, 4, "L", 8])],
        [nh.from_array(np.array(c, np.float32), "c"), nh.from_array(np.array(0.0, np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_attention_takes_the_scales_of_q_and_k_into_one(device):
    """The plan: both Muls by a constant join the attention's scale (one step, no pass over q or kᵀ); outputs
    against onnxruntime, a masked key and a fully masked row (zeros) among them."""
    ort = _tools()[0]
    from ember.onnx import InferenceSession
    model = _scaled_attention_graph(True)
    sess = InferenceSession(model, device=device)
    steps = sess._steps[id(sess.model.graph)]
    assert [s.node.op_type for s in steps if not s.host] == ["MatMul"]  # the attention, on the pattern's last node
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for n in (16, 7):
        feeds = {"q": rng.standard_normal((1, 4, n, 8)).astype(np.float32),
                 "kt": rng.standard_normal((1, 4, 8, n)).astype(np.float32),
                 "v": rng.standard_normal((1, 4, n, 8)).astype(np.float32),
                 "mask": np.where(np.arange(n) == 2, -np.inf, 0.0).astype(np.float32).reshape(1, 1, 1, n)}
        (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        feeds["mask"] = np.full((1, 1, 1, n), -np.inf, np.float32)  # every key masked: NaN probabilities -> zeros
        (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
        assert np.array_equal(got, want) and not got.any()


def _kept_graph():
    """What nodes keep from their last run (a Reshape's target, a Transpose's order, GatherND's flat rows of a
    cached index, a broadcasting node's size check), fed shapes that change: y = Transpose(Reshape(x, [-1, 2, k]))
    with k from a shape chain; e = Gather(table, ids) (negative ids too); z = GatherND(m, idx) where idx comes from
    Shape -> Range chains (a cached host value); s = a (n, 1) + b (1, m)."""
    ort, T, helper, nh = _tools()

    def c(name, v):
        return nh.from_array(np.asarray(v), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "i2"], ["k"], axis=0),
        helper.make_node("Unsqueeze", ["k", "ax0"], ["k1"]),
        helper.make_node("Concat", ["m1_2", "k1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[2, 0, 1]),
        helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
        helper.make_node("Shape", ["m"], ["sm"]),
        helper.make_node("Gather", ["sm", "i1"], ["w"], axis=0),
        helper.make_node("Range", ["zero", "w", "one"], ["cols"]),
        helper.make_node("Unsqueeze", ["cols", "ax1"], ["cols1"]),
        helper.make_node("Mul", ["cols1", "zero"], ["rows1"]),
        helper.make_node("Concat", ["rows1", "cols1"], ["idx"], axis=1),
        helper.make_node("GatherND", ["m", "idx"], ["z"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
    ]
    inits = [c("i1", np.int64(1)), c("i2", np.int64(2)), c("ax0", np.array([0], np.int64)),
             c("ax1", np.array([1], np.int64)), c("m1_2", np.array([-1, 2], np.int64)), c("zero", np.int64(0)),
             c("one", np.int64(1)), c("table", np.arange(40, dtype=np.float32).reshape(10, 4))]
    f = T.FLOAT
    g = helper.make_graph(nodes, "kept", [helper.make_tensor_value_info("x", f, [2, "h", "k"]),
                                          helper.make_tensor_value_info("ids", T.INT64, ["q"]),
                                          helper.make_tensor_value_info("m", f, [1, "w"]),
                                          helper.make_tensor_value_info("a", f, ["n", "n2"]),
                                          helper.make_tensor_value_info("b", f, ["p2", "p"])],
                          [helper.make_tensor_value_info(n, f, None) for n in ("y", "e", "z", "s")], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_what_nodes_keep_follows_new_shapes_and_a_lowered_limit(device, monkeypatch):
    ort = _tools()[0]
    from ember.errors import LimitError
    from ember.limits import budget
    from ember.onnx import InferenceSession
    model = _kept_graph()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(3)
    # each shape twice in a row (what a node kept is used) and again after another (kept for that one)
    for h, k, q, w, n, p in [(3, 4, 5, 6, 2, 3), (3, 4, 5, 6, 2, 3), (1, 6, 2, 3, 4, 1), (3, 4, 5, 6, 2, 3),
                             (2, 2, 7, 9, 1, 5), (2, 2, 7, 9, 1, 5)]:
        feeds = {"x": rng.standard_normal((2, h, k)).astype(np.float32),
                 "ids": rng.integers(-10, 10, q).astype(np.int64),
                 "m": rng.standard_normal((1, w)).astype(np.float32),
                 "a": rng.standard_normal((n, 1)).astype(np.float32),
                 "b": rng.standard_normal((1, p)).astype(np.float32)}
        want = ref.run(None, feeds)
        got = sess.run(None, feeds)
        for name, g_, w_ in zip(("y", "e", "z", "s"), got, want):
            assert g_.shape == w_.shape, (name, h, k, q, w, n, p)
            np.testing.assert_allclose(g_, w_, rtol=1e-6, atol=1e-6, err_msg=name)
    # two (512, 512) inputs: past the quick bound (the product of the inputs' sizes), their 1 MiB sum passes the
    # full check at the default limit, twice; under a lower limit the same shapes are refused, not passed as before
    feeds.update(a=np.ones((512, 512), np.float32), b=np.ones((512, 512), np.float32))
    for _ in range(2):
        assert sess.run(None, feeds)[3].shape == (512, 512)
    monkeypatch.setattr(budget, "max_tensor_bytes", 1 << 19)
    with pytest.raises(LimitError, match="max_tensor_bytes"):
        sess.run(None, feeds)
