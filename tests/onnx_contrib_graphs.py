"""One-node ONNX graphs of onnxruntime's contrib operators (built with pip `onnx`, a test reference only) and a
runner that compares ember's InferenceSession with onnxruntime's on the same inputs."""
from __future__ import annotations

import numpy as np

from expected_skips import missing

MS = "com.microsoft"


def ort():
    try:
        import onnxruntime
    except ImportError:
        missing("onnxruntime is not installed (the reference for ONNX operators)")
    return onnxruntime


def model(node_or_nodes, inputs: dict, outputs, inits: dict | None = None, opset=17):
    """A model of one node (or a list) with `inputs` {name: array} as graph inputs, `inits` {name: array} as
    initializers and `outputs` [name or (name, numpy dtype)] (float32 where no dtype is given)."""
    from onnx import TensorProto, helper, numpy_helper
    nodes = node_or_nodes if isinstance(node_or_nodes, list) else [node_or_nodes]
    types = {np.dtype(k): v for k, v in {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
                                          np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
                                          np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}.items()}
    ins = [helper.make_tensor_value_info(n, types[np.asarray(a).dtype], list(np.shape(a))) for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(*((o, TensorProto.FLOAT) if isinstance(o, str) else
                                             (o[0], types[np.dtype(o[1])])), None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    g = helper.make_graph(nodes, "contrib", ins, outs, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m.SerializeToString()


def compare(device, node, inputs, outputs, inits=None, rtol=1e-4, atol=1e-5, opset=17, skip=(), reference=None):
    """Run the model on onnxruntime (cpu) and ember (`device`); every output (but the indices in `skip`) must match
    in shape and values. `reference`: the outputs computed otherwise, in onnxruntime's place (where its kernel on
    this CPU is known to differ from the operator's definition). Returns (ember's outputs, the reference's)."""
    from ember.onnx import InferenceSession
    m = model(node, inputs, outputs, inits, opset)
    if reference is None:
        rt = ort()
        so = rt.SessionOptions()
        so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL  # the node itself, not a rewrite
        want = rt.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, inputs)
    else:
        want = [np.asarray(r) for r in reference]
    got = InferenceSession(m, device=device).run(None, inputs)
    for i, (name, g, w) in enumerate(zip([o if isinstance(o, str) else o[0] for o in outputs], got, want)):
        if i in skip:
            continue
        g = np.asarray(g)
        assert g.shape == w.shape, f"{name}: shape {g.shape} != onnxruntime's {w.shape}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {name}")
    return got, want


def ort_saturates_u8s8() -> bool:
    """Whether onnxruntime's uint8 x int8 products saturate here: its AVX2 kernel adds pairs of products in int16
    (vpmaddubsw), so 2 x 255 x 127 = 64770 comes out as 32767; with AVX-512 VNNI (or AVX-VNNI) it is exact."""
    from onnx import TensorProto, helper
    rt = ort()
    a, b = np.full((1, 2), 255, np.uint8), np.full((2, 1), 127, np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    g = helper.make_graph([node], "probe", [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2]),
                                            helper.make_tensor_value_info("b", TensorProto.INT8, [2, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    (y,) = rt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})
    return int(y.ravel()[0]) != 64770
