"""The book (mkdocs.yml + docs/) cannot rot: every code block runs, and the site builds offline.

- Each page's ```python and ```bash blocks run in document order in one fresh folder, the python ones in one
  interpreter (a later block sees an earlier one's names), the bash ones with `bash -euo pipefail`, so
  every `ember ...` command and every snippet is executed as written. ```js blocks are parsed by Node.
- A block that must not run here (a CUDA GPU, a server that never returns, a pip install) carries the
  marker `<!-- no-run: reason -->` on the line before it; the reasons are listed and kept few.
- `mkdocs build --strict` fails on a broken link or anchor; the built site loads nothing from another
  host (no web fonts, no CDN scripts or styles).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```\s*$", re.M | re.S)
NO_RUN = re.compile(r"<!--\s*no-run:\s*(?P<why>[^>]*?)\s*-->\s*$")
RUN = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
MAX_NO_RUN = 12   # whole book: a few GPU-only or never-returning blocks, not a way to skip docs


def blocks(page: str):
    """[(lang, code, no_run reason or None, line)] for the fenced blocks of docs/<page>."""
    text = (DOCS / page).read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        why = NO_RUN.search(before)
        code = "\n".join(line[len(m["indent"]):] for line in m["code"].split("\n"))
        out.append((m["lang"].lower(), code, why["why"] if why else None, text.count("\n", 0, m.start()) + 1))
    return out


# runs inside the page's folder: python blocks exec'd in one namespace, bash blocks as subprocesses
RUNNER = r"""
import json, subprocess, sys, traceback
ns = {"__name__": "__main__"}
for lang, code, line in json.load(open(sys.argv[1])):
    print(f"--- {sys.argv[2]}:{line} ({lang})", flush=True)
    if lang == "python":
        try:
            exec(compile(code, f"{sys.argv[2]}:{line}", "exec"), ns)
        except BaseException:
            traceback.print_exc()
            sys.exit(1)
    else:
        if subprocess.run(["bash", "-euo", "pipefail", "-c", code]).returncode:
            print(f"the bash block at {sys.argv[2]}:{line} failed", flush=True)
            sys.exit(1)
"""


@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page, tmp_path):
    todo = [(RUN[lang], code, line) for lang, code, why, line in blocks(page) if lang in RUN and why is None]
    if not todo:
        return
    (tmp_path / "blocks.json").write_text(json.dumps(todo))
    (tmp_path / "runner.py").write_text(RUNNER)
    # Ray's session folder: short (its socket paths must stay under 108 bytes) and removed afterwards
    ray_tmp = tempfile.mkdtemp(prefix="ray-docs-")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "bench"):  # the book's commands name these as a checkout's folders
        (work / name).symlink_to(ROOT / name)
    r = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json"), f"docs/{page}"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=900)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert r.returncode == 0, f"a code block of docs/{page} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"


def test_js_blocks_parse(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is needed to parse the book's JavaScript blocks")
    n = 0
    for page in PAGES:
        for lang, code, why, line in blocks(page):
            if lang in ("js", "javascript") and why is None:
                f = tmp_path / f"{page.replace('/', '_')}_{line}.mjs"
                f.write_text(code)
                r = subprocess.run([node, "--check", str(f)], capture_output=True, text=True)
                assert r.returncode == 0, f"docs/{page}:{line}: the js block does not parse:\n{r.stderr}"
                n += 1
    assert n > 0


def test_no_run_markers_are_few_and_explained():
    marked = [(page, line, why) for page in PAGES for lang, code, why, line in blocks(page) if why is not None]
    assert all(why.strip() for _, _, why in marked)
    print("\nblocks that do not run in CI:" + "".join(f"\n  docs/{p}:{ln}: {w}" for p, ln, w in marked))
    assert len(marked) <= MAX_NO_RUN, marked
    langs = {lang for page in PAGES for lang, _, _, _ in blocks(page)}
    assert langs <= set(RUN) | {"js", "javascript", "text", "toml", "yaml", "json", ""}, langs


def test_every_page_is_in_the_nav():
    import yaml
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for n in node:
                yield from pages(n)
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
    assert sorted(pages(nav)) == PAGES


# hosts an offline site must not load anything from (fonts, CDNs, analytics)
EXTERNAL_ASSET = re.compile(r"""(?:<(?:link|script|img|iframe)[^>]+(?:href|src)\s*=\s*["']|@import\s+(?:url\()?["']?|url\(["']?)"""
                            r"""(?:https?:)?//""", re.I)


def test_book_builds_strict_and_offline(tmp_path):
    """`mkdocs build --strict` through ember.wasm.book (what `ember build-web OUT --docs` runs)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    from ember.wasm.book import build_book
    site = build_book(tmp_path / "site" / "docs")
    assert (site / "index.html").is_file() and (site / "search" / "search_index.json").is_file()
    assert {p.with_suffix("").as_posix() for p in map(Path, PAGES)} <= \
        {p.relative_to(site).with_suffix("").as_posix() for p in site.rglob("*.html")}
    found = []
    for f in site.rglob("*"):
        if f.suffix in (".html", ".css") and f.is_file():
            for m in EXTERNAL_ASSET.finditer(f.read_text(encoding="utf-8", errors="replace")):
                found.append(f"{f.relative_to(site)}: {m.group(0)}")
    assert not found, "the built book loads assets from other hosts:\n" + "\n".join(found[:20])
    for f in site.rglob("*"):
        if f.suffix in (".css", ".js", ".html"):
            text = f.read_text(encoding="utf-8", errors="replace")
            assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, f


def test_broken_link_fails_the_build(tmp_path):
    """--strict is what catches a dead link: a copy of the book with one fails to build."""
    pytest.importorskip("material")
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "install.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "no-such-page.md" in r.stdout + r.stderr
