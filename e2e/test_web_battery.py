"""The core op battery (tests/pyodide_battery.py) in a real browser: Chromium's main thread loads Pyodide,
numpy and the ember wheel from the built site and runs the battery; the results must match CPython's under
the same rules as tests/test_pyodide_runtime.py (bit-identical for exact ops, 1e-6 normwise otherwise)."""
from __future__ import annotations

import base64
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from web_app import ARGS, CHROMIUM

TESTS = Path(__file__).resolve().parents[1] / "tests"
BATTERY = TESTS / "pyodide_battery.py"

RUN_JS = """async ([base, source]) => {
  const config = await (await fetch(base + "config.json")).json();
  const { loadPyodide } = await import(new URL(config.pyodideURL + "pyodide.mjs", base).href);
  const py = await loadPyodide({ indexURL: new URL(config.pyodideURL, base).href });
  await py.loadPackage("numpy");
  await py.loadPackage(new URL(config.wheelURL, base).href);
  py.globals.set("source", source);
  return await py.runPythonAsync(`
import json
ns = {"__name__": "pyodide_battery"}
exec(compile(source, "pyodide_battery.py", "exec"), ns)
json.dumps(ns["result"])`);
}"""


def _decode(entry):
    dtype, shape, b64 = entry
    return np.frombuffer(base64.b64decode(b64), dtype=dtype).reshape(shape)


def test_op_battery_in_chromium_matches_cpython(playwright_session, server):
    sys.path.insert(0, str(TESTS))
    try:
        from test_pyodide_runtime import EXACT
    finally:
        sys.path.remove(str(TESTS))
    source = BATTERY.read_text()
    ns = {"__name__": "pyodide_battery"}
    exec(compile(source, str(BATTERY), "exec"), ns)
    expected = ns["result"]

    profile = tempfile.mkdtemp(prefix="ember-e2e-")
    ctx = playwright_session.chromium.launch_persistent_context(profile, executable_path=CHROMIUM,
                                                                headless=True, args=ARGS)
    try:
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.url + "config.json")
        page.set_default_timeout(300_000)
        got = json.loads(page.evaluate(RUN_JS, [server.url, source]))
    finally:
        ctx.close()
        shutil.rmtree(profile, ignore_errors=True)
    assert errors == []
    assert got.keys() == expected.keys()
    assert EXACT <= expected.keys()
    bad = []
    for name in expected:
        ref, out = _decode(expected[name]), _decode(got[name])
        if (out.dtype, out.shape) != (ref.dtype, ref.shape):
            bad.append(f"{name}: {out.dtype}{out.shape} vs {ref.dtype}{ref.shape}")
        elif name in EXACT or not np.issubdtype(ref.dtype, np.floating):
            if out.tobytes() != ref.tobytes():
                bad.append(f"{name}: not bit-identical")
        else:
            err = float(np.abs(out.astype(np.float64) - ref).max())
            if err > 1e-6 * max(1.0, float(np.abs(ref).max())):
                bad.append(f"{name}: max abs error {err:.3g}")
    assert not bad, "Chromium/Pyodide differs from CPython: " + "; ".join(bad)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
