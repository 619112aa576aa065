"""The ember book (mkdocs.yml + docs/ of a checkout) built into a folder, for `ember build-web OUT --docs` and
`ember serve` (which builds it where it can, once per change of docs/), which put it under OUT/docs/ beside the app. mkdocs and mkdocs-material are build-time tools (pip);
the built book loads nothing from another host (mkdocs.yml: theme.font false, no CDN)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "mkdocs.yml"


class BookBuildError(RuntimeError):
    """The book could not be built (no checkout, no mkdocs, or mkdocs --strict failed)."""


def build_book(dest: str | os.PathLike) -> Path:
    """Build the book with `mkdocs build --strict` and make `dest` hold exactly it; -> dest."""
    if not CONFIG.is_file():
        raise BookBuildError(f"ember: {CONFIG} not found: the book is built from an ember checkout")
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        raise BookBuildError("ember: building the book needs mkdocs and mkdocs-material "
                             "(pip install mkdocs mkdocs-material)") from None
    dest = Path(dest).resolve()  # mkdocs reads a relative -d against mkdocs.yml's folder
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".book-") as tmp:
        site = Path(tmp) / "site"
        r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(CONFIG),
                            "-d", str(site)], capture_output=True, text=True)
        if r.returncode:
            raise BookBuildError(f"ember: mkdocs build --strict failed:\n{r.stdout}{r.stderr}")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(site, dest)
    return dest


def ensure_book() -> Path:
    """The built book in ember's cache, rebuilt only when mkdocs.yml or docs/ changed; -> its folder."""
    import hashlib

    from ember import hub
    if not CONFIG.is_file():
        raise BookBuildError(f"ember: {CONFIG} not found: the book is built from an ember checkout")
    h = hashlib.sha256(CONFIG.read_bytes())
    for p in sorted((ROOT / "docs").rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    folder = hub.cache_dir("web", "book") / h.hexdigest()[:16]
    if not (folder / "index.html").is_file():
        build_book(folder)
    return folder
