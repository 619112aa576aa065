"""The site's service worker (web/sw.js) with its build: `ember build-web` writes OUT/sw.js as

    self.BUILD = {"version": ..., "files": {path: sha256, ...}};
    <web/sw.js>

`files` are what the page needs to become ready (the app shell, config.json, the models manifest, Pyodide's boot
files, ember's wheel and bytecode); `version` is a hash of them all, so any change to any of them makes a new
sw.js, which the browser installs as a new version beside the old one (its own cache, "ember-app-<version>").
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

SW_NAME = "sw.js"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_service_worker(out: Path, source: Path, paths: list[str]) -> str:
    """Write out/sw.js for the site files `paths` (relative to out, each present); -> the build's version."""
    files = {p: _sha256(out / p) for p in sorted(set(paths))}
    version = hashlib.sha256(json.dumps(files, sort_keys=True).encode() + source.read_bytes()).hexdigest()[:16]
    text = f"self.BUILD = {json.dumps({'version': version, 'files': files}, indent=1)};\n" + source.read_text()
    dest = out / SW_NAME
    tmp = dest.with_name(f".{SW_NAME}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, dest)  # a fresh file: never written through a hard link into web/
    return version
