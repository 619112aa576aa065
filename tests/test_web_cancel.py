"""ember.js's cancel() under Node with a stand-in Worker: a request that stops at its next step ends without a
restart; one that does not stop is first interrupted through the shared buffer the worker handed over (the
cross-origin isolated page's SharedArrayBuffer), then, still going, ends within a second by a fresh worker on
the same device (onRestart is told; the next request waits for the new worker); cancel({hard: false}) only asks.
The browser side of the same (Whisper, downloads) is e2e/test_web_app_keep.py and e2e/test_web_offline.py."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from expected_skips import missing

EMBER_JS = Path(__file__).resolve().parents[1] / "web" / "ember.js"

SCRIPT = r"""
const emberJs = process.argv[1];
globalThis.fetch = async () => ({ ok: false });
let spawned = 0;
const inits = [], sab = new SharedArrayBuffer(4);
globalThis.Worker = class {  // answers init, runs, and a cancel of a "polite" run; a "stuck" run never answers
  constructor() { this.n = ++spawned; this.dead = false; }
  reply(data) { setTimeout(() => { if (!this.dead) this.onmessage({ data }); }, 20); }
  postMessage(m) {
    if (this.dead) return;
    if (m.type === "init") { inits.push(m.device); this.reply({ type: "ready", id: m.id, device: "cpu", tools: {}, interrupt: sab }); }
    else if (m.type === "run" && m.opts.mode === "polite") this.polite = m.id;
    else if (m.type === "run" && m.opts.mode === "stuck") {}
    else if (m.type === "run") this.reply({ type: "result", id: m.id, data: { worker: this.n } });
    else if (m.type === "cancel" && this.polite) { this.reply({ type: "result", id: this.polite, data: { stopped: "cancelled" } }); this.polite = null; }
  }
  terminate() { this.dead = true; }
};
const { createEmber } = await import(emberJs);
let restarts = 0;
const ember = await createEmber({ wheelURL: "w.whl", configURL: "http://site/no.json", onRestart: () => restarts++ });
const out = {};
let p = ember._run("x", null, { mode: "polite" });
ember.cancel();
out.polite = [await p, restarts];
await new Promise((r) => setTimeout(r, 900));  // no late escalation for the request that ended
out.politeLater = [restarts, new Int32Array(sab)[0]];

p = ember._run("x", null, { mode: "stuck" });
const t0 = Date.now();
ember.cancel();
setTimeout(() => { out.interrupted = new Int32Array(sab)[0]; }, 400);
try { await p; out.stuck = "answered"; } catch (e) { out.stuck = [e.code, Date.now() - t0]; }
out.restarted = [restarts, spawned, Object.keys(ember.models).length];
out.after = await ember._run("x", null, {});
out.inits = inits;

new Int32Array(sab)[0] = 0;
p = ember._run("x", null, { mode: "stuck" });
ember.cancel({ hard: false });
out.soft = await Promise.race([p.then(() => "answered"), new Promise((r) => setTimeout(() => r("still running"), 1200))]);
out.softLater = [restarts, new Int32Array(sab)[0]];
process.stdout.write(JSON.stringify(out));
process.exit(0);
"""


def test_cancel_asks_then_interrupts_then_restarts_within_a_second():
    if shutil.which("node") is None:
        missing("node is not installed")
    r = subprocess.run(["node", "--input-type=module", "-e", SCRIPT, EMBER_JS.as_uri()],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["polite"] == [{"stopped": "cancelled"}, 0] and out["politeLater"] == [0, 0]
    assert out["interrupted"] == 2  # SIGINT into the worker's interrupt buffer before any restart
    code, ms = out["stuck"]
    assert code == "cancelled" and 600 <= ms < 1000, out["stuck"]
    assert out["restarted"] == [1, 2, 0]  # one fresh worker, the models dropped
    assert out["after"] == {"worker": 2} and out["inits"] == ["auto", "cpu"]  # the same device as before
    assert out["soft"] == "still running" and out["softLater"] == [1, 0]
