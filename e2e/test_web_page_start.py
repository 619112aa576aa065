"""The page's start (page load <= 2.5 s): interactive with nothing but the runtime loaded, Python imported from
the precompiled bytecode `ember build-web` writes (wasm/bytecode.py, unpacked with numpy and ember from one tar:
wasm/boot.py) instead of sources, weights and Pillow fetched only when a tool needs them, and that tool's answer
still the native API's. No timing is asserted here; bench/bench_web.py measures the load."""
from __future__ import annotations

import base64
import re

import pytest
from web_app import RUN_S, App, assert_same_detections, yolo_reference


@pytest.fixture(scope="module")
def app(playwright_session, server):
    before = len(server.requests)
    a = App(playwright_session, f"{server.url}?device=cpu")
    a.boot_requests = server.requests[before:]
    yield a
    a.close()


def test_interactive_after_the_runtime_alone(app):
    page = app.page
    assert page.inner_text("#status") == "Ready · CPU" and page.is_enabled("#device")
    stages = page.evaluate("() => window.__emberStartup")
    order = ["worker", "pyodide", "numpy", "import", "device", "ready"]
    assert [stages[k] for k in order] == sorted(stages[k] for k in order), stages
    asked = app.boot_requests
    # the precompiled standard library instead of the sources Python would compile, and numpy + ember + their
    # bytecode in one tar the worker unpacks (wasm/boot.py), not numpy's wheel through Pyodide's installer
    assert "/pyodide/python_stdlib.pyc.zip" in asked and "/pyodide/python_stdlib.zip" not in asked, asked
    assert any(re.fullmatch(r"/wheels/[0-9a-f]+/boot-[0-9a-f]+\.tar\.gz", p) for p in asked), asked
    assert not any("numpy-" in p or p.endswith("pycache-cp312.zip") for p in asked), asked
    # lazy: no weights, no Pillow until a tool asks (the manifest only names the demos)
    assert [p for p in asked if p.startswith("/models/") and not p.endswith("manifest.json")] == []
    assert not any("pillow" in p for p in asked), asked


def test_yolo_on_encoded_bytes_loads_pillow_then_matches_native(app, server, bus_png, native_yolo):
    # ember.js detect(blob): the worker decodes the PNG with Pyodide's Pillow, fetched on the tool's first use
    before = len(server.requests)
    png = base64.b64encode(bus_png.read_bytes()).decode()
    got = app.page.evaluate(f"""async () => {{
        const m = await import('./ember.js');
        const e = await m.createEmber({{device: 'cpu'}});
        await e.loadModel('yolo', 'demo');
        const bytes = Uint8Array.from(atob('{png}'), (c) => c.charCodeAt(0));
        const dets = await e.detect(new Blob([bytes], {{type: 'image/png'}}));
        e.terminate();
        return JSON.parse(JSON.stringify(dets));
    }}""")
    asked = server.requests[before:]
    assert any("pillow" in p and p.endswith(".whl") for p in asked), asked
    assert_same_detections(got, yolo_reference(native_yolo, bus_png))
    assert app.errors == []
