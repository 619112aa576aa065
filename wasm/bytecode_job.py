"""Runs INSIDE Pyodide (under Node, started by ember.wasm.bytecode): compile the Python the page imports at
boot into CPython 3.12 bytecode with Pyodide's own interpreter, so the page never compiles it again.

Pyodide 0.27 ships its standard library and numpy as .py sources only, and a browser page forgets any .pyc
it writes: every load compiled ~150 stdlib modules, numpy and ember again (most of the boot). The .pyc are
unchecked-hash (PEP 552): used without looking at the source's mtime, which unpacking does not keep; they
are built from exactly the files they sit beside (the bytes are hashed into the cache key by the caller).

Standard library: a copy of python_stdlib.zip with `mod.pyc` beside every `mod.py` (zipimport's layout).
numpy and ember: one zip of `<pkg>/.../__pycache__/<mod>.cpython-312.pyc`, unpacked into site-packages.
Only the standard library is imported here.
"""
import importlib._bootstrap_external as _bx
import importlib.util
import os
import sys
import zipfile


def _pyc(source: bytes, filename: str) -> bytes | None:
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError:  # a test-data file of the stdlib that is not meant to compile
        return None
    return bytes(_bx._code_to_hash_pyc(code, importlib.util.source_hash(source), False))


def stdlib(src_zip: str, out_zip: str, prefix: str = "/lib/python312.zip/") -> int:
    n = 0
    with zipfile.ZipFile(src_zip) as src, zipfile.ZipFile(out_zip + ".tmp", "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info, data)
            if info.filename.endswith(".py"):
                pyc = _pyc(data, prefix + info.filename)
                if pyc is not None:
                    out.writestr(info.filename + "c", pyc)
                    n += 1
    os.replace(out_zip + ".tmp", out_zip)
    return n


def packages(site: str, names: list[str], out_zip: str) -> int:
    """__pycache__ entries for every .py of the packages `names` installed under `site`."""
    n = 0
    with zipfile.ZipFile(out_zip + ".tmp", "w", zipfile.ZIP_DEFLATED) as out:
        for name in names:
            for folder, dirs, files in os.walk(os.path.join(site, name)):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for f in sorted(files):
                    if not f.endswith(".py"):
                        continue
                    path = os.path.join(folder, f)
                    with open(path, "rb") as fh:
                        pyc = _pyc(fh.read(), path)
                    if pyc is not None:
                        out.writestr(os.path.relpath(importlib.util.cache_from_source(path), site), pyc)
                        n += 1
    os.replace(out_zip + ".tmp", out_zip)
    return n


def main(job: dict) -> dict:
    assert sys.implementation.cache_tag == job["cache_tag"], (sys.implementation.cache_tag, job["cache_tag"])
    done = {}
    if job.get("stdlib_out"):
        done["stdlib"] = stdlib(job["stdlib_src"], job["stdlib_out"])
    if job.get("packages_out"):
        with zipfile.ZipFile(job["wheel"]) as z:
            z.extractall(job["site"])
        done["packages"] = packages(job["site"], job["packages"], job["packages_out"])
    return done
