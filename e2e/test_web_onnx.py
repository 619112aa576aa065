"""The page's ONNX API in Chromium: `ember.loadModel("onnx", url | File)` + `ember.run(feeds)` (web/ember.js ->
worker.js -> ember.wasm.tools.onnx) give what onnxruntime gives natively on the same model and inputs: a small
generated model (float32, int64 and bool outputs as typed arrays) and Silero VAD (If subgraphs, an LSTM
state carried from chunk to chunk), on the CPU (numpy in wasm) and on WebGPU (the page's navigator.gpu)."""
from __future__ import annotations

import base64
import sys
from pathlib import Path

import numpy as np
import pytest
from web_app import ARGS, CHROMIUM, RUN_S

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from expected_skips import missing  # noqa: E402
from test_onnx_web_api import small_model  # noqa: E402  (the same generated model as the CPython test)

SILERO = ("silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx")

# In the page: start ember, load the model (by URL, or as a File made from its bytes), run every feed list
RUN = """async ([device, url, asFile, steps]) => {
  const { createEmber } = await import("/ember.js");
  const ember = await createEmber({ device });
  let source = url;
  if (asFile) source = new File([await (await fetch(url)).arrayBuffer()], url.split("/").pop());
  const info = await ember.loadModel("onnx", source);
  const b64 = (a) => { let s = ""; const u = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
                       for (let i = 0; i < u.length; i++) s += String.fromCharCode(u[i]); return btoa(s); };
  const unb64 = (s, Arr) => { const b = Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); return new Arr(b.buffer); };
  const arrays = { float32: Float32Array, int64: BigInt64Array };
  const outs = [];
  let carried = {};
  for (const step of steps) {
    const feeds = {};
    for (const [name, f] of Object.entries(step))
      if (name !== "__carry") feeds[name] = { type: f.type, dims: f.dims, data: unb64(f.b64, arrays[f.type]) };
    for (const [name, from] of Object.entries(step.__carry || {})) feeds[name] = carried[from];
    const r = await ember.run(feeds);
    carried = r;
    outs.push(Object.fromEntries(Object.entries(r).map(([k, t]) =>
      [k, { type: t.type, dims: t.dims, cls: t.data.constructor.name, b64: b64(t.data) }])));
  }
  return { device: ember.device, info, outs };
}"""

NP = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}


def _feed(a: np.ndarray) -> dict:
    return {"type": {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}[a.dtype], "dims": list(a.shape),
            "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}


def _array(t: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(t["b64"]), NP[t["type"]]).reshape(t["dims"])


@pytest.fixture(scope="module")
def browser(playwright_session):
    b = playwright_session.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    yield b
    b.close()


@pytest.fixture(scope="module")
def models(hub_dir):
    """The ONNX files, served from the test server's /hub/onnx/ folder."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        missing("onnxruntime is the reference for ONNX models")
    from ember.hub import HubError, fetch_pypi_member
    folder = hub_dir / "onnx"
    folder.mkdir(exist_ok=True)
    (folder / "small.onnx").write_bytes(small_model())
    try:
        (folder / "silero_vad.onnx").write_bytes(fetch_pypi_member(*SILERO).read_bytes())
    except HubError as e:
        missing(f"silero-vad could not be fetched from PyPI: {e}")
    return folder


def in_page(browser, server, device, name, steps, as_file=False):
    page = browser.new_page()
    page.set_default_timeout(RUN_S * 1000)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(server.url + "style.css")  # any page of the site's origin: ember.js is imported from it
        return page.evaluate(RUN, [device, f"{server.url}hub/onnx/{name}", as_file, steps]), errors
    finally:
        page.close()


@pytest.mark.parametrize("device", ["cpu", "webgpu"])
def test_small_model_equals_onnxruntime(browser, server, models, device):
    import onnxruntime as ort
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(str(models / "small.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got, errors = in_page(browser, server, device, "small.onnx", [{"x": _feed(x)}], as_file=device == "cpu")
    assert not errors, errors
    if device == "webgpu" and got["device"] != "webgpu":
        missing(f"this Chromium has no usable WebGPU adapter (ember chose {got['device']})")
    assert got["device"] == device
    assert [i["name"] for i in got["info"]["inputs"]] == ["x"]
    out = got["outs"][0]
    assert {k: (v["type"], v["cls"]) for k, v in out.items()} == {
        "probs": ("float32", "Float32Array"), "best": ("int64", "BigInt64Array"), "positive": ("bool", "Uint8Array")}
    np.testing.assert_allclose(_array(out["probs"]), want[0], rtol=1e-4, atol=1e-6)
    assert _array(out["best"]).tolist() == want[1].tolist()
    assert _array(out["positive"]).tolist() == want[2].tolist()


@pytest.mark.parametrize("device", ["cpu", "webgpu"])
def test_silero_vad_state_carried_equals_onnxruntime(browser, server, models, device):
    """Three 512-sample chunks at 16 kHz, the state fed back from each run's stateN (as a VAD loop does).
    Tolerance: 1e-4 on the speech probability and the state (float32 LSTM, If branches on sr)."""
    import onnxruntime as ort
    ref = ort.InferenceSession(str(models / "silero_vad.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    chunks = [(np.sin(np.arange(512) / 8.0 * (k + 1)) * 0.3 + rng.standard_normal(512) * 0.05)
              .astype(np.float32)[None] for k in range(3)]
    sr, state = np.array(16000, np.int64), np.zeros((2, 1, 128), np.float32)
    want = []
    for c in chunks:
        prob, state = ref.run(None, {"input": c, "state": state, "sr": sr})
        want.append((prob, state))
    steps = [{"input": _feed(c), "sr": _feed(sr), **({"state": _feed(np.zeros((2, 1, 128), np.float32))} if k == 0
              else {"__carry": {"state": "stateN"}})} for k, c in enumerate(chunks)]
    got, errors = in_page(browser, server, device, "silero_vad.onnx", steps)
    assert not errors, errors
    if device == "webgpu" and got["device"] != "webgpu":
        missing(f"this Chromium has no usable WebGPU adapter (ember chose {got['device']})")
    for out, (prob, st) in zip(got["outs"], want):
        np.testing.assert_allclose(_array(out["output"]), prob, atol=1e-4)
        np.testing.assert_allclose(_array(out["stateN"]), st, atol=1e-4)

