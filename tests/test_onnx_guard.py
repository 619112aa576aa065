"""Hostile ONNX graphs whose data asks for more than the file holds: an operator that sizes its output from
numbers in the graph (ConstantOfShape, Expand, Tile, Range, Pad, OneHot, Resize, StringSplit, random
generators, DFT), broadcasting that multiplies its inputs' sizes, a Loop that never ends, and regex
patterns that make Python's `re` backtrack exponentially. Each must end quickly with ember's error naming
the node and the limit (or, for the regex, the answer RE2 gives, checked against `re` where `re` is fast)."""
import re
import time

import numpy as np
import pytest

from expected_skips import missing


def _helpers():
    try:
        import onnx  # noqa: F401
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        missing("pip onnx is not installed (it generates the ONNX node test cases)")
    return TensorProto, helper, numpy_helper


def _session(nodes, inits=(), inputs=(), outputs=("y",), opset=20):
    T, helper, _ = _helpers()
    from ember.onnx import InferenceSession
    g = helper.make_graph(list(nodes), "hostile", list(inputs),
                          [helper.make_tensor_value_info(o, T.UNDEFINED, None) for o in outputs],
                          initializer=list(inits))
    return InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())


def _i64(name, values):
    _, _, nh = _helpers()
    return nh.from_array(np.array(values, np.int64), name)


def _f32(name, values):
    _, _, nh = _helpers()
    return nh.from_array(np.array(values, np.float32), name)


