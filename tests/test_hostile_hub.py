"""The hub cache never keeps a bad file: a download cut short (with a short, missing or lying length), the wrong
bytes (checked against the X-Linked-Etag / ETag sha256 the Hugging Face hub sends, through its redirect), a
resume across a change upstream, a stalled or endless transfer. Each test runs its own server on 127.0.0.1."""
import contextlib
import hashlib
import http.server
import threading
import time

import pytest

from ember import hub

BODY = bytes(range(256)) * 64  # 16 KB
OTHER = bytes(reversed(BODY))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves server.routes[path] = dict(body, headers, length, cut, redirect, trickle, no_length, etag);
    honours Range (and If-Range against the route's etag)."""
    protocol_version = "HTTP/1.0"
    timeout = 20

    def do_GET(self):
        route = self.server.routes.get(self.path)
        self.server.log.append((self.path, self.headers.get("Range"), self.headers.get("If-Range")))
        if route is None:
            self.send_error(404)
            return
        if "redirect" in route:
            self.send_response(302)
            self.send_header("Location", route["redirect"])
            for k, v in route.get("headers", {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, start, status = route["body"], 0, 200
        rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
        if rng and (if_range is None or if_range == route.get("etag")):
            start, status = int(rng.split("=")[1].split("-")[0]), 206
        self.send_response(status)
        if route.get("etag"):
            self.send_header("ETag", route["etag"])
        for k, v in route.get("headers", {}).items():
            self.send_header(k, v)
        if not route.get("no_length"):
            n = route.get("length", len(body) - start)
            self.send_header("Content-Length", str(n))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        out = body[start:]
        if route.get("cut"):
            out = out[:route["cut"]]
        if route.get("trickle"):
            for i in range(0, len(out), route["trickle"][0]):
                self.wfile.write(out[i:i + route["trickle"][0]])
                self.wfile.flush()
                time.sleep(route["trickle"][1])
            return
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(routes):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.routes, srv.log, srv.daemon_threads = routes, [], True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def _nothing_cached(folder):
    return [p.name for p in folder.iterdir()] == []


def test_no_length_and_an_early_close_is_not_cached(tmp_path):
    # HTTP/1.0, no Content-Length, the server closes after half: before, cached as complete
    with serve({"/f.bin": {"body": BODY, "no_length": True, "cut": len(BODY) // 2}}) as (srv, url):
        with pytest.raises(hub.HubError, match="neither the file's length nor a checksum"):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin")
    assert _nothing_cached(tmp_path)


def test_a_short_content_length_is_caught_by_x_linked_size(tmp_path):
    # the hub's redirect says X-Linked-Size 16384; the CDN's Content-Length says 1000 and sends 1000 bytes
    routes = {"/resolve/f.bin": {"redirect": "/cdn/f.bin", "headers": {"X-Linked-Size": str(len(BODY))}},
              "/cdn/f.bin": {"body": BODY, "length": 1000, "cut": 1000}}
    with serve(routes) as (srv, url):
        with pytest.raises(hub.HubError, match="declares 16384 bytes .X-Linked-Size. but sends 1000"):
            hub.download(f"{url}/resolve/f.bin", tmp_path / "f.bin")
    assert _nothing_cached(tmp_path)


def test_wrong_bytes_are_caught_by_the_x_linked_etag_sha256(tmp_path):
    routes = {"/resolve/f.bin": {"redirect": "/cdn/f.bin", "headers": {
        "X-Linked-Size": str(len(BODY)), "X-Linked-Etag": f'"{sha(BODY)}"', "ETag": '"0123abcd"'}},
        "/cdn/f.bin": {"body": OTHER}}  # the same length, other bytes
    with serve(routes) as (srv, url):
        with pytest.raises(hub.ChecksumError, match=f"{sha(OTHER)} != the server's X-Linked-Etag/ETag {sha(BODY)}"):
            hub.download(f"{url}/resolve/f.bin", tmp_path / "f.bin")
        assert _nothing_cached(tmp_path)
        routes["/cdn/f.bin"]["body"] = BODY  # the real bytes: verified and kept
        assert hub.download(f"{url}/resolve/f.bin", tmp_path / "f.bin").read_bytes() == BODY
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_an_etag_that_is_a_sha256_verifies_without_a_redirect(tmp_path):
    with serve({"/f.bin": {"body": OTHER, "etag": f'W/"{sha(BODY)}"'}}) as (srv, url):
        with pytest.raises(hub.ChecksumError):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin")
    assert _nothing_cached(tmp_path)


def test_a_resume_across_a_change_upstream_starts_over(tmp_path):
    # the first attempt is cut; the file then changes upstream (new ETag): the resume sends If-Range with the
    # old ETag, the server answers the whole new file, and that is what is cached (before: old head + new tail)
    route = {"body": BODY, "etag": '"v1"', "cut": len(BODY) // 2}
    with serve({"/f.bin": route}) as (srv, url):
        with pytest.raises(hub.HubError, match="closed after 8192 of 16384"):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin")
        route.update(body=OTHER, etag='"v2"', cut=None)
        assert hub.download(f"{url}/f.bin", tmp_path / "f.bin").read_bytes() == OTHER
        assert srv.log[-1] == ("/f.bin", "bytes=8192-", '"v1"')
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_a_resume_of_the_same_version_continues(tmp_path):
    route = {"body": BODY, "etag": '"v1"', "cut": len(BODY) // 2}
    with serve({"/f.bin": route}) as (srv, url):
        with pytest.raises(hub.HubError):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin")
        route["cut"] = None
        assert hub.download(f"{url}/f.bin", tmp_path / "f.bin").read_bytes() == BODY
        assert srv.log[-1] == ("/f.bin", "bytes=8192-", '"v1"')


def test_a_stalled_transfer_is_stopped_and_kept_for_a_resume(tmp_path, monkeypatch):
    # 64 bytes every 0.1 s never trips the socket timeout; under EMBER_HUB_STALL_BYTES per `timeout` seconds it stalls
    monkeypatch.setenv("EMBER_HUB_STALL_BYTES", "4096")
    with serve({"/f.bin": {"body": BODY, "trickle": (64, 0.1)}}) as (srv, url):
        t0 = time.monotonic()
        with pytest.raises(hub.HubError, match="stalled"):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin", timeout=1.0)
        assert time.monotonic() - t0 < 5
    assert (tmp_path / "f.bin.part").is_file() and not (tmp_path / "f.bin").exists()


def test_the_overall_deadline(tmp_path):
    # steady enough never to stall, too slow to finish: stopped at the deadline
    with serve({"/f.bin": {"body": BODY * 4, "trickle": (1024, 0.1)}}) as (srv, url):
        t0 = time.monotonic()
        with pytest.raises(hub.HubError, match="not finished within 1 s"):
            hub.download(f"{url}/f.bin", tmp_path / "f.bin", deadline=1.0)
        assert time.monotonic() - t0 < 4
    assert not (tmp_path / "f.bin").exists()
