"""The page's tool registry (ember.wasm.tools): every registered module declares the whole contract, and web/ember.js
resolves sources from the table the worker sends it (no tool known by name in the JS): a hub folder gets the
tool's FILES, one weights file by URL gets what BESIDE names for its suffix, a nameless Blob the tool's first
file name. ember.js runs under Node with a stand-in Worker that answers init with tools.table()."""
from __future__ import annotations

import inspect
import json
import shutil
import subprocess
from pathlib import Path

from expected_skips import missing

from ember.wasm import tools

EMBER_JS = Path(__file__).resolve().parents[1] / "web" / "ember.js"


def test_every_tool_declares_the_contract():
    for name in tools.TOOLS:
        m = tools.get(name)
        assert m.__doc__, name
        assert m.FILES and all(isinstance(f[0], str) and 1 <= len(f) <= 3 for f in m.FILES), name
        assert all(s.startswith(".") and all(isinstance(f[0], str) for f in v) for s, v in m.BESIDE.items()), name
        assert isinstance(m.PACKAGES, tuple) and all(isinstance(p, str) for p in m.PACKAGES), name
        assert m.BUNDLES in ("model", "data", ""), name
        assert list(inspect.signature(m.demos).parameters) == ["extra"], name
        assert list(inspect.signature(m.load).parameters) == ["folder", "device"], name
        assert inspect.iscoroutinefunction(m.run), name
        assert len(inspect.signature(m.run).parameters) == 4, name
    assert json.loads(json.dumps(tools.table())) == tools.table()


def test_an_unknown_tool_is_a_bad_request():
    import asyncio

    from ember.wasm import worker_api
    for op in ("load", "run"):
        r = asyncio.run(worker_api.handle(op, {"tool": "nope", "folder": "/", "input": None}))
        assert r["error"] == "bad_request" and "unknown tool 'nope'" in r["message"]


SCRIPT = r"""
const [emberJs, table] = process.argv.slice(1);
globalThis.fetch = async () => ({ ok: false });
globalThis.Worker = class {  // as worker.js answers init: the device and the tool table
  postMessage(m) {
    setTimeout(() => this.onmessage({ data: { type: "ready", id: m.id, device: "cpu", tools: JSON.parse(table) } }));
  }
};
const { createEmber } = await import(emberJs);
const ember = await createEmber({ wheelURL: "w.whl", configURL: "http://site/no.json", hubURL: "http://hub" });
const out = {};
const r = (tool, source) => ember.resolve(tool, source).then((x) => x.files.map(({ bytes, ...f }) => f));
out.bin = await r("llama", "http://h/x/stories.bin");
out.safetensors = await r("llama", "http://h/x/model.safetensors");
out.folder = await r("whisper", "owner/name");
out.yolo_file = await r("yolo", "owner/name/best.pt");
out.blob = await r("onnx", new Blob([new Uint8Array(8)]));
try { await r("nope", "owner/name"); } catch (e) { out.error = [e.code, e.message]; }
process.stdout.write(JSON.stringify(out));
"""


def test_ember_js_resolves_sources_with_the_tool_table():
    if shutil.which("node") is None:
        missing("node is not installed")
    table = tools.table()
    r = subprocess.run(["node", "--input-type=module", "-e", SCRIPT, EMBER_JS.as_uri(), json.dumps(table)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)

    def beside(tool, suffix, url):  # the files BESIDE names, in the weights file's folder
        folder = url.rsplit("/", 1)[0]
        return [{"name": f[0], "url": f"{folder}/{f[0]}", **({"optional": True} if f[1:] and f[1] else {})}
                for f in table[tool]["beside"][suffix]]
    assert got["bin"] == [{"name": "stories.bin", "url": "http://h/x/stories.bin"},
                          *beside("llama", ".bin", "http://h/x/stories.bin")]
    assert got["safetensors"] == [{"name": "model.safetensors", "url": "http://h/x/model.safetensors"},
                                  *beside("llama", ".safetensors", "http://h/x/model.safetensors")]
    base = "http://hub/owner/name/resolve/main"
    assert got["folder"] == [{"name": f[0], "url": f"{base}/{f[0]}", "optional": bool(f[1:] and f[1]),
                              **({"unless": f[2]} if len(f) > 2 else {})} for f in table["whisper"]["files"]]
    assert got["yolo_file"] == [{"name": "best.pt", "url": f"{base}/best.pt"}]  # yolo has nothing beside
    assert got["blob"] == [{"name": table["onnx"]["files"][0][0]}] == [{"name": "model.onnx"}]
    assert got["error"][0] == "bad_request" and "unknown tool nope" in got["error"][1]
