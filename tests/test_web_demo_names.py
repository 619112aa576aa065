"""The JS API names a bundled demo as the CLI's --model does: `loadModel("whisper", "base")` loads the build's
whisper-base demo (and "tiny.en" whisper-tiny.en), an unknown name is refused listing the build's names. Runs
web/ember.js under Node with a stand-in Worker that answers init/load and a fetch that serves the manifest."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from expected_skips import missing

EMBER_JS = Path(__file__).resolve().parents[1] / "web" / "ember.js"

SCRIPT = r"""
const [emberJs, manifest] = process.argv.slice(1);
globalThis.fetch = async (url) => String(url).endsWith("manifest.json")
  ? { ok: true, json: async () => JSON.parse(manifest) } : { ok: false };
const sent = [];
globalThis.Worker = class {  // answers as worker.js does: ready to init, the files it was asked for to load
  postMessage(m) {
    sent.push(m);
    const data = m.type === "load" ? { tool: m.tool, files: m.files.map((f) => f.url) } : undefined;
    const tools = { whisper: { files: [["config.json"]], beside: {}, packages: [] } };  // tools.table()'s shape
    setTimeout(() => this.onmessage({ data: m.type === "init" ? { type: "ready", id: m.id, device: "cpu", tools }
                                                                : { type: "result", id: m.id, data } }));
  }
};
const { createEmber } = await import(emberJs);
const ember = await createEmber({ wheelURL: "w.whl", modelsURL: "http://site/models/", configURL: "http://site/no.json" });
const out = {};
for (const s of ["base", "tiny.en", "demo", "demo:whisper-base", "whisper-base"]) out[s] = (await ember.loadModel("whisper", s)).files;
try { await ember.loadModel("whisper", "large-v3"); } catch (e) { out.error = [e.code, e.message]; }
process.stdout.write(JSON.stringify(out));
"""


def test_a_demo_by_its_short_name():
    if shutil.which("node") is None:
        missing("node is not installed")
    manifest = {"whisper": [
        {"id": "whisper-tiny.en", "label": "tiny", "files": [{"name": "model.safetensors", "url": "whisper-tiny.en/model.safetensors"}]},
        {"id": "whisper-base", "label": "base", "files": [{"name": "model.safetensors", "url": "whisper-base/model.safetensors"}]}]}
    r = subprocess.run(["node", "--input-type=module", "-e", SCRIPT, EMBER_JS.as_uri(), json.dumps(manifest)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    base, tiny = ["http://site/models/whisper-base/model.safetensors"], ["http://site/models/whisper-tiny.en/model.safetensors"]
    assert got["base"] == got["demo:whisper-base"] == got["whisper-base"] == base
    assert got["tiny.en"] == got["demo"] == tiny  # "demo" is the build's first: tiny.en stays the default
    code, message = got["error"]
    assert code == "bad_request" and "large-v3" in message and "tiny.en, base" in message
