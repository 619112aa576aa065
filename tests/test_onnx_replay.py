"""Replayed runs (core/onnx/trace.py): a session fed the same shapes again replays the steps its earlier run took.
Each against onnxruntime run by run, where the path a replay recorded stops holding: an If whose condition follows
the data, a shape that follows the data (NonZero), an index out of range on the third run of a shape."""
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


def _model(helper, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "replay", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _branching_graph():
    """y = If(ReduceSum(x) > 0, then: x * 2 reshaped by its own Shape, else: x - 1 - Shape(x)[0]), and the shape of
    x as floats: which branch runs follows x's values, not its shape."""
    ort, T, helper, nh = _tools()
    f = lambda name, v: nh.from_array(np.asarray(v), name)  # noqa: E731
    then = helper.make_graph([
        helper.make_node("Shape", ["x"], ["ts"]),
        helper.make_node("Mul", ["x", "two"], ["tm"]),
        helper.make_node("Reshape", ["tm", "ts"], ["tout"]),
    ], "then", [], [helper.make_tensor_value_info("tout", T.FLOAT, None)])
    other = helper.make_graph([
        helper.make_node("Shape", ["x"], ["es"]),
        helper.make_node("Gather", ["es", "zero"], ["e0"], axis=0),
        helper.make_node("Cast", ["e0"], ["e0f"], to=T.FLOAT),
        helper.make_node("Sub", ["x", "one"], ["em"]),
        helper.make_node("Sub", ["em", "e0f"], ["eout"]),
    ], "else", [], [helper.make_tensor_value_info("eout", T.FLOAT, None)])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zerof"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Cast", ["xs"], ["xsf"], to=T.FLOAT),
    ]
    return _model(helper, nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["a", "b"])],
                  [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("xsf", T.FLOAT, [2])],
                  [f("two", np.float32(2)), f("one", np.float32(1)), f("zerof", np.float32(0)), f("zero", np.int64(0))])


def test_a_replay_follows_the_branch_the_data_picks(device):
    ort = _tools()[0]
    from ember.onnx import InferenceSession
    model = _branching_graph()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(0)
    # the same shape over and over (recorded on its second run, replayed after), the sign flipping the branch
    for k, sign in enumerate([1, 1, 1, 1, -1, 1, -1, -1, -1, -1, 1]):
        x = (np.abs(rng.standard_normal((3, 4))) * sign).astype(np.float32)
        want, got = ref.run(None, {"x": x}), sess.run(None, {"x": x})
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"run {k}, sign {sign}")
        y_only = sess.run(["y"], {"x": x})
        assert len(y_only) == 1
        np.testing.assert_allclose(y_only[0], want[0], rtol=1e-6)


def _nonzero_graph():
    """idx = NonZero(x > 0) (2, count), n = its count as a 1-vector, y = ConstantOfShape(n) of 1s + n: the shapes
    after NonZero follow x's values."""
    ort, T, helper, nh = _tools()
    nodes = [
        helper.make_node("Greater", ["x", "zerof"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["idx"]),
        helper.make_node("Shape", ["idx"], ["ish"]),
        helper.make_node("Gather", ["ish", "one_i"], ["count"], axis=0),
        helper.make_node("Unsqueeze", ["count", "ax0"], ["n"]),
        helper.make_node("ConstantOfShape", ["n"], ["ones"], value=nh.from_array(np.ones(1, np.float32))),
        helper.make_node("Cast", ["n"], ["nf"], to=T.FLOAT),
        helper.make_node("Add", ["ones", "nf"], ["y"]),
        # reshapes of a shape no guard reads: a replay reshapes what has the recorded shape, runs the node otherwise
        helper.make_node("Reshape", ["idx", "flat"], ["idx_flat"]),
        helper.make_node("Unsqueeze", ["idx_flat", "ax0"], ["idx_row"]),
        helper.make_node("Squeeze", ["idx_row", "ax0"], ["idx_back"]),
    ]
    inits = [nh.from_array(np.float32(0), "zerof"), nh.from_array(np.int64(1), "one_i"),
             nh.from_array(np.array([0], np.int64), "ax0"), nh.from_array(np.array([-1], np.int64), "flat")]
    return _model(helper, nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 5])],
                  [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("idx", T.INT64, None),
                   helper.make_tensor_value_info("idx_row", T.INT64, None),
                   helper.make_tensor_value_info("idx_back", T.INT64, None)], inits)


