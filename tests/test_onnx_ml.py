"""ai.onnx.ml preprocessing and linear operators the node suite has no cases for (Scaler, Normalizer,
OneHotEncoder, Imputer, LinearRegressor), each against onnx's reference evaluator on the same model and
input, and the string tensors they take (fed and returned as numpy arrays of str, as onnxruntime does)."""
import numpy as np
import pytest

from expected_skips import missing


def _onnx():
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        missing("pip onnx is not installed (it generates the ONNX node test cases)")
    return onnx, ReferenceEvaluator


def _model(op_type, x_type, y_type, x_shape, y_shape, **attrs):
    onnx, _ = _onnx()
    from onnx import helper
    node = helper.make_node(op_type, ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info("y", y_type, y_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    return m.SerializeToString()


def _cases():
    from onnx import TensorProto as T
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    holes = x.copy()
    holes[1, 2] = holes[3, 0] = np.nan
    yield "scaler", _model("Scaler", T.FLOAT, T.FLOAT, [5, 3], [5, 3], offset=[0.5, -1.0, 2.0], scale=[2.0, 0.5, 3.0]), x
    yield "scaler_int", _model("Scaler", T.INT64, T.FLOAT, [5, 3], [5, 3], offset=[0.25], scale=[4.0]), \
        (x * 10).astype(np.int64)
    for norm in ("MAX", "L1", "L2"):
        zero = x.copy()
        zero[2] = 0
        yield f"normalizer_{norm}", _model("Normalizer", T.FLOAT, T.FLOAT, [5, 3], [5, 3], norm=norm), zero
    ids = np.array([[3, 1], [7, 3], [1, 9]], np.int64)
    yield "one_hot_int", _model("OneHotEncoder", T.INT64, T.FLOAT, [3, 2], [3, 2, 3], cats_int64s=[1, 3, 7]), ids
    words = np.array([["cat", "dog"], ["emu", "cat"]], dtype=object)
    yield "one_hot_str", _model("OneHotEncoder", T.STRING, T.FLOAT, [2, 2], [2, 2, 2], cats_strings=["dog", "cat"]), words
    yield "imputer_nan", _model("Imputer", T.FLOAT, T.FLOAT, [5, 3], [5, 3], imputed_value_floats=[1.0, 2.0, 3.0],
                                replaced_value_float=float("nan")), holes
    yield "imputer_int", _model("Imputer", T.INT64, T.INT64, [3, 2], [3, 2], imputed_value_int64s=[-5],
                                replaced_value_int64=3), ids
    yield "linear_regressor", _model("LinearRegressor", T.FLOAT, T.FLOAT, [5, 3], [5, 2], targets=2,
                                     coefficients=[0.5, -1.0, 2.0, 1.5, 0.25, -0.75], intercepts=[0.1, -0.2]), x


def test_ml_operators_match_reference(device):
    _, ReferenceEvaluator = _onnx()
    from ember.onnx import InferenceSession
    for name, model, x in _cases():
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        (got,) = InferenceSession(model, device=device).run(None, {"x": x})
        assert got.shape == np.asarray(want).shape, name
        np.testing.assert_allclose(got.astype(np.float64), np.asarray(want).astype(np.float64), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_string_tensors_round_trip(device):
    """A string feed reaches the string operators and comes back as str (bytes feeds decode as UTF-8)."""
    onnx, ReferenceEvaluator = _onnx()
    from onnx import TensorProto as T
    from onnx import helper

    from ember.onnx import InferenceSession
    nodes = [helper.make_node("StringConcat", ["a", "b"], ["ab"]),
             helper.make_node("RegexFullMatch", ["ab"], ["hit"], pattern=r"[a-z]+ (dog|cat)")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, T.STRING, [2]) for n in "ab"],
                          [helper.make_tensor_value_info("ab", T.STRING, [2]),
                           helper.make_tensor_value_info("hit", T.BOOL, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    feeds = {"a": np.array(["big ", "süß "], dtype=object), "b": np.array([b"dog", "emu"], dtype=object)}
    want = ReferenceEvaluator(model).run(None, {"a": feeds["a"], "b": np.array(["dog", "emu"], dtype=object)})
    got = InferenceSession(model, device=device).run(None, feeds)
    assert got[0].tolist() == want[0].tolist() == ["big dog", "süß emu"]
    assert got[1].tolist() == want[1].tolist() == [True, False]


def test_hostile_ml_attributes_are_ember_errors():
    onnx, _ = _onnx()
    from onnx import TensorProto as T

    from ember.errors import EmberError
    from ember.onnx import InferenceSession
    bad = _model("LinearRegressor", T.FLOAT, T.FLOAT, [2, 3], [2, 1], coefficients=[1.0, 2.0])
    with pytest.raises(EmberError, match="2 coefficients for 1 targets x 3 features"):
        InferenceSession(bad).run(None, {"x": np.zeros((2, 3), np.float32)})
    strict = _model("OneHotEncoder", T.INT64, T.FLOAT, [2], [2, 2], cats_int64s=[1, 2], zeros=0)
    with pytest.raises(EmberError, match="category 5 is not in cats"):
        InferenceSession(strict).run(None, {"x": np.array([1, 5], np.int64)})


def test_overlong_regex_is_a_limit_error():
    onnx, _ = _onnx()
    from onnx import TensorProto as T
    from onnx import helper

    from ember.errors import LimitError
    from ember.limits import budget
    from ember.onnx import InferenceSession
    node = helper.make_node("RegexFullMatch", ["s"], ["hit"], pattern="a" * (budget.max_regex_chars + 1))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", T.STRING, [1])],
                          [helper.make_tensor_value_info("hit", T.BOOL, [1])])
    sess = InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    with pytest.raises(LimitError, match="max_regex_chars"):
        sess.run(None, {"s": np.array(["a"], dtype=object)})
