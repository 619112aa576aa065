"""Precompiled bytecode for the page's boot (`ember build-web` / `ember serve`, local Pyodide only).

A cold page spent most of its start compiling Python: Pyodide 0.27 ships its standard library and numpy
as .py only, ember's wheel is .py only, and a page keeps no .pyc between loads. This runs Pyodide once
under Node (the Node that fetched Pyodide with npm) and lets its own CPython 3.12 compile them (the job
itself is bytecode_job.py), into two files the page loads instead:

    pyodide/python_stdlib.pyc.zip     python_stdlib.zip plus a .pyc beside every .py (loadPyodide stdLibURL)
    wheels/<hash>/pycache-cp312.zip   numpy's and ember's __pycache__ folders, unpacked into site-packages

Both are cached under ember.hub.cache_dir("web")/bytecode, keyed by the sha256 of what they were compiled
from, so a rebuild with unchanged inputs costs nothing. Without Node the site is built without them (the
page then compiles as before, just slower) and a warning says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE_TAG = "cpython-312"  # Pyodide 0.27's interpreter; the job refuses to run under another
PACKAGES = ("numpy", "ember")
STDLIB_NAME, PYCACHE_NAME = "python_stdlib.pyc.zip", "pycache-cp312.zip"
NODE_SCRIPT = r"""
import { pathToFileURL } from "node:url";
const [indexURL, host] = process.argv.slice(1);
const { loadPyodide } = await import(pathToFileURL(indexURL + "/pyodide.mjs").href);
const py = await loadPyodide({ indexURL: indexURL + "/", stdout: (s) => console.error(s), stderr: (s) => console.error(s) });
await py.loadPackage(["numpy"], { messageCallback: () => {} });
py.FS.mkdirTree("/host");
py.mountNodeFS("/host", host);
process.stdout.write(py.runPython(
  "import json, sys, sysconfig; sys.path.insert(0, '/host'); import bytecode_job\n" +
  "job = json.load(open('/host/job.json')); job['site'] = sysconfig.get_path('purelib')\n" +
  "json.dumps(bytecode_job.main(job))"));
"""


class BytecodeError(RuntimeError):
    """Node or Pyodide failed while compiling; the site is built without bytecode."""


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def cache_root() -> Path:
    from ember import hub
    return hub.cache_dir("web", "bytecode")


def ensure_bytecode(dist: Path, wheel: Path, numpy_wheel: Path) -> dict[str, Path]:
    """{"stdlib": python_stdlib.pyc.zip, "pycache": pycache-cp312.zip} for this Pyodide folder and ember wheel,
    compiled on first use; raises BytecodeError when Node/Pyodide cannot do it."""
    root = cache_root()
    want = {"stdlib": root / f"stdlib-{_sha(dist / 'python_stdlib.zip')}" / STDLIB_NAME,
            "pycache": root / f"pkgs-{_sha(wheel)}-{_sha(numpy_wheel)}" / PYCACHE_NAME}
    missing = {k: p for k, p in want.items() if not p.is_file()}
    if missing:
        _compile(dist, wheel, missing)
    return want


def _node() -> str | None:
    return shutil.which("node")


def _compile(dist: Path, wheel: Path, outputs: dict[str, Path]) -> None:
    node = _node()
    if node is None:
        raise BytecodeError("ember: no node on PATH to precompile the page's Python (install Node.js 20)")
    with tempfile.TemporaryDirectory(prefix="ember-bytecode-") as tmp:
        host = Path(tmp)
        shutil.copy2(Path(__file__).with_name("bytecode_job.py"), host / "bytecode_job.py")
        shutil.copy2(wheel, host / "ember.whl")
        job = {"cache_tag": CACHE_TAG, "packages": list(PACKAGES)}
        if "stdlib" in outputs:
            job.update(stdlib_src="/lib/python312.zip", stdlib_out=f"/host/{STDLIB_NAME}")
        if "pycache" in outputs:
            job.update(wheel="/host/ember.whl", packages_out=f"/host/{PYCACHE_NAME}")
        (host / "job.json").write_text(json.dumps(job))
        try:
            r = subprocess.run([node, "--input-type=module", "-e", NODE_SCRIPT, str(dist.resolve()), str(host)],
                               capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise BytecodeError("ember: precompiling the page's Python under Node timed out (900 s)") from None
        if r.returncode != 0:
            tail = "\n".join(ln[:300] for ln in r.stderr.strip().splitlines()[-8:])
            raise BytecodeError(f"ember: precompiling the page's Python under Node failed (exit {r.returncode}): {tail}")
        for key, dest in outputs.items():
            src = host / (STDLIB_NAME if key == "stdlib" else PYCACHE_NAME)
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(f".{dest.name}.{os.getpid()}")
            shutil.move(src, part)
            os.replace(part, dest)  # whole or absent: a concurrent build sees one or the other
        print(f"ember:       precompiled the page's Python: {r.stdout.strip()}", file=sys.stderr, flush=True)