def test_a_replay_leaves_its_path_where_a_shape_follows_the_data(device):
    ort = _tools()[0]
    from ember.onnx import InferenceSession
    model = _nonzero_graph()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(1)
    for k, positives in enumerate([3, 3, 3, 3, 7, 3, 0, 10, 10, 10, 2, 5, 5]):
        x = -np.ones(10, np.float32)
        x[rng.permutation(10)[:positives]] = 1
        x = x.reshape(2, 5)
        want, got = ref.run(None, {"x": x}), sess.run(None, {"x": x})
        assert got[0].shape == want[0].shape == (positives,), k
        assert got[2].shape == want[2].shape == (1, 2 * positives), k
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_an_error_in_a_replayed_run_names_its_node_and_the_session_goes_on(device):
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    from ember.errors import EmberError
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    model = _model(helper, [helper.make_node("Gather", ["table", "i"], ["g"], axis=0, name="lookup"),
                            helper.make_node("Relu", ["g"], ["y"])],
                   [helper.make_tensor_value_info("i", T.INT64, [3])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], [nh.from_array(table, "table")])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    good = np.array([0, 5, 2], np.int64)
    for _ in range(3):  # recorded on the second, replayed on the third
        np.testing.assert_array_equal(sess.run(None, {"i": good})[0], ref.run(None, {"i": good})[0])
    with pytest.raises(EmberError, match="lookup"):
        sess.run(None, {"i": np.array([0, 9, 2], np.int64)})
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"i": good[::-1].copy()})[0], ref.run(None, {"i": good[::-1].copy()})[0])


def test_casts_to_the_type_a_value_has_are_read_in_place_in_a_replay(device):
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    nodes = [helper.make_node("Cast", ["x"], ["same"], to=T.FLOAT),            # a float to float: its input
             helper.make_node("Cast", ["same"], ["whole"], to=T.INT32),        # a real cast (truncation)
             helper.make_node("Cast", ["whole"], ["back"], to=T.FLOAT),
             helper.make_node("Add", ["same", "back"], ["y"]),
             helper.make_node("Cast", ["k"], ["k1"], to=T.FLOAT),              # a constant's: the constant
             helper.make_node("Identity", ["same"], ["alias"]),
             helper.make_node("Mul", ["y", "k1"], ["z"])]
    model = _model(helper, nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "z", "same", "alias")],
                   [nh.from_array(np.float32(1.5), "k")])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    rng = np.random.default_rng(4)
    for k in range(5):
        x = (rng.standard_normal((2, 3)) * 4).astype(np.float32)
        for w, g in zip(ref.run(None, {"x": x}), sess.run(None, {"x": x})):
            np.testing.assert_array_equal(g, w, err_msg=f"run {k}")


def test_a_replay_of_a_model_with_hostile_names_runs_what_its_nodes_say(device, tmp_path):
    """The replay is Python written for the recording: value, node and graph names that read as code (quotes, new
    lines, calls) are never in its source."""
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    flag = tmp_path / "ran"
    evil = f"x'\n__import__('pathlib').Path({str(flag)!r}).touch()#\"\\"
    nodes = [helper.make_node("Relu", [evil], [evil + "1"], name=evil),
             helper.make_node("Mul", [evil + "1", "two\n)"], ["y\"'"], name="n\n2")]
    model = _model(helper, nodes, [helper.make_tensor_value_info(evil, T.FLOAT, [4])],
                   [helper.make_tensor_value_info("y\"'", T.FLOAT, None)], [nh.from_array(np.float32(2), "two\n)")])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    for k in range(4):
        x = np.array([-1, 2, -3, 4 + k], np.float32)
        np.testing.assert_array_equal(sess.run(None, {evil: x})[0], ref.run(None, {evil: x})[0])
    assert not flag.exists()


