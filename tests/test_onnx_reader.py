"""ember.onnx's protobuf reader against models the `onnx` package writes: every field the executor uses,
typed and raw tensor payloads, external data, subgraphs; hostile files raise OnnxFormatError naming
the field and limit (never another exception, a huge allocation or deep recursion)."""
import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")  # noqa: E402  (the reference writer; ember never imports it)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ember.onnx import OnnxFormatError, load_model, read_tensor  # noqa: E402
from ember.onnx.tensor_data import to_numpy  # noqa: E402
from ember.onnx.wire import MAX_DEPTH  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=17, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.x", 2)], **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16,
                                   np.int32, np.int64, np.uint32, np.uint64, np.bool_])
@pytest.mark.parametrize("raw", [True, False])
def test_tensor_payloads(dtype, raw):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 4)) * 50).astype(dtype)
    if raw:
        t = numpy_helper.from_array(a, "w")
    else:  # the typed *_data fields (float_data, int32_data with 16-bit bit patterns, uint64_data ...)
        t = helper.make_tensor("w", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape,
                               a.flatten().tolist() if dtype != np.float16 else a.flatten(), raw=False)
    want = numpy_helper.to_array(t)
    got = to_numpy(read_tensor(t.SerializeToString())[0], "t")
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_model_fields():
    sub = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "then", [],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    node = helper.make_node("If", ["c"], ["z"], name="branch", then_branch=sub, else_branch=sub,
                            f=1.5, i=-7, s="txt", floats=[1.0, 2.5], ints=[3, -4], strings=["a", "b"],
                            t=numpy_helper.from_array(np.array([1, 2], np.int64)))
    m = _model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, ["N", 3])],
               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])], [w], producer_name="test")
    helper.set_model_props(m, {"stride": "32"})
    got = load_model(m.SerializeToString())
    assert got.producer_name == "test" and got.ir_version == m.ir_version
    assert [(o.domain, o.version) for o in got.opset_import] == [("", 17), ("com.x", 2)]
    assert {e.key: e.value for e in got.metadata_props} == {"stride": "32"}
    n = got.graph.node[0]
    assert (n.op_type, n.name, n.input, n.output) == ("If", "branch", ["c"], ["z"])
    a = {x.name: x for x in n.attribute}
    assert a["f"].f == 1.5 and a["i"].i == -7 and a["s"].s == b"txt"
    assert list(np.concatenate([np.atleast_1d(v) for v in a["floats"].floats])) == [1.0, 2.5]
    assert a["ints"].ints == [3, -4] and a["strings"].strings == [b"a", b"b"]
    assert list(to_numpy(a["t"].t, "t")) == [1, 2]
    assert a["then_branch"].g.node[0].op_type == "Identity"
    dims = got.graph.input[0].type.tensor_type.shape.dim
    assert (dims[0].dim_param, dims[1].dim_value) == ("N", 3)
    assert np.array_equal(to_numpy(got.graph.initializer[0], "w"), np.arange(6).reshape(2, 3))


def test_external_data(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = _model([helper.make_node("Identity", ["w"], ["y"])], [],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [numpy_helper.from_array(a, "w")])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    got = load_model(path)
    assert np.array_equal(to_numpy(got.graph.initializer[0], str(path), got.base_dir), a)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)  # shorter than the tensor
    with pytest.raises(OnnxFormatError, match="external data wants bytes 0..48 .* which has 8"):
        to_numpy(got.graph.initializer[0], str(path), got.base_dir)
    got.graph.initializer[0].external_data[0].value = "../../etc/passwd"
    with pytest.raises(OnnxFormatError, match="must be a relative path inside"):
        to_numpy(got.graph.initializer[0], str(path), got.base_dir)


