"""The page's ONNX tool (web/onnx.js, the "Any ONNX model" tab) and the JS API's generation through a decoder
export, in Chromium:

- a dropped .onnx file's inputs and outputs are listed with their types and shapes; an image fills the image
  input, random values the others; Run shows each output with its statistics, a heatmap for the image-shaped one
  and the time per run, and the outputs equal onnxruntime's on the feeds the page made;
- `ember.runDecoder(ids, opts, onToken)` over exports made as users make them (tests/onnx_exports.py: a
  GroupQueryAttention decoder in 4 bits, a Whisper decoder fed its encoder's output) streams the same 24 greedy
  tokens as onnxruntime, on the CPU (numpy and nbits.c in wasm) and on WebGPU."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from web_app import ARGS, CHROMIUM, RUN_S, App

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from expected_skips import missing  # noqa: E402

ARRAYS = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "uint8": np.uint8}


def _tool_model() -> bytes:
    """image (N, 3, 32, 32) -> map (N, 2, 32, 32) by a 3x3 conv and a sigmoid, logits (N, 10); count (1, n) int64
    -> total: one image-shaped output, one score vector, one integer input."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    f = lambda a, n: numpy_helper.from_array(np.asarray(a, np.float32), n)  # noqa: E731
    nodes = [helper.make_node("Conv", ["image", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["map"]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc"], ["logits"]),
             helper.make_node("ReduceSum", ["count"], ["total"], keepdims=0)]
    g = helper.make_graph(nodes, "tool", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32]),
                                          helper.make_tensor_value_info("count", TensorProto.INT64, [1, "n"])],
                          [helper.make_tensor_value_info("map", TensorProto.FLOAT, ["N", 2, 32, 32]),
                           helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
                           helper.make_tensor_value_info("total", TensorProto.INT64, [])],
                          [f(rng.standard_normal((2, 3, 3, 3)), "w"), f(rng.standard_normal(2), "b"),
                           f(rng.standard_normal((2, 10)), "fc")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(scope="module")
def app(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=cpu#onnx")
    yield a
    a.close()


def test_tool_lists_fills_runs_and_shows(app, tmp_path, bus_png):
    try:
        import onnxruntime as ort
    except ImportError:
        missing("onnxruntime is the reference for ONNX models")
    page = app.page
    page.wait_for_selector("#panel-onnx", state="visible", timeout=60_000)  # opened by the #onnx link
    page.click("#tab-whisper")
    assert page.is_hidden("#panel-onnx")
    page.click("#tab-onnx")
    assert page.is_visible("#panel-onnx") and page.is_hidden("#panel-whisper")
    model = tmp_path / "tool.onnx"
    model.write_bytes(_tool_model())
    page.set_input_files("#panel-onnx .onnx-files", str(model))
    page.wait_for_selector("#panel-onnx .onnx-model", state="visible", timeout=RUN_S * 1000)
    rows = page.eval_on_selector_all("#panel-onnx .onnx-inputs tbody tr",
                                     "rs => rs.map(r => [...r.cells].slice(0, 3).map(c => c.textContent))")
    assert rows == [["image", "float32", "[N, 3, 32, 32]"], ["count", "int64", "[1, n]"]]
    outs = page.eval_on_selector_all("#panel-onnx .onnx-outputs tbody tr", "rs => rs.map(r => r.cells[0].textContent)")
    assert outs == ["map", "logits", "total"]
    image_row = "#panel-onnx .onnx-inputs tbody tr:nth-child(1)"
    page.select_option(f"{image_row} .onnx-kind", "image")
    page.set_input_files(f"{image_row} .onnx-file", str(bus_png))
    page.select_option("#panel-onnx .onnx-inputs tbody tr:nth-child(2) .onnx-kind", "tokens")
    page.fill("#panel-onnx .onnx-inputs tbody tr:nth-child(2) .onnx-text", "4, 5 6")
    page.fill("#panel-onnx .onnx-repeat", "3")
    page.click("#panel-onnx .onnx-run")
    page.wait_for_selector("#panel-onnx .onnx-output[data-name=map] canvas.onnx-heatmap", timeout=RUN_S * 1000)
    assert app.message() == "", app.message()
    assert "ms a run in the worker" in page.inner_text("#panel-onnx .onnx-time") and "best of 3" in page.inner_text(
        "#panel-onnx .onnx-time")
    assert page.eval_on_selector("#panel-onnx .onnx-output[data-name=map] canvas", "c => [c.width, c.height]") == [32, 32]
    assert "Largest" in page.inner_text("#panel-onnx .onnx-output[data-name=logits]")
    # the page's own feeds (the bus resized to 32 x 32, [0, 1]) through onnxruntime give the page's outputs
    got = page.evaluate("""() => { const s = window.emberOnnx.state; const pack = (t) => ({type: t.type, dims: t.dims,
        data: Array.from(t.data, Number)}); return {feeds: Object.fromEntries(Object.entries(s.feeds).map(([k, t]) =>
        [k, pack(t)])), outs: Object.fromEntries(Object.entries(s.last).map(([k, t]) => [k, pack(t)]))}; }""")
    feeds = {k: np.asarray(t["data"], ARRAYS[t["type"]]).reshape(t["dims"]) for k, t in got["feeds"].items()}
    assert feeds["image"].shape == (1, 3, 32, 32) and 0 <= feeds["image"].min() and feeds["image"].max() <= 1
    assert feeds["count"].tolist() == [[4, 5, 6]]
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, w in zip(("map", "logits", "total"), want):
        t = got["outs"][name]
        np.testing.assert_allclose(np.asarray(t["data"]).reshape(t["dims"]), w, rtol=1e-4, atol=1e-5)
    assert "15" in page.inner_text("#panel-onnx .onnx-output[data-name=total]")
    # one job at a time across tools (guard.js): a run while another tool's job holds the page is refused, naming it
    page.evaluate("""() => { window.__held = new Promise((r) => { window.__release = r; });
        import("/guard.js").then((g) => g.exclusive("yolo", "Object detection (held)", () => window.__held)); }""")
    page.wait_for_function("document.body.classList.contains('busy')")
    page.click("#panel-onnx .onnx-run")
    page.wait_for_function("document.querySelector('#message') && !document.querySelector('#message').hidden")
    assert "Object detection (held) is still running" in app.message(), app.message()
    page.evaluate("window.__release()")
    page.wait_for_function("!document.body.classList.contains('busy')")


DECODE = """async ([device, url, prompt, feeds]) => {
  const { createEmber } = await import("/ember.js");
  const ember = await createEmber({ device });
  const info = await ember.loadModel("onnx", url);
  const unb64 = (s) => { const b = Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); return new Float32Array(b.buffer); };
  const fed = Object.fromEntries(Object.entries(feeds).map(([k, f]) => [k, { type: "float32", dims: f.dims, data: unb64(f.b64) }]));
  const streamed = [];
  const r = await ember.runDecoder(prompt, { max_new_tokens: 24, feeds: fed }, (tok, n) => streamed.push([tok, n]));
  return { device: ember.device, decoder: info.decoder, tokens: r.tokens, stopped: r.stopped, streamed };
}"""


@pytest.fixture(scope="module")
def browser(playwright_session):
    b = playwright_session.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    yield b
    b.close()


@pytest.mark.parametrize("name,device", [("qwen2-gqa-q4", "cpu"), ("qwen2-gqa-q4", "webgpu"),
                                         ("whisper-decoder-q4", "cpu")])
def test_run_decoder_streams_onnxruntimes_tokens(browser, server, hub_dir, name, device):
    import base64

    import onnx_exports as X
    from ember.onnx.decoder import Decoder
    from test_onnx_exports import _ort
    folder = hub_dir / "onnx-exports"
    folder.mkdir(exist_ok=True)
    if not (folder / f"{name}.onnx").exists():
        X.copy_to(name, folder)
    prompt = [3, 17, 256, 9, 41]
    feeds = X.decoder_feeds(name, np.random.default_rng(4))
    want = Decoder(_ort(X.path(name))).generate(prompt, 24, feeds=feeds)
    page = browser.new_page()
    page.set_default_timeout(RUN_S * 1000)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(server.url + "style.css")
        enc = {k: {"dims": list(v.shape), "b64": base64.b64encode(v.tobytes()).decode()} for k, v in feeds.items()}
        got = page.evaluate(DECODE, [device, f"{server.url}hub/onnx-exports/{name}.onnx", prompt, enc])
    finally:
        page.close()
    assert not errors, errors
    if device == "webgpu" and got["device"] != "webgpu":
        missing(f"this Chromium has no usable WebGPU adapter (ember chose {got['device']})")
    assert got["decoder"] is True and got["stopped"] == "length"
    assert got["tokens"] == want, f"{name} on {device}: the page's greedy tokens differ from onnxruntime's"
    assert got["streamed"] == [[t, i + 1] for i, t in enumerate(want)]