def test_a_replayed_reshape_of_a_shape_no_guard_reads_follows_its_input(device):
    """NonZero's count reaches only reshapes (no Shape node reads it, so no guard): the replay reshapes an input of the
    recorded shape to the recorded output shape, and runs the node on any other."""
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    nodes = [helper.make_node("NonZero", ["x"], ["idx"]),
             helper.make_node("Reshape", ["idx", "flat"], ["idx_flat"]),
             helper.make_node("Unsqueeze", ["idx_flat", "ax0"], ["idx_row"]),
             helper.make_node("Squeeze", ["idx_row", "ax0"], ["idx_back"]),
             helper.make_node("Flatten", ["idx_row"], ["idx_2d"], axis=0)]
    model = _model(helper, nodes, [helper.make_tensor_value_info("x", T.FLOAT, [6])],
                   [helper.make_tensor_value_info(n, T.INT64, None) for n in ("idx_row", "idx_back", "idx_2d")],
                   [nh.from_array(np.array([0], np.int64), "ax0"), nh.from_array(np.array([-1], np.int64), "flat")])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    for k, x in enumerate([[0, 1, 0, 2, 0, 0]] * 3 + [[1, 1, 1, 0, 0, 1], [0] * 6, [0, 1, 0, 2, 0, 0], [3] * 6]):
        x = np.array(x, np.float32)
        want, got = ref.run(None, {"x": x}), sess.run(None, {"x": x})
        for w, g in zip(want, got):
            assert g.shape == w.shape, k
            np.testing.assert_array_equal(g, w)
    assert len(sess._traces) == 1  # (one recording, replayed throughout: no guard left its path)


def test_a_replayed_reshape_checks_its_input_shape_where_the_data_sets_it(device):
    """Reshape's target is a feed's values (the same feed shape, so the same recording): the Unsqueeze after it sees
    (2, 3) and (3, 2), the same size, and must give (1, 2, 3) and (1, 3, 2)."""
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"]),
             helper.make_node("Unsqueeze", ["y", "ax0"], ["z"])]
    model = _model(helper, nodes, [helper.make_tensor_value_info("x", T.FLOAT, [6]),
                                   helper.make_tensor_value_info("s", T.INT64, [2])],
                   [helper.make_tensor_value_info("z", T.FLOAT, None)], [nh.from_array(np.array([0], np.int64), "ax0")])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(model, device=device)
    x = np.arange(6, dtype=np.float32)
    for k, s in enumerate([(2, 3)] * 3 + [(3, 2), (2, 3), (3, 2), (6, 1)]):
        feeds = {"x": x, "s": np.array(s, np.int64)}
        want, got = ref.run(None, feeds)[0], sess.run(None, feeds)[0]
        assert got.shape == want.shape == (1, *s), k
        np.testing.assert_array_equal(got, want)


def test_a_decoder_fed_growing_shapes_generation_after_generation_records_nothing():
    """What a decoder's steps look like (each run a new length, the lengths repeating one generation after another):
    nothing is recorded (a recording per step, compiled and never replayed, cost a third of a generation's time)."""
    ort, T, helper, nh = _tools()
    from ember.onnx import InferenceSession
    model = _model(helper, [helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, ["n"])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)])
    sess = InferenceSession(model)
    for _ in range(3):
        for n in range(1, 6):
            x = np.linspace(-1, 1, n).astype(np.float32)
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    assert not sess._traces
    for _ in range(3):  # the same shape twice in a row: recorded, then replayed
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    assert len(sess._traces) == 1
