"""The official ONNX backend node tests, generated with pip `onnx` (a test reference only) into the ember
cache, and a runner that scores any session factory on them (ember's and onnxruntime's alike).

Generation (/work/shared/ASSETS.md, "ONNX"): onnx ships the case generators, not their data;
`generate_data` writes DIR/node/<case>/model.onnx and test_data_set_0/{input,output}_N.pb.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

EXPECTED_FAILURES = Path(__file__).with_name("onnx_node_expected_failures.txt")


def cases_dir() -> Path:
    """Generate the cases once per onnx version into the cache; returns DIR/node."""
    import onnx
    from ember.hub import cache_dir
    root = cache_dir("onnx-node-tests", onnx.__version__)
    done = root / "COMPLETE"
    if not done.exists():
        from onnx.backend.test import cmd_tools
        from onnx.backend.test.case import node
        cmd_tools.model_test.collect_testcases = lambda *a, **k: node.collect_testcases()
        tmp = root.with_name(root.name + ".part")
        cmd_tools.generate_data(argparse.Namespace(output=str(tmp), op_type=None, diff=False))
        if root.exists():
            import shutil
            shutil.rmtree(root)
        os.replace(tmp, root)
        done.write_text("ok\n")
    return root / "node"


def load_case(case: Path):
    """-> (model bytes, [input arrays], [expected arrays]) or None when a value is not a tensor."""
    import onnx
    from onnx import numpy_helper
    ds = case / "test_data_set_0"
    ins, outs = [], []
    for kind, dest in (("input", ins), ("output", outs)):
        for i in range(len(list(ds.glob(f"{kind}_*.pb")))):
            raw = (ds / f"{kind}_{i}.pb").read_bytes()
            t = onnx.TensorProto()
            t.ParseFromString(raw)
            if t.data_type == 0 and not t.dims and not t.raw_data:  # a sequence, map or optional
                return None
            dest.append(numpy_helper.to_array(t))
    return (case / "model.onnx").read_bytes(), ins, outs


def tensor_cases(root: Path) -> list[str]:
    """Names of the cases whose model inputs and outputs are all tensors."""
    import onnx
    names = []
    for case in sorted(p for p in root.iterdir() if (p / "model.onnx").exists()):
        m = onnx.load(str(case / "model.onnx"), load_external_data=False)
        vals = list(m.graph.input) + list(m.graph.output)
        if all(v.type.WhichOneof("value") == "tensor_type" for v in vals):
            names.append(case.name)
    return names


def close(got, want, rtol=1e-3, atol=1e-5) -> str | None:
    """None when `got` matches the reference output, else why not."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "fc":
        if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            return f"values differ (max abs err {err:.3g})"
        return None
    if want.dtype == object:
        return None if got.tolist() == want.tolist() else "strings differ"
    if not np.array_equal(got.astype(want.dtype) if got.dtype != want.dtype else got, want):
        return "values differ"
    return None


def run_case(make_session, case: Path):
    """-> None on a pass, else a short reason ('load: ...', 'run: ...', 'output 0: ...')."""
    loaded = load_case(case)
    if loaded is None:
        return "not tensor-valued"
    model, ins, outs = loaded
    try:
        sess = make_session(model)
    except Exception as e:  # noqa: BLE001 (the harness scores every failure, it does not stop)
        return f"load: {type(e).__name__}: {str(e)[:200]}"
    try:
        names = [i.name for i in sess.get_inputs()]
        got = sess.run(None, dict(zip(names, ins)))
    except Exception as e:  # noqa: BLE001
        return f"run: {type(e).__name__}: {str(e)[:200]}"
    for i, (g, w) in enumerate(zip(got, outs)):
        why = close(g, w)
        if why:
            return f"output {i}: {why}"
    return None


def read_expected() -> dict[str, str]:
    """The checked-in expected failures: {case: reason}."""
    out = {}
    for line in EXPECTED_FAILURES.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out
