"""`ember serve` against hostile requests: only the site's regular files (no symlinks out, no listings, no
dotfiles), a status for every request that does not parse (never a traceback), and slow clients bounded by a
header deadline and a cap on connections. Each test builds its own site folder and talks raw HTTP."""
import socket
import threading
import time

import pytest

from ember.wasm import serve, site_server
from serving import raw, serving


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site"
    (root / "sub").mkdir(parents=True)
    (root / "index.html").write_text("<p>index</p>")
    (root / "app.js").write_text("export const x = 1;")
    (root / "sub" / "inner.js").write_text("inner")
    (root / "sub" / "index.html").write_text("sub index")
    (root / "empty").mkdir()
    (root / ".env").write_text("SECRET=1")
    (root / "sub" / ".hidden").write_text("hidden")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0")
    (root / "out.txt").symlink_to(outside / "passwd")          # a file link out of the site
    (root / "outdir").symlink_to(outside, target_is_directory=True)  # a folder link out
    (root / "alias.js").symlink_to(root / "app.js")              # a link that stays inside: served
    return root


def running(root, **limits):
    if limits:
        return serving(site_server.make_site_server(root, serve.Handler, 0, **limits))
    return serving(serve.make_server(root, 0))


def status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def get(port, path: str) -> tuple[int, bytes]:
    r = raw(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return status(r), r.split(b"\r\n\r\n", 1)[1]


def test_only_regular_files_under_the_real_root(site, capfd):
    with running(site) as port:
        assert get(port, "/") == (200, b"<p>index</p>")
        assert get(port, "/app.js") == (200, b"export const x = 1;")
        assert get(port, "/sub/inner.js") == (200, b"inner")
        assert get(port, "/alias.js") == (200, b"export const x = 1;")
        assert get(port, "/sub/") == (200, b"sub index")
        for path in ("/out.txt", "/outdir/passwd", "/outdir/", "/.env", "/sub/.hidden", "/.git/config",
                     "/%2e%2e/outside/passwd", "/../outside/passwd", "/sub/../../outside/passwd", "/empty/",
                     "/empty", "/sub", "/%2Eenv", "/nope.js", "/app.js/", "/sub%2f..%2f.env", "/%00", "/a%00b",
                     "/%ff%fe", "/..%5c.env"):
            code, body = get(port, path)
            assert code == 404, (path, code, body[:80])
            assert b"root:x" not in body and b"SECRET" not in body and b"Index of" not in body
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("request_bytes, code", [
    (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n", 414),  # a 100 KB URL
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 400),  # a TLS hello on the plain port
    (b"HELLO\r\n\r\n", 400),
    (b"GET / HTTP/9.9\r\n\r\n", 505),
    (b"GET / HTTP/0.9\r\n\r\n", 505),  # a full request line claiming 0.9: its answer would carry no status
    (b"GET / HTTP/x.y\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 501),
    (b"DELETE /index.html HTTP/1.1\r\n\r\n", 501),
    (b"GET /%00 HTTP/1.1\r\n\r\n", 404),
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 431),  # more headers than http.client allows
], ids=["url-100k", "url-9k", "tls-hello", "garbage", "http-9.9", "http-0.9", "bad-version", "post", "delete", "nul", "headers"])
def test_a_bad_request_gets_its_status_not_a_traceback(site, capfd, request_bytes, code):
    with running(site) as port:
        reply = raw(port, request_bytes)
        assert status(reply) == code, reply[:200]
        assert get(port, "/app.js")[0] == 200  # the server still serves
    assert "Traceback" not in capfd.readouterr().err


def test_the_page_headers_survive_an_error_path(site):
    # serve.Handler adds Cache-Control from self.path in end_headers: set before the request line is read
    with running(site) as port:
        reply = raw(port, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n")
        assert b"Cache-Control: no-cache" in reply


def test_slow_clients_are_cut_off_and_bounded(site, capfd):
    with running(site, max_connections=4, header_seconds=1.0) as port:
        slow = []
        for _ in range(4):  # every slot held by a client that never finishes its headers
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        time.sleep(0.2)
        assert status(raw(port, b"GET / HTTP/1.1\r\n\r\n")) == 503  # the fifth: answered, not queued
        t0 = time.monotonic()
        for s in slow:  # each is closed by the server at the deadline, sending a byte now and then or not
            s.settimeout(5)
            assert s.recv(100) == b""
            s.close()
        assert time.monotonic() - t0 < 4
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        t0, closed = time.monotonic(), False
        for c in b"GET / HTTP/1.1\r\nHost: x\r\n" * 10:  # a byte every 0.1 s: never idle, never done
            try:
                trickle.sendall(bytes([c]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            if time.monotonic() - t0 > 3:
                break
        trickle.settimeout(5)
        try:
            closed = closed or trickle.recv(100) == b""
        except OSError:
            closed = True
        trickle.close()
        assert closed and time.monotonic() - t0 < 4
        assert get(port, "/app.js")[0] == 200  # slots are free again
    assert "Traceback" not in capfd.readouterr().err


def test_many_clients_at_once_are_served_or_refused_never_hung(site):
    results = []
    with running(site, max_connections=8, header_seconds=2.0) as port:
        def one():
            try:
                results.append(status(raw(port, b"GET /app.js HTTP/1.1\r\n\r\n", timeout=10)))
            except OSError as e:
                results.append(repr(e))
        threads = [threading.Thread(target=one) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
    assert len(results) == 40 and set(results) <= {200, 503}, results
    assert results.count(200) >= 8