def _cases():
    T, h, nh = _helpers()
    big = [1 << 20, 1 << 20]  # 4 TiB of float32
    yield "ConstantOfShape", [h.make_node("ConstantOfShape", ["s"], ["y"])], [_i64("s", big)], "max_tensor_bytes"
    yield "Expand", [h.make_node("Expand", ["x", "s"], ["y"])], [_f32("x", [[1.0]]), _i64("s", big)], "max_tensor_bytes"
    yield "Tile", [h.make_node("Tile", ["x", "r"], ["y"])], [_f32("x", [[1.0, 2.0]]), _i64("r", big)], "max_tensor_bytes"
    yield "Range", [h.make_node("Range", ["a", "b", "d"], ["y"])], \
        [_f32("a", 0.0), _f32("b", 1e13), _f32("d", 1.0)], "max_tensor_bytes"
    yield "Range delta 0", [h.make_node("Range", ["a", "b", "d"], ["y"])], \
        [_f32("a", 0.0), _f32("b", 1.0), _f32("d", 0.0)], "no finite length"
    yield "Pad", [h.make_node("Pad", ["x", "p"], ["y"])], [_f32("x", [[1.0]]), _i64("p", [0, 0, 1 << 20, 1 << 20])], \
        "max_tensor_bytes"
    yield "OneHot", [h.make_node("OneHot", ["i", "d", "v"], ["y"])], \
        [_i64("i", [1, 2, 3]), _i64("d", [1 << 40]), _f32("v", [0.0, 1.0])], "max_tensor_bytes"
    yield "Resize", [h.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")], \
        [_f32("x", np.ones((1, 1, 2, 2))), _f32("sc", [1, 1, 1e6, 1e6])], "max_tensor_bytes"
    yield "RandomNormal", [h.make_node("RandomNormal", [], ["y"], shape=big)], [], "max_tensor_bytes"
    yield "DFT", [h.make_node("DFT", ["x", "n"], ["y"])], [_f32("x", np.ones((1, 4, 1))), _i64("n", [1 << 24])], \
        "max_tensor_bytes"
    # broadcasting: 400 KB of inputs, (100000, 1) + (1, 100000) -> 40 GB
    yield "Add broadcast", [h.make_node("Add", ["a", "b"], ["y"])], \
        [_f32("a", np.ones((100000, 1))), _f32("b", np.ones((1, 100000)))], "max_tensor_bytes"
    yield "MatMul broadcast", [h.make_node("MatMul", ["a", "b"], ["y"])], \
        [_f32("a", np.ones((3000, 1, 64, 64))), _f32("b", np.ones((1, 3000, 64, 64)))], "max_tensor_bytes"
    strings = nh.from_array(np.array([" ".join(["w"] * 60000)] + ["w"] * 60000, dtype=object), "s")
    yield "StringSplit", [h.make_node("StringSplit", ["s"], ["y", "n"], delimiter=" ")], [strings], "max_tensor_bytes"


@pytest.mark.parametrize("name", [c[0] for c in _cases()])
def test_data_sized_output_is_a_limit_error(name):
    from ember.errors import EmberError
    nodes, inits, match = next((c[1], c[2], c[3]) for c in _cases() if c[0] == name)
    outs = [o for n in nodes for o in n.output]
    t = time.process_time()
    sess = _session(nodes, inits, outputs=outs)  # folded at load: the error is deferred to the run
    with pytest.raises(EmberError, match=match) as e:
        sess.run(None, {})
    assert "ember:" in str(e.value) and nodes[-1].op_type in str(e.value)
    # a bound on hanging, not a speed test: this process's CPU seconds (~1 at most here), which other processes'
    # load does not inflate as it does a wall clock
    assert time.process_time() - t < 30


def test_real_sized_outputs_still_run():
    """The same operators at sizes real models use are untouched: ConstantOfShape and Add broadcast."""
    T, h, _ = _helpers()
    sess = _session([h.make_node("ConstantOfShape", ["s"], ["c"]), h.make_node("Add", ["c", "b"], ["y"])],
                    [_i64("s", [64, 1]), _f32("b", np.arange(32.0).reshape(1, 32))], outputs=["y"])
    (y,) = sess.run(None, {})
    np.testing.assert_array_equal(y, np.zeros((64, 1), np.float32) + np.arange(32.0, dtype=np.float32))


def _counting_body(h, T, cond_node):
    return h.make_graph([cond_node, h.make_node("Add", ["v", "one"], ["v_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                         h.make_tensor_value_info("v", T.FLOAT, [])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [])],
                        initializer=[_f32("one", 1.0), _i64("limit", 1 << 62)])


def test_endless_loop_is_refused_before_it_runs_or_stopped_at_the_budget(monkeypatch):
    """Loop with no trip count whose body hands its condition back unchanged never ends: refused before the
    first iteration. One whose condition is computed (i < 2^62) is stopped at the budget as it runs."""
    import time
    T, h, nh = _helpers()
    from ember.errors import LimitError
    from ember.limits import budget
    from ember.onnx import OnnxFormatError
    passthrough = _counting_body(h, T, h.make_node("Identity", ["c"], ["c_out"]))
    loop = h.make_node("Loop", ["", "cond", "v0"], ["y"], body=passthrough, name="forever")
    sess = _session([loop], [nh.from_array(np.array(True), "cond"), _f32("v0", 0.0)])
    t0 = time.perf_counter()
    with pytest.raises(OnnxFormatError, match="node 'forever' \\(Loop\\) has no trip count .* it would never stop"):
        sess.run(None, {})
    assert time.perf_counter() - t0 < 1
    computed = _counting_body(h, T, h.make_node("Less", ["i", "limit"], ["c_out"]))
    sess = _session([h.make_node("Loop", ["", "cond", "v0"], ["y"], body=computed)],
                    [nh.from_array(np.array(True), "cond"), _f32("v0", 0.0)])
    monkeypatch.setattr(budget, "max_loop_iterations", 300)
    with pytest.raises(LimitError, match="iterations is 301, over the limit of 300.*max_loop_iterations"):
        sess.run(None, {})
    monkeypatch.setattr(budget, "max_loop_iterations", 1 << 20)
    trip = h.make_node("Loop", ["m", "cond", "v0"], ["y"], body=passthrough)
    (y,) = _session([trip], [_i64("m", 250), nh.from_array(np.array(True), "cond"), _f32("v0", 0.0)]).run(None, {})
    assert float(y) == 250.0


def test_allocation_past_the_machine_is_ember_error(monkeypatch):
    """With the budget lifted, numpy's own refusal (a 4 TiB array) still comes back as ember's error."""
    T, h, _ = _helpers()
    from ember.errors import EmberError
    from ember.limits import budget
    monkeypatch.setattr(budget, "max_tensor_bytes", 1 << 62)
    sess = _session([h.make_node("ConstantOfShape", ["s"], ["y"])], [_i64("s", [1 << 21, 1 << 20])])
    with pytest.raises(EmberError, match="ran out of memory"):
        sess.run(None, {})


def _regex(pattern):
    T, h, _ = _helpers()
    return _session([h.make_node("RegexFullMatch", ["s"], ["y"], pattern=pattern)],
                    inputs=[h.make_tensor_value_info("s", T.STRING, [None])])


def test_backtracking_regex_runs_in_linear_time_with_re_answers():
    """(a+)+$ and friends against inputs `re` needs exponential time for give RE2's answer quickly; on
    short random strings (where `re` is fast) every answer equals re.fullmatch."""
    hostile = {r"(a+)+$": "a" * 4000 + "b", r"(a|aa)*c": "a" * 4000, r"(\w+\s?)*$": "word " * 800 + "!",
               r"(?:[a-z]+\.)+com": "a." * 2000 + "org"}
    for p, s in hostile.items():
        t = time.process_time()  # CPU seconds of this process (~0.05 here; exponential would be years)
        (y,) = _regex(p).run(None, {"s": np.array([s, s[:40] if p != r"(a|aa)*c" else "aaac"], dtype=object)})
        assert time.process_time() - t < 20
        assert y.tolist() == [False, re.fullmatch(p, s[:40] if p != r"(a|aa)*c" else "aaac") is not None]
    rng = np.random.default_rng(0)
    alphabet = list("abcxyz .,019\nAB_")
    pats = [r"(a+)+b?", r"(a|ab)*(c|bc)", r"(?i)(Ab|c)+d", r"(x?){3}y*", r"([^a]\s*)+\b[0-9]+", r"(a{1,3}b)*.{0,2}",
            r"(?:[a-z]+\.)+co", r"(\d+,)*\d+", r"(ab|a|)*$"]
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 10))) for _ in range(300)]
    texts += ["aaab", "abbc", "AbcAbd", "xxyyy", "b 019", "aabab..", "x.y.co", "1,22,3", "abab"]
    strings = np.array(texts, dtype=object)
    for p in pats:
        (y,) = _regex(p).run(None, {"s": strings})
        assert y.tolist() == [re.fullmatch(p, s) is not None for s in texts], p


