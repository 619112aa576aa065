"""What makes the page start fast, without a browser: the bytecode `ember build-web` precompiles with Pyodide
under Node (wasm/bytecode.py) is what Pyodide then imports, with not one module compiled from source; it is
cached by its inputs; the site's config names it; `ember serve` sends cache headers by path."""
from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
import zipfile
from pathlib import Path

import pytest

from ember.wasm import bytecode, serve
from ember.wasm.assets import PyodideFetchError, ensure_pyodide

# boot Pyodide as the page does (stdLibURL, numpy, the wheel and __pycache__ unpacked into site-packages),
# then import what the worker imports, counting every module compiled from source on the way
CHECK = r"""
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [dist, stdlib, wheel, pycache] = process.argv.slice(1);
const { loadPyodide } = await import(pathToFileURL(dist + "/pyodide.mjs").href);
const py = await loadPyodide({ indexURL: dist + "/", stdLibURL: stdlib, stdout: console.error, stderr: console.error });
await py.loadPackage(["numpy"], { messageCallback: () => {} });
const site = py.runPython("import sysconfig; sysconfig.get_path('purelib')");
py.unpackArchive(new Uint8Array(readFileSync(wheel)), "wheel", { extractDir: site });
py.unpackArchive(new Uint8Array(readFileSync(pycache)), "zip", { extractDir: site });
process.stdout.write(py.runPython(`
import importlib._bootstrap_external as bx, json, sys
compiled = []
to_code = bx.SourceLoader.source_to_code
def counted(self, data, path, *, _optimize=-1):
    compiled.append(path)
    return to_code(self, data, path, _optimize=_optimize)
bx.SourceLoader.source_to_code = counted
import ember, ember.wasm.worker_api
x = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
json.dumps({"compiled": compiled, "matmul": (x @ x).tolist(), "json_from": sys.modules["json"].__spec__.origin,
            "ember_cached": sys.modules["ember"].__spec__.cached})
`));
"""


@pytest.fixture(scope="module")
def built():
    try:
        dist = ensure_pyodide()
    except PyodideFetchError as e:
        pytest.skip(f"no offline Pyodide ({e})")
    lock = json.loads((dist / "pyodide-lock.json").read_text())
    numpy = dist / lock["packages"]["numpy"]["file_name"]
    wheel = serve.ensure_wheel()
    return dist, wheel, numpy, bytecode.ensure_bytecode(dist, wheel, numpy)


def test_pyodide_imports_the_precompiled_bytecode_and_compiles_nothing(built):
    dist, wheel, _, out = built
    r = subprocess.run(["node", "--input-type=module", "-e", CHECK, str(dist), str(out["stdlib"]), str(wheel),
                        str(out["pycache"])], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["compiled"] == []
    assert got["matmul"] == [[7.0, 10.0], [15.0, 22.0]]
    assert got["json_from"].endswith("python312.zip/json/__init__.pyc")  # the stdlib's, beside its source
    assert got["ember_cached"].endswith("ember/__pycache__/__init__.cpython-312.pyc")


def test_the_stdlib_copy_keeps_every_original_file_byte_for_byte(built):
    dist, _, _, out = built
    with zipfile.ZipFile(dist / "python_stdlib.zip") as a, zipfile.ZipFile(out["stdlib"]) as b:
        names = set(b.namelist())
        for info in a.infolist():
            assert b.read(info.filename) == a.read(info), info.filename
            if info.filename.endswith(".py"):
                assert info.filename + "c" in names, info.filename


def test_unchanged_inputs_are_not_compiled_again(built, monkeypatch):
    dist, wheel, numpy, out = built
    monkeypatch.setattr(bytecode, "_compile", lambda *a: pytest.fail("compiled again"))
    assert bytecode.ensure_bytecode(dist, wheel, numpy) == out


def test_without_node_the_site_builds_without_bytecode(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bytecode, "cache_root", lambda: tmp_path / "bytecode")  # nothing compiled yet
    monkeypatch.setattr(bytecode, "_node", lambda: None)
    out = serve.build_site(tmp_path / "site", pyodide="local", models={})
    config = json.loads((out / "config.json").read_text())
    assert "stdlibURL" not in config and "pycacheURL" not in config
    assert "no node on PATH" in capsys.readouterr().err


def test_local_site_config_names_the_bytecode_and_serve_sends_cache_headers(tmp_path):
    out = serve.build_site(tmp_path / "site", pyodide="local", models={}, quiet=True)
    config = json.loads((out / "config.json").read_text())
    for key in ("stdlibURL", "pycacheURL", "bootURL"):
        path = out / (config.get(key) or key)
        assert path.is_file(), key
    server = serve.make_server(out, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        for path, want in ((config["wheelURL"], "immutable"), (config["stdlibURL"], "max-age=86400"),
                           ("index.html", "no-cache"), ("config.json", "no-cache")):
            with urllib.request.urlopen(base + path) as r:
                assert want in r.headers["Cache-Control"], path
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_wheel_leaves_out_the_llama_demo_and_its_record_says_so():
    with zipfile.ZipFile(serve.ensure_wheel()) as z:
        names = set(z.namelist())
        record = z.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    assert "ember/tensor.py" in names
    assert not any(n.startswith(serve.PAGE_WHEEL_LEAVES_OUT) for n in names)
    assert {ln.split(",")[0] for ln in record.splitlines() if ln} == names
