"""Browser smoke test: headless Chromium, Pyodide + the ember wheel, ops and a small model on
`webgpu` (the page's navigator.gpu) equal the CPU backend, through both readback paths:
synchronous `.numpy()` via JSPI and `await backend.to_numpy_async(...)`.

Needs /usr/bin/chromium (Debian), `pip install playwright` (never `playwright install`), and
the offline Pyodide folder (ember.wasm.assets.ensure_pyodide). Files are served by a local
http.server on 127.0.0.1, which counts as a secure context for navigator.gpu.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--headless=new", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

LOAD = """async (wheel) => {
  const { loadPyodide } = await import('/pyodide/pyodide.mjs');
  const py = await loadPyodide({ indexURL: '/pyodide/' });
  await py.loadPackage(['numpy']);
  py.unpackArchive(await (await fetch('/' + wheel)).arrayBuffer(), 'wheel');
  window.py = py;
  return true;
}"""

SNIPPET = """
import json
import numpy as np
import ember
import ember.nn.functional as F
from pyodide.ffi import can_run_sync
from ember.webgpu import init_async

await init_async()
be = ember.device("webgpu").backend
rng = np.random.default_rng(0)
a = rng.standard_normal((33, 20)).astype(np.float32)
b = rng.standard_normal((20, 17)).astype(np.float32)
img = rng.standard_normal((1, 3, 9, 9)).astype(np.float32)
w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
idx = np.array([3, 0, 5])


def ops(dev):
    T = lambda v: ember.tensor(v, device=dev)
    x, y = T(a), T(b)
    return {"matmul": x @ y, "softmax": F.softmax(x, -1), "layer_norm": F.layer_norm(x, (20,)),
            "gelu": F.gelu(x), "sum": x.sum(0), "argmax": x.argmax(1), "conv2d": F.conv2d(T(img), T(w), padding=1),
            "index": x[T(idx)], "cat": ember.cat([x, x * 2], 1), "where": ember.where(x > 0, x, x.exp()),
            "cumsum": x.cumsum(1), "half_matmul": (x.half() @ y.half()).float(), "attention": F.scaled_dot_product_attention(x[None], x[None], x[None], is_causal=True)}


ember.manual_seed(0)
model = ember.nn.Sequential(ember.nn.Linear(20, 64), ember.nn.GELU(), ember.nn.LayerNorm(64), ember.nn.Linear(64, 8))
with ember.no_grad():
    ref = {k: v.numpy().astype(np.float64) for k, v in ops("cpu").items()}
    ref["model"] = model(ember.tensor(a)).numpy().astype(np.float64)
    got = ops("webgpu")
    model.to("webgpu")
    got["model"] = model(ember.tensor(a, device="webgpu"))
    sync = can_run_sync()
    diff_sync = {k: float(np.abs(v.numpy() - ref[k]).max()) for k, v in got.items()} if sync else None
    diff_async = {k: float(np.abs((await be.to_numpy_async(v._data)) - ref[k]).max()) for k, v in got.items()}
json.dumps({"sync": sync, "diff_sync": diff_sync, "diff_async": diff_async, "adapter": be.adapter.info,
            "f16": be.has_f16, "on_gpu": all(v.device.type == "webgpu" for v in got.values())})
"""


@contextlib.contextmanager
def open_page(timeout_ms=600_000, pw=None):
    """A headless Chromium page with Pyodide, numpy and the ember wheel loaded (window.py).
    Raises LookupError when Chromium or playwright is missing (the bench reuses this). Pass the
    session's Playwright as `pw`: Playwright's sync API cannot be started twice in one thread."""
    if not Path(CHROMIUM).exists():
        raise LookupError(f"{CHROMIUM} not installed")
    try:
        from playwright import sync_api
    except ImportError as e:
        raise LookupError(f"playwright not installed: {e}") from e
    from ember.wasm.assets import build_wheel, ensure_pyodide
    root = Path(tempfile.mkdtemp(prefix="ember-e2e-"))
    server = None
    try:
        os.symlink(ensure_pyodide(), root / "pyodide")
        wheel = build_wheel(root)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with contextlib.ExitStack() as stack:
            if pw is None:
                pw = stack.enter_context(sync_api.sync_playwright())
            # launch() (not a persistent context) starts from a fresh temporary profile
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                pg = browser.new_page()
                pg.set_default_timeout(timeout_ms)
                pg.goto(f"http://127.0.0.1:{server.server_address[1]}/")  # the folder listing: just an origin
                pg.evaluate(LOAD, wheel.name)
                yield pg
            finally:
                browser.close()
    finally:
        if server is not None:
            server.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def run_python(page, code):
    """Run code under runPythonAsync (so JSPI can suspend) and return its last expression."""
    return page.evaluate("async (code) => await window.py.runPythonAsync(code)", code)


@pytest.fixture(scope="module")
def page(playwright_session):
    try:
        with open_page(pw=playwright_session) as pg:
            yield pg
    except LookupError as e:
        pytest.skip(str(e))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def end_headers(self):  # wasm must be served with its MIME type; no caching between runs
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


def test_ops_and_model_on_page_webgpu_equal_cpu(page):
    out = json.loads(run_python(page, SNIPPET))
    assert out["on_gpu"]
    assert out["sync"], "Chromium has JSPI: run_sync readback must be available under runPythonAsync"
    for path in ("diff_sync", "diff_async"):
        bad = {k: d for k, d in out[path].items() if not d <= 1e-4}
        assert not bad, f"{path}: webgpu differs from cpu ({out['adapter']}): {bad}"