@pytest.mark.parametrize("pattern,what", [(r"(a)\1", "backreference"), (r"(?=a)a", "lookahead"),
                                          (r"(?<!x)a", "lookahead/lookbehind")])
def test_non_re2_regex_is_refused(pattern, what):
    from ember.errors import EmberError
    with pytest.raises(EmberError, match=what):
        _regex(pattern).run(None, {"s": np.array(["a"], dtype=object)})


# ---------------------------------------------------------------------------- onnxruntime's contrib operators

def _contrib(node, inits, inputs=(), outputs=("y",)):
    T, helper, _ = _helpers()
    from ember.onnx import InferenceSession
    g = helper.make_graph([node], "hostile", list(inputs),
                          [helper.make_tensor_value_info(o, T.UNDEFINED, None) for o in outputs], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return InferenceSession(m.SerializeToString())


def _contrib_cases():
    T, h, nh = _helpers()
    ms = "com.microsoft"
    u8 = lambda n, a: nh.from_array(np.asarray(a, np.uint8), n)  # noqa: E731
    i32 = lambda n, a: nh.from_array(np.asarray(a, np.int32), n)  # noqa: E731
    # GroupQueryAttention sizes its present buffer from total_sequence_length
    gqa = h.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "sl", "tot"], ["y", "pk2", "pv2"],
                      domain=ms, num_heads=2, kv_num_heads=1, name="gqa0")
    yield "GQA total_sequence_length", gqa, [
        _f32("q", np.ones((1, 1, 32))), _f32("k", np.ones((1, 1, 16))), _f32("v", np.ones((1, 1, 16))),
        _f32("pk", np.ones((1, 1, 2, 16))), _f32("pv", np.ones((1, 1, 2, 16))), i32("sl", [2]),
        i32("tot", (1 << 31) - 1)], "max_tensor_bytes", ("y", "pk2", "pv2")
    yield "GQA seqlens_k past the total", gqa, [
        _f32("q", np.ones((1, 1, 32))), _f32("k", np.ones((1, 1, 16))), _f32("v", np.ones((1, 1, 16))),
        _f32("pk", np.ones((1, 1, 2, 16))), _f32("pv", np.ones((1, 1, 2, 16))), i32("sl", [99]), i32("tot", 3)], \
        r"node 'gqa0' \(GroupQueryAttention\): seqlens_k", ("y", "pk2", "pv2")
    # MatMulNBits: an omitted projection (an empty B) of N = 2^40 outputs; B not matching N, K
    yield "MatMulNBits omitted N", h.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain=ms, K=32, N=1 << 40,
                                               bits=4, block_size=32, name="mm0"), \
        [_f32("a", np.ones((1, 32))), u8("b", np.zeros((0, 1, 16))), _f32("s", np.ones(0))], "max_tensor_bytes", ("y",)
    yield "MatMulNBits B shape", h.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain=ms, K=64, N=1 << 30,
                                             bits=4, block_size=32, name="mm1"), \
        [_f32("a", np.ones((1, 64))), u8("b", np.zeros((2, 2, 16))), _f32("s", np.ones((2, 2)))], \
        r"node 'mm1' \(MatMulNBits\): B uint8 .* must be uint8 \(N=1073741824", ("y",)
    # lookups past their tables
    yield "EmbedLayerNormalization ids", h.make_node(
        "EmbedLayerNormalization", ["ids", "", "w", "p", "", "g", "b"], ["y"], domain=ms, name="emb0"), \
        [i32("ids", [[1, 1 << 30]]), _f32("w", np.ones((4, 8))), _f32("p", np.ones((4, 8))), _f32("g", np.ones(8)),
         _f32("b", np.ones(8))], r"node 'emb0' \(EmbedLayerNormalization\): input_ids holds 1\.\.1073741824", ("y",)
    yield "RotaryEmbedding positions", h.make_node("RotaryEmbedding", ["x", "pos", "c", "s"], ["y"], domain=ms,
                                                   name="rot0"), \
        [_f32("x", np.ones((1, 1, 2, 8))), _i64("pos", [[5, 1 << 40]]), _f32("c", np.ones((4, 4))),
         _f32("s", np.ones((4, 4)))], r"node 'rot0' \(RotaryEmbedding\): position ids", ("y",)
    yield "Attention past_sequence_length", h.make_node(
        "Attention", ["x", "w", "", "", "past", "", "plen"], ["y", "present"], domain=ms, num_heads=2,
        past_present_share_buffer=1, name="att0"), \
        [_f32("x", np.ones((1, 1, 8))), _f32("w", np.ones((8, 24))), _f32("past", np.ones((2, 1, 2, 4, 4))),
         i32("plen", 1 << 30)], r"node 'att0' \(Attention\): past_sequence_length 1073741824", ("y", "present")


@pytest.mark.parametrize("case", list(_contrib_cases()), ids=lambda c: c[0])
def test_contrib_operators_refuse_hostile_values(case):
    """The contrib operators bound what they allocate and check what they index, naming the node."""
    from ember.errors import EmberError
    _, node, inits, match, outs = case
    t = time.perf_counter()
    with pytest.raises(EmberError, match=match):
        _contrib(node, inits, outputs=outs).run(None, {})
    assert time.perf_counter() - t < 10