def test_external_data_never_leaves_the_model_folder(tmp_path):
    """A symlink inside the model's folder that points out of it (a file, or a folder holding the data) is refused
    naming the file it resolves to; a link to a file inside the folder is read; a model reached through a linked
    folder reads its own data."""
    import os
    from ember.onnx import InferenceSession
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = _model([helper.make_node("Identity", ["w"], ["y"])], [],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [numpy_helper.from_array(a, "w")])
    inside, outside = tmp_path / "model", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    onnx.save_model(m, str(inside / "m.onnx"), save_as_external_data=True, location="weights.bin", size_threshold=0)
    secret = outside / "secret.bin"
    secret.write_bytes(a.tobytes())                           # right size: only the path check can refuse it
    os.replace(inside / "weights.bin", inside / "real.bin")
    os.symlink(inside / "real.bin", inside / "weights.bin")    # a link that stays inside: fine
    assert np.array_equal(InferenceSession(inside / "m.onnx").run(None, {})[0], a)
    os.unlink(inside / "weights.bin")
    os.symlink(secret, inside / "weights.bin")                 # a link out of the folder
    with pytest.raises(OnnxFormatError, match=r"weights\.bin' resolves to .*secret\.bin, outside the model's folder"):
        InferenceSession(inside / "m.onnx")
    os.unlink(inside / "weights.bin")
    os.symlink("/etc/passwd", inside / "weights.bin")
    with pytest.raises(OnnxFormatError, match="outside the model's folder"):
        InferenceSession(inside / "m.onnx")
    os.unlink(inside / "weights.bin")
    (inside / "data").symlink_to(outside, target_is_directory=True)  # a linked folder inside
    m.graph.initializer[0].external_data[0].value = "data/secret.bin"
    onnx.save_model(m, str(inside / "m2.onnx"))
    with pytest.raises(OnnxFormatError, match="outside the model's folder"):
        InferenceSession(inside / "m2.onnx")
    os.symlink(inside / "real.bin", inside / "weights.bin")
    (tmp_path / "linked").symlink_to(inside, target_is_directory=True)  # the model folder itself through a link
    assert np.array_equal(InferenceSession(tmp_path / "linked" / "m.onnx").run(None, {})[0], a)


def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_hostile_lengths_and_depth():
    # graph (field 7) claims 2**40 bytes: refused before any allocation, naming the field
    with pytest.raises(OnnxFormatError, match=r"ModelProto\.graph: length 1099511627776 exceeds"):
        load_model(b"\x3a" + _varint(1 << 40) + b"\0" * 16)
    with pytest.raises(OnnxFormatError, match="varint"):
        load_model(b"\x08" + b"\xff" * 11)
    # TypeProto.sequence_type nested past the limit: an error, not a RecursionError
    t = b""
    for _ in range(MAX_DEPTH + 5):
        t = b"\x0a" + _varint(len(t)) + t  # Sequence.elem_type = TypeProto
        t = b"\x22" + _varint(len(t)) + t  # TypeProto.sequence_type
    vi = b"\x12" + _varint(len(t)) + t
    graph = b"\x5a" + _varint(len(vi)) + vi
    with pytest.raises(OnnxFormatError, match=f"nested deeper than {MAX_DEPTH}"):
        load_model(b"\x3a" + _varint(len(graph)) + graph)
    # dims promising 10**12 elements with 4 bytes of raw data
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10 ** 6, 10 ** 6], raw_data=b"\0" * 4)
    with pytest.raises(OnnxFormatError, match=r"needs 4000000000000 bytes of raw_data, has 4"):
        to_numpy(read_tensor(t.SerializeToString())[0], "t")
    with pytest.raises(OnnxFormatError, match="missing"):
        load_model(b"")


def test_fuzz_reader():
    """Mutated copies of a small real model: each decodes or raises OnnxFormatError, nothing else."""
    from ember.onnx import InferenceSession, UnsupportedOperatorError
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    m = _model([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Add", ["h", "w"], ["y"])], [x],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
               [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    raw = m.SerializeToString()
    rng = random.Random(0)
    for _ in range(1500):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            r = rng.random()
            if r < 0.5:
                b[i] = rng.randrange(256)
            elif r < 0.7:
                del b[i:]
                if not b:
                    break
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        try:
            InferenceSession(bytes(b))
        except (OnnxFormatError, UnsupportedOperatorError):
            pass
