"""wasm/tools/onnx.py (the page's loadModel("onnx") / run(feeds), Python side) through the worker's one load
and run request, in CPython: tensors as
{type, dims, bytes} come back equal to onnxruntime's on the same model; unsupported operators are named at
load; bad feeds are error codes, never exceptions (the worker must stay alive)."""
import asyncio

import numpy as np
import pytest

from expected_skips import missing

from ember.wasm import worker_api
from ember.wasm.tools import onnx as onnx_tool


def _deps():
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        missing("onnx and onnxruntime are the references for ONNX models")
    return onnx, ort


def small_model():
    """Conv -> Relu -> global pool -> Gemm -> Softmax, plus an ArgMax (int64) and a Greater (bool) output."""
    onnx, _ = _deps()
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "fc"),
             numpy_helper.from_array(np.zeros((1, 5), np.float32), "zero")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
             helper.make_node("ArgMax", ["logits"], ["best"], axis=1, keepdims=0),
             helper.make_node("Greater", ["logits", "zero"], ["positive"])]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 5]),
         helper.make_tensor_value_info("best", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("positive", TensorProto.BOOL, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def call(op, args):
    return asyncio.run(worker_api.handle(op, {"tool": "onnx", **args}))


def test_load_and_run_equal_onnxruntime(tmp_path):
    _, ort = _deps()
    path = tmp_path / "small.onnx"
    path.write_bytes(small_model())
    info = call("load", {"folder": str(tmp_path), "device": "cpu"})["ok"]
    assert info["inputs"] == [{"name": "x", "type": "tensor(float)", "shape": [1, 3, 8, 8]}]
    assert [o["name"] for o in info["outputs"]] == ["probs", "best", "positive"]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    r = call("run", {"input": {"x": {"type": "float32", "dims": [1, 3, 8, 8], "bytes": x.tobytes()}}})["ok"]
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    out = r["outputs"]
    assert [out[k]["type"] for k in ("probs", "best", "positive")] == ["float32", "int64", "bool"]
    probs = np.frombuffer(out["probs"]["bytes"], np.float32).reshape(out["probs"]["dims"])
    np.testing.assert_allclose(probs, want[0], rtol=1e-5, atol=1e-6)
    assert np.frombuffer(out["best"]["bytes"], np.int64).tolist() == want[1].tolist()
    assert np.frombuffer(out["positive"]["bytes"], np.bool_).reshape(1, 5).tolist() == want[2].tolist()
    assert r["ms"] >= 0


def test_unsupported_operator_is_named_at_load(tmp_path):
    onnx, _ = _deps()
    from onnx import TensorProto, helper
    # an onnxruntime contrib operator ember does not run: named with its domain and opset
    g = helper.make_graph([helper.make_node("DecoderMaskedMultiHeadAttention", ["s"], ["t"], domain="com.microsoft")],
                          "g", [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 8])],
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 1, 8])])
    path = tmp_path / "dmmha.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                         helper.make_opsetid("com.microsoft", 1)]).SerializeToString())
    r = call("load", {"folder": str(tmp_path)})
    assert r["error"] == "bad_model" and "com.microsoft.DecoderMaskedMultiHeadAttention (opset 1)" in r["message"]


def test_string_output_is_a_clear_error(tmp_path):
    """ember.onnx returns strings in Python; the page's typed arrays cannot, so run says so (not a crash)."""
    onnx, _ = _deps()
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Constant", [], ["w"], value=helper.make_tensor("w", TensorProto.STRING, [1], [b"km"])),
             helper.make_node("StringConcat", ["w", "w"], ["t"]), helper.make_node("Identity", ["x"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("t", TensorProto.STRING, [1]),
                           helper.make_tensor_value_info("y", TensorProto.INT64, [1])])
    path = tmp_path / "strings.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    assert "ok" in call("load", {"folder": str(tmp_path)})
    r = call("run", {"input": {"x": {"type": "int64", "dims": [1], "bytes": np.array([5], np.int64).tobytes()}}})
    assert r["error"] == "bad_model" and "string tensor" in r["message"]


@pytest.mark.parametrize("feed,why", [
    ({"x": {"type": "float32", "dims": [1, 3, 8, 8], "bytes": b"\0" * 12}}, "need 768 bytes"),
    ({"x": {"type": "complex64", "dims": [1], "bytes": b"\0" * 8}}, "unknown type"),
    ({"y": {"type": "float32", "dims": [1], "bytes": b"\0" * 4}}, "unknown inputs"),
])
def test_bad_feeds_are_bad_requests(tmp_path, feed, why):
    path = tmp_path / "small.onnx"
    path.write_bytes(small_model())
    call("load", {"folder": str(tmp_path)})
    r = call("run", {"input": feed})
    assert r["error"] == "bad_request" and why in r["message"], r


def test_run_before_load_says_so():
    onnx_tool._STATE.clear()
    r = call("run", {"input": {}})
    assert r["error"] == "not_loaded"
