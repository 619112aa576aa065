"""ember.onnx.InferenceSession: onnxruntime's API, checked against onnxruntime on the same model and
inputs on every device; unsupported operators are named at load."""
import numpy as np
import pytest

from expected_skips import missing

onnx = pytest.importorskip("onnx")  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ember.onnx import InferenceSession, UnsupportedOperatorError  # noqa: E402


def _small_cnn(rng):
    """Conv -> BatchNorm -> Relu -> MaxPool -> Resize -> GlobalAveragePool -> Gemm -> Softmax, with a
    dynamic batch and shape arithmetic (Shape/Gather/Concat/Reshape) as exporters write it."""
    f = lambda a, n: numpy_helper.from_array(np.asarray(a, np.float32), n)  # noqa: E731
    i = lambda a, n: numpy_helper.from_array(np.asarray(a, np.int64), n)  # noqa: E731
    inits = [f(rng.standard_normal((8, 3, 3, 3)) * 0.3, "w"), f(rng.standard_normal(8), "b"),
             f(rng.random(8) + 0.5, "g"), f(rng.standard_normal(8) * 0.1, "be"),
             f(rng.standard_normal(8) * 0.1, "mu"), f(rng.random(8) + 0.5, "var"),
             f(rng.standard_normal((8, 5)), "fc"), f(rng.standard_normal(5), "fcb"),
             f([1, 1, 2, 2], "scales"), i([0], "zero"), i([-1], "minus1")]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["p", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("GlobalAveragePool", ["up"], ["gap"]),
        helper.make_node("Shape", ["gap"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["gap", "flat_shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 9, 9])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 5]),
                           helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_matches_onnxruntime(device, rng):
    try:
        import onnxruntime as ort
    except ImportError:
        missing("onnxruntime is not installed (the reference for ONNX sessions)")
    model = _small_cnn(rng)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    sess = InferenceSession(model, device=device)
    got = sess.run(None, {"x": x})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    (logits,) = sess.run(["logits"], {"x": x})  # a subset of outputs, by name
    np.testing.assert_allclose(logits, want[1], rtol=1e-4, atol=1e-5)


def test_inputs_outputs_described(rng):
    sess = InferenceSession(_small_cnn(rng))
    (inp,) = sess.get_inputs()  # initializers are not inputs
    assert (inp.name, inp.type, inp.shape) == ("x", "tensor(float)", ["N", 3, 9, 9])
    assert [(o.name, o.shape) for o in sess.get_outputs()] == [("prob", ["N", 5]), ("logits", ["N", 5])]
    with pytest.raises(ValueError, match="missing input 'x'"):
        sess.run(None, {})


def test_unsupported_ops_named_at_load():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("NoSuchOp", ["a"], ["b"]),
             helper.make_node("Thing", ["b"], ["y"], domain="com.acme")]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])  # noqa: E731
    g = helper.make_graph(nodes, "g", [vi("x")], [vi("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 3)])
    with pytest.raises(UnsupportedOperatorError, match=r"NoSuchOp \(opset 17\), com\.acme\.Thing \(opset 3\)") as e:
        InferenceSession(m.SerializeToString())
    assert e.value.missing == [("", "NoSuchOp", 17), ("com.acme", "Thing", 3)]


def test_opset_selects_attribute_form():
    """Squeeze takes axes as an attribute before opset 13 and as an input from 13 on."""
    x = np.zeros((1, 3, 1), np.float32)
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    old = helper.make_model(helper.make_graph([helper.make_node("Squeeze", ["x"], ["y"], axes=[0])], "g",
                                              [vi("x", [1, 3, 1])], [vi("y", [3, 1])]),
                            opset_imports=[helper.make_opsetid("", 11)])
    new = helper.make_model(helper.make_graph([helper.make_node("Squeeze", ["x", "a"], ["y"])], "g",
                                              [vi("x", [1, 3, 1])], [vi("y", [3, 1])],
                                              [numpy_helper.from_array(np.array([0], np.int64), "a")]),
                            opset_imports=[helper.make_opsetid("", 13)])
    for m in (old, new):
        assert InferenceSession(m.SerializeToString()).run(None, {"x": x})[0].shape == (3, 1)


def test_cli_runs_model(tmp_path, rng, capsys):
    import json

    import onnxruntime as ort

    from ember.cli import main
    model = tmp_path / "cnn.onnx"
    model.write_bytes(_small_cnn(rng))
    x = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["onnx", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--output", "prob", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(["prob"], {"x": x})[0]
    assert got["prob"]["shape"] == [1, 5]
    np.testing.assert_allclose(np.array(got["prob"]["values"], np.float32), want, rtol=1e-4, atol=1e-6)
    with pytest.raises(SystemExit) as e:  # not NAME=FILE: a usage error, exit 2, before the model is read
        main(["onnx", str(model), "--input", "x"])
    assert e.value.code == 2
