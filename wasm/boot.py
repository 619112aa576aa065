"""The page's boot bundle (`ember build-web` with the offline Pyodide): numpy and ember as installed in
site-packages, with their precompiled bytecode (wasm/bytecode.py), in one gzipped tar that web/worker.js
unpacks itself.

Without it the worker had Pyodide install numpy (loadPackage: the wheel unzipped by Python, then all 19 of its
extension modules compiled), then unzipped ember's wheel and the bytecode zip in Python: about 2 s of a 4-5 s
start on a 2-core machine. The tar is decompressed by the browser (DecompressionStream), its files handed to the
in-memory file system from JavaScript without a copy, and numpy's extension modules are compiled when Python
first imports them (numpy.random's, numpy.fft's and the test modules' never at boot). It is also smaller than
the three zips it replaces (6.2 MB against 6.7 MB), compressed across files.

The bundle is cached under ember's cache, keyed by the sha256 of the three files it is made from, and named by
its own hash, so the site can serve it as immutable.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_boot_bundle(numpy_wheel: Path, ember_wheel: Path, pycache: Path) -> Path:
    """boot-<hash>.tar.gz: every file of the three zips at its site-packages path; built once per inputs."""
    from ember import hub
    key = hashlib.sha256("".join(_sha(p) for p in (numpy_wheel, ember_wheel, pycache)).encode()).hexdigest()[:16]
    folder = hub.cache_dir("web", "boot", key)
    found = sorted(folder.glob("boot-*.tar.gz"))
    if found:
        return found[0]
    files: dict[str, bytes] = {}
    for archive in (numpy_wheel, ember_wheel, pycache):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if not info.is_dir():
                    files[info.filename] = z.read(info)
    data = _tar_gz(files)
    dest = folder / f"boot-{hashlib.sha256(data).hexdigest()[:16]}.tar.gz"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{dest.name}.{os.getpid()}"
    tmp.write_bytes(data)
    os.replace(tmp, dest)  # whole or absent
    return dest


def _tar_gz(files: dict[str, bytes]) -> bytes:
    """A reproducible ustar (sorted names, no times or owners) gzipped without a timestamp."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(files[name]), 0, 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()
