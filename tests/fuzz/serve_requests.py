"""`ember serve` for the fuzzer, a bounded local run: the worker serves a small site (files, a dotfile, symlinks
out of it, a secret beside it) with ember.wasm.serve's handler on 127.0.0.1, with a 1 s header deadline and 8
connections, and sends each input as one raw request. Outcomes: a 2xx/3xx is accepted, a 4xx/5xx a clean
refusal; a reply without a status line, a 200 that carries the secret or a dotfile, a traceback the server
printed, or no reply to a complete request within 5 s is a finding (RawReply)."""
from __future__ import annotations

import os
import tempfile

from raw_http import RawReply, Refused, exchange, serve_in_thread

SECRET = b"root:x:0:0:SECRET"
HIDDEN = b"SECRET=dotfile"
PATHS = ["/", "/index.html", "/app.js", "/sub/inner.js", "/sub/", "/.env", "/out.txt", "/outdir/passwd",
         "/alias.js", "/nope", "/%2e%2e/secret.txt", "/../secret.txt", "/sub/../../secret.txt", "/%00", "/.git/config",
         "/sub/.hidden", "/outdir/", "/empty/", "/" + "a" * 9000, "/a?b=c#d", "/%ff", "/index.html/", "/.."]
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "G\x00T", "get", ""]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/9.9", "HTTP/2.0", "HTTP/1.1x", "", "HTTP/", "FOO/1.1",
            "HTTP/1.1 extra"]
HEADERS = ["Host: x", "If-Modified-Since: Wed, 21 Oct 2015 07:28:00 GMT", "If-Modified-Since: garbage",
           "Range: bytes=0-", "Content-Length: 5", "Content-Length: -1", "X: " + "y" * 70000, "NoColon",
           "If-Modified-Since: Mon, 01 Jan 9999 00:00:00 GMT", "Expect: 100-continue", "Transfer-Encoding: chunked"]


def gen(rng, base) -> bytes:
    kind = rng.random()
    if kind < 0.08:  # raw bytes: TLS hellos, binary junk
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) + b"\r\n\r\n"
    method = rng.choice(METHODS) if rng.random() < 0.4 else "GET"
    path = rng.choice(PATHS)
    if rng.random() < 0.3:  # percent-encode, double slashes, backslashes
        path = path.replace(rng.choice(["/", ".", "e"]), rng.choice(["%2f", "//", "\\", "%2e", "%00", "%"]))
    line = f"{method} {path} {rng.choice(VERSIONS) if rng.random() < 0.3 else 'HTTP/1.1'}"
    headers = [rng.choice(HEADERS) for _ in range(rng.choice([0, 1, 2, 3, 120]))]
    raw = (line + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode("utf-8", "surrogateescape")
    if rng.random() < 0.02:  # a slow client: the request never ends (the server cuts it at its deadline)
        return b"SLOW:" + raw[:-2]
    return raw


_SERVER = {}


def _site(base) -> str:
    root = tempfile.mkdtemp(prefix="fuzz-serve-")
    site = os.path.join(root, "site")
    os.makedirs(os.path.join(site, "sub"))
    os.makedirs(os.path.join(site, "empty"))
    os.makedirs(os.path.join(site, ".git"))
    files = {"index.html": b"<p>index</p>", "app.js": b"export const x = 1;", "sub/inner.js": b"inner",
             "sub/index.html": b"sub", ".env": HIDDEN, "sub/.hidden": HIDDEN, ".git/config": HIDDEN}
    for name, data in files.items():
        with open(os.path.join(site, name), "wb") as f:
            f.write(data)
    outside = os.path.join(root, "outside")
    os.makedirs(outside)
    for name in ("passwd", "secret.txt"):
        with open(os.path.join(outside, name), "wb") as f:
            f.write(SECRET)
    with open(os.path.join(root, "secret.txt"), "wb") as f:
        f.write(SECRET)
    os.symlink(os.path.join(outside, "passwd"), os.path.join(site, "out.txt"))
    os.symlink(outside, os.path.join(site, "outdir"))
    os.symlink(os.path.join(site, "app.js"), os.path.join(site, "alias.js"))
    return site


def _server(base):
    if "port" not in _SERVER:
        from ember.wasm import serve, site_server

        class Quiet(serve.Handler):
            def log_message(self, *args):
                pass

        srv = site_server.make_site_server(_site(base), Quiet, 0, max_connections=8, header_seconds=1.0)
        serve_in_thread(srv, _SERVER)
    return _SERVER["port"], _SERVER["errors"]


def load(raw: bytes, base=None):
    """Send one request; raise RawReply for a finding, return the status for an answer."""
    got = exchange(*_server(base), raw, timeout=5, slow_may_hang=True)
    if got is None:
        return None
    status, head, reply, _ = got
    if SECRET in reply or HIDDEN in reply:
        raise RawReply(f"{status} served a file outside the site or a dotfile")
    if status >= 400:
        raise Refused(f"ember: HTTP {status} for {head[:60]!r}")
    return status

