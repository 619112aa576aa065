"""ONNX graphs that load but cannot run as given: every run-time failure is ember's error naming the node, its
operator and its inputs' shapes (before: raw IndexError/ValueError/TypeError from inside an operator, 55 of
3,000 mutated graphs), and a Loop whose trip count is known is refused before it runs, not after 2^20
iterations. Each test builds its graph; the sweep mutates generated ones (tests/fuzz/onnx_graphs.py)."""
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from expected_skips import missing

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))


def _onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        missing("pip onnx is not installed (it generates the ONNX node test cases)")
    return onnx, TensorProto, helper, numpy_helper


def _model(nodes, inits=(), shape=(2, 3), opset=17) -> bytes:
    _, T, h, _ = _onnx()
    g = h.make_graph(list(nodes), "g", [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def _i64(name, v):
    return _onnx()[3].from_array(np.array(v, np.int64), name)


X = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.mark.parametrize("case", ["concat-no-axis", "transpose-perm", "reshape", "split-sizes", "gather-axis",
                                  "einsum", "matmul"])
def test_a_node_that_cannot_run_is_an_ember_error_naming_it(case):
    from ember.onnx import InferenceSession, OnnxFormatError
    _, _, h, _ = _onnx()
    nodes, inits = {
        "concat-no-axis": ([h.make_node("Concat", ["x", "x"], ["y"], name="cat")], []),  # axis is required
        "transpose-perm": ([h.make_node("Transpose", ["x"], ["y"], perm=[0, 0], name="cat")], []),
        "reshape": ([h.make_node("Reshape", ["x", "s"], ["y"], name="cat")], [_i64("s", [4, 4])]),
        "split-sizes": ([h.make_node("Split", ["x", "s"], ["y", "z"], axis=1, name="cat")], [_i64("s", [2, 5])]),
        "gather-axis": ([h.make_node("Gather", ["x", "i"], ["y"], axis=5, name="cat")], [_i64("i", [0])]),
        "einsum": ([h.make_node("Einsum", ["x"], ["y"], equation="ijk->i", name="cat")], []),
        "matmul": ([h.make_node("MatMul", ["x", "x"], ["y"], name="cat")], []),
    }[case]
    sess = InferenceSession(_model(nodes, inits))
    with pytest.raises(OnnxFormatError) as e:
        sess.run(None, {"x": X})
    msg = str(e.value)
    assert msg.startswith("ember: <") and "node 'cat' (" in msg, msg
    assert "'x': float32 (2, 3)" in msg, msg  # the offending input's dtype and shape


def test_the_node_error_names_a_node_inside_a_loop_body():
    from ember.onnx import InferenceSession, OnnxNodeError
    _, T, h, nh = _onnx()
    body = h.make_graph([h.make_node("Identity", ["c"], ["c_out"]),
                         h.make_node("Concat", ["v", "v"], ["v_out"], name="inner")], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                         h.make_tensor_value_info("v", T.FLOAT, None)],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None)])
    sess = InferenceSession(_model([h.make_node("Loop", ["m", "", "x"], ["y"], body=body, name="outer")],
                                   [_i64("m", 2)]))
    with pytest.raises(OnnxNodeError, match=r"node 'inner' \(Concat\) failed on inputs \['v': float32 \(2, 3\)"):
        sess.run(None, {"x": X})


def test_a_counted_loop_past_the_budget_is_refused_before_it_runs():
    # 2^40 iterations of a body that hands its condition back: before, refused only after 2^20 (55 s)
    from ember.errors import LimitError
    from ember.onnx import InferenceSession
    _, T, h, nh = _onnx()
    body = h.make_graph([h.make_node("Identity", ["c"], ["c_out"]), h.make_node("Add", ["v", "one"], ["v_out"])],
                        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                                 h.make_tensor_value_info("v", T.FLOAT, None)],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None)],
                        [nh.from_array(np.array(1.0, np.float32), "one")])
    for trip in (1 << 40, (1 << 20) + 1):
        sess = InferenceSession(_model([h.make_node("Loop", ["m", "", "x"], ["y"], body=body, name="big")],
                                       [_i64("m", trip)]))
        t0 = time.perf_counter()
        with pytest.raises(LimitError, match=rf"node 'big' \(Loop\): iterations is {trip}, over the limit"):
            sess.run(None, {"x": X})
        assert time.perf_counter() - t0 < 1
    # within the budget: what onnxruntime gives
    ort = pytest.importorskip("onnxruntime")
    raw = _model([h.make_node("Loop", ["m", "", "x"], ["y"], body=body)], [_i64("m", 7)])
    ref = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": X})[0]
    np.testing.assert_array_equal(InferenceSession(raw).run(None, {"x": X})[0], ref)


def test_mutated_graphs_end_in_a_result_or_an_ember_error():
    """The fuzzer's generator and mutator (tests/fuzz/onnx_graphs.py) over 300 graphs: each loads and runs or
    raises ember's error; the run-time ones name their node (OnnxNodeError or a guard's refusal)."""
    _onnx()
    import onnx_graphs as G
    from ember.errors import EmberError
    from ember.onnx import InferenceSession, OnnxNodeError
    outcomes = {"ok": 0, "ember": 0, "node": 0}
    raw_errors = []
    for i in range(300):
        rng = random.Random(f"test-onnx-run:{i}")
        raw = G.generate(rng)
        if rng.random() < 0.6:
            raw = G.mutate(rng, raw)
        try:
            sess = InferenceSession(raw)
            sess.run(None, G.feeds(sess))
            outcomes["ok"] += 1
        except OnnxNodeError:
            outcomes["node"] += 1
        except EmberError:
            outcomes["ember"] += 1
        except Exception as e:  # noqa: BLE001  what this test exists to find
            raw_errors.append((i, f"{type(e).__name__}: {e}"))
    assert not raw_errors, raw_errors[:10]
    assert outcomes["node"] > 10 and outcomes["ok"] > 50, outcomes
