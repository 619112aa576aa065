"""In the page (headless Chromium, --enable-unsafe-webgpu: SwiftShader here), device "auto" reads the
adapter's info and isFallbackAdapter and takes the CPU on a software adapter, saying why; "webgpu" still
forces it. Cheap: Pyodide + the wheel and one tiny reduction, no model."""
from __future__ import annotations

import json

from test_webgpu_browser import page, run_python  # noqa: F401  (the module-scoped page fixture)

CHOICE = """
import json
from ember.wasm.worker_api import pick_device
import ember
auto = await pick_device("auto")
forced = await pick_device("webgpu")
ad = ember.device("webgpu").backend.adapter
json.dumps({"auto": auto, "forced": forced, "software": ad.software, "details": ad.details})
"""


def test_page_auto_skips_a_software_adapter(page):  # noqa: F811
    out = json.loads(run_python(page, CHOICE))
    assert out["forced"]["device"] == "webgpu", out        # forcing works on any adapter that computes
    assert out["details"]["vendor"] in out["forced"]["adapter"] and "max storage binding" in out["forced"]["adapter"]
    if out["software"] is None:                              # a hardware adapter in this browser
        assert out["auto"]["device"] == "webgpu", out
    else:
        assert out["auto"]["device"] == "cpu", out
        assert out["software"] in out["auto"]["reason"] and "force" in out["auto"]["reason"]
