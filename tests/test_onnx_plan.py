"""The planned executor (core/onnx/plan.py): shape-only steps run on the host and are cached by the input
shapes they come from, values are freed after their last reader, patterns fuse. Each against onnxruntime
on the same model, with the input shape changing from run to run (a stale cached shape would show)."""
import numpy as np

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
