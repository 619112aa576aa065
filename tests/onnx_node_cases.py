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
    """Generate the cases once per onnx and ml_dtypes version (onnx computes the expected outputs of the 4-bit and
    float8 casts with ml_dtypes) into the cache; returns DIR/node."""
    import ml_dtypes
    import onnx
    from ember.hub import cache_dir
    root = cache_dir("onnx-node-tests", f"{onnx.__version__}-ml_dtypes-{ml_dtypes.__version__}")
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
    if want.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: 8 mantissa bits
        want, rtol, atol = want.astype(np.float32), max(rtol, 1e-2), max(atol, 1e-2)
    elif want.dtype.name.startswith(("float8", "float4")):  # ml_dtypes' narrow floats: compare the values
        want = want.astype(np.float32)
    elif want.dtype.name in ("int4", "uint4", "int2", "uint2"):
        want = want.astype(np.int8 if want.dtype.name[0] == "i" else np.uint8)
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


# Cases whose expected output is a random draw (numpy's RNG inside onnx's generator, seeded or not): no engine
# reproduces it, so matching it would be luck (10 Bernoulli draws do match now and then). Neither required to
# match nor to differ, each is checked for what every draw must satisfy.
def _bernoulli_draws(ins, got, want) -> str | None:
    """Bernoulli(p): 0 or 1 everywhere, in the reference's shape and dtype."""
    y = np.asarray(got[0])
    if y.shape != want[0].shape or y.dtype != want[0].dtype:
        return f"output 0: {y.dtype}{y.shape}, not {want[0].dtype}{want[0].shape}"
    return None if np.isin(y, (0, 1)).all() else f"output 0: values {np.unique(y)[:5]} besides 0 and 1"


def _training_dropout(ins, got, want) -> str | None:
    """Dropout(x, ratio, training_mode=True): each element is 0 (dropped) or x / (1 - ratio) (kept), the mask
    output says which, and the kept count is within 6 standard deviations of n (1 - ratio)."""
    x, ratio = ins[0].astype(np.float64), float(ins[1])
    y = np.asarray(got[0])
    if y.shape != want[0].shape or y.dtype != want[0].dtype:
        return f"output 0: {y.dtype}{y.shape}, not {want[0].dtype}{want[0].shape}"
    kept = np.isclose(y, x / (1 - ratio), rtol=1e-5, atol=1e-6) & (y != 0)
    if not (kept | (y == 0)).all():
        return "output 0: an element is neither 0 nor x / (1 - ratio)"
    if len(want) > 1:
        mask = np.asarray(got[1])
        if mask.dtype != np.bool_ or mask.shape != y.shape:
            return f"output 1: {mask.dtype}{mask.shape}, not bool{y.shape}"
        if (mask != (kept | (mask & (x == 0)))).any():
            return "output 1: the mask disagrees with the kept elements"
        kept = mask
    n, q = x.size, 1 - ratio
    if abs(int(kept.sum()) - n * q) > 6 * np.sqrt(n * q * ratio) + 1e-9:
        return f"output 0: {int(kept.sum())} of {n} kept at ratio {ratio}"
    return None


RANDOM = {"test_bernoulli": _bernoulli_draws, "test_training_dropout": _training_dropout}


def check_outputs(name: str, ins, got, want) -> str | None:
    """None when a case's outputs `got` pass against the reference `want`, else why not."""
    for prefix, check in RANDOM.items():
        if name.startswith(prefix):
            return check(ins, got, want)
    for i, (g, w) in enumerate(zip(got, want)):
        why = close(g, w)
        if why:
            return f"output {i}: {why}"
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
    return check_outputs(case.name, ins, got, outs)


def read_expected() -> dict[str, dict[str, str]]:
    """The checked-in expected failures: {device: {case: reason}}; a line is `case device reason`
    with device `all` (every device) or one device name (that device only)."""
    out: dict[str, dict[str, str]] = {}
    for line in EXPECTED_FAILURES.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, dev, reason = (line.split(None, 2) + ["", ""])[:3]
            out.setdefault(dev, {})[name] = reason
    return out


def expected_for(device: str) -> dict[str, str]:
    table = read_expected()
    return {**table.get("all", {}), **table.get(device, {})}


def score(device: str, names=None, make_session=None) -> dict[str, str]:
    """{case: why} for every tensor-valued case that fails on `device` (ember unless make_session is given)."""
    import warnings
    root = cases_dir()
    if make_session is None:
        from ember.onnx import InferenceSession
        make_session = lambda m: InferenceSession(m, device=device)  # noqa: E731
    fails = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for name in names or tensor_cases(root):
            why = run_case(make_session, root / name)
            if why:
                fails[name] = " ".join(why.split())
    return fails


# causes the message alone does not tell, by case-name prefix
KNOWN = {"test_training_dropout": "not implemented: Dropout with training_mode=True (ember's Dropout is the inference "
                                  "identity)",
         "test_swiglu_float16": "float16 rounding: the reference rounds after every op, the fused sigmoid once"}


def _reason(why: str, name: str = "") -> str:
    """A failure message as a short, stable reason for the expected-failures file."""
    for prefix, cause in KNOWN.items():
        if name.startswith(prefix):
            return f"{cause} ({why.split(': ', 1)[-1][:60]})"
    why = why.replace("ember: <onnx bytes>: ", "")
    if "unsupported ONNX operators:" in why:
        return "not implemented: " + why.split("unsupported ONNX operators:")[1].strip()
    for key in ("cannot make a tensor from numpy dtype", "has no ember dtype", "string tensors", "has no float64",
                "stores int64 as int32"):
        if key in why:
            return "dtype ember lacks: " + why.split(": ", 1)[-1]
    return why[:160]


def write_expected(devices=("cpu", "webgpu")):
    """Regenerate the expected-failures file from this run (then review the diff before committing)."""
    fails = {d: score(d) for d in devices}
    lines = [
        "# ONNX backend node tests that ember fails today: `case device reason`. device `all`: every device;",
        "# otherwise that device only. tests/test_onnx_conformance.py fails on a case missing here AND on a",
        "# listed case that now passes, so the list shrinks as operators land. Regenerate with",
        "# `python tests/onnx_node_cases.py --write-expected` and review the diff.",
    ]
    base = fails[devices[0]]
    for name in sorted(set().union(*fails.values())):
        if all(name in fails[d] for d in devices):
            lines.append(f"{name} all {_reason(base[name], name)}")
        for d in devices:
            if name in fails[d] and not all(name in fails[x] for x in devices):
                lines.append(f"{name} {d} {_reason(fails[d][name], name)}")
    EXPECTED_FAILURES.write_text("\n".join(lines) + "\n")
    return {d: len(f) for d, f in fails.items()}


if __name__ == "__main__":
    import sys
    if "--write-expected" in sys.argv:
        print(write_expected())
