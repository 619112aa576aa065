"""The HTTP side of `ember serve`: a built site's regular files and nothing else, within bounded time and threads.

What a request may reach: a regular file whose real path (symlinks resolved) lies under the site's real root,
named by a path none of whose segments starts with "." (no dotfiles, no `..`). A folder is served as its
index.html when it has one; there are no listings. Anything else is a 404, and a request that does not parse
gets its status, never a traceback: a request line over MAX_REQUEST_LINE bytes 414, a garbled one 400, an HTTP
version past 1.x 505, a method other than GET/HEAD 501, headers over http.client's limits 431.

What a client may hold: MAX_CONNECTIONS connections at once (one more is answered 503 and closed), each with
HEADER_SECONDS to send its request line and headers in full (a client that trickles them is cut off however
often it sends a byte) and IDLE_SECONDS per read or write of the socket.
"""
from __future__ import annotations

import email.utils
import http.server
import os
import socket
import stat
import threading
import time
import urllib.parse

MAX_REQUEST_LINE = 8192       # bytes of "GET /path HTTP/1.1" (browsers send < 2 KB for this site)
MAX_CONNECTIONS = 64          # threads serving at once (a page opens ~6 per host)
HEADER_SECONDS = 10.0         # from accept to the end of the headers
IDLE_SECONDS = 30.0           # any single socket read or write (a stalled download)


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler narrowed to a site's regular files (see the module docstring). Subclasses add
    headers in end_headers (self.path is always set, "" before the request line is read)."""

    timeout = IDLE_SECONDS  # the socket timeout StreamRequestHandler.setup applies
    path = ""
    default_request_version = "HTTP/1.0"  # an error to a garbled request line carries its status line (0.9: none)

    def handle_one_request(self):
        self.path, self.command, self.request_version = "", None, self.default_request_version
        self.close_connection = True
        deadline = self.server.watch(self.connection)  # cut off when the headers take over HEADER_SECONDS
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if not self.raw_requestline:
                return
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline, self.request_version = "", ""
                self.send_error(414, f"Request line over {MAX_REQUEST_LINE} bytes")
                return
            if not self.parse_request():  # sends its own 400 / 505 / 431
                return
        except (TimeoutError, ConnectionError, OSError):
            self.close_connection = True
            return
        finally:
            self.server.unwatch(self.connection, deadline)
        if self.command not in ("GET", "HEAD"):
            self.send_error(501, f"Unsupported method ({self.command!r:.40})")
            return
        try:
            getattr(self, "do_" + self.command)()
            self.wfile.flush()
        except (TimeoutError, ConnectionError):
            self.close_connection = True

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):  # "HTTP/0.9" in a full request line
            self.request_version = "HTTP/1.0"  # (so the refusal carries a status line)
            self.send_error(505, "Only HTTP/1.0 and 1.1")
            return False
        return True

    # ---------------------------------------------------------------- what a path may name
    def resolve(self, url_path: str) -> str | None:
        """The real path of the regular file `url_path` names under the site, or None (then 404)."""
        path = urllib.parse.urlsplit(url_path).path
        try:
            path = urllib.parse.unquote(path, errors="strict")
        except UnicodeDecodeError:
            return None
        parts = [p for p in path.split("/") if p]
        if "\0" in path or "\\" in path or any(p.startswith(".") for p in parts):
            return None
        root = os.path.realpath(self.directory)
        real = os.path.realpath(os.path.join(root, *parts))
        if real != root and not real.startswith(root + os.sep):
            return None  # a symlink (file or folder) out of the site
        if os.path.isdir(real):
            if parts and not path.endswith("/"):
                return None  # the stdlib redirects to the slash form; a site links files, not folders
            real = os.path.join(real, "index.html")
            if os.path.realpath(real) != real:
                return None
        elif path.endswith("/"):
            return None  # a file named as a folder
        try:
            st = os.lstat(real)
        except (OSError, ValueError):
            return None
        return real if stat.S_ISREG(st.st_mode) else None

    def send_head(self):
        real = self.resolve(self.path)
        if real is None:
            self.send_error(404, "File not found")
            return None
        try:
            f = open(real, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # swapped between the check and the open
                raise OSError("not a regular file")
            since = self.headers.get("If-Modified-Since")
            if since and not self.headers.get("If-None-Match"):
                try:
                    when = email.utils.parsedate_to_datetime(since)
                except (TypeError, ValueError, IndexError, OverflowError):
                    when = None
                if when is not None and when.tzinfo is not None and int(st.st_mtime) <= when.timestamp():
                    self.send_response(304)
                    self.end_headers()
                    f.close()
                    return None
            self.send_response(200)
            self.send_header("Content-type", self.guess_type(real))
            self.send_header("Content-Length", str(st.st_size))
            self.send_header("Last-Modified", self.date_time_string(st.st_mtime))
            self.end_headers()
            return f
        except BaseException:
            f.close()
            raise

    def list_directory(self, path):  # never reached through send_head; kept shut for any other caller
        self.send_error(404, "File not found")
        return None


class SiteServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with at most MAX_CONNECTIONS handler threads and a header deadline watchdog."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS,
                 header_seconds: float = HEADER_SECONDS):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.header_seconds = header_seconds
        self._reading, self._lock = {}, threading.Lock()
        super().__init__(address, handler)
        self._stop = threading.Event()
        threading.Thread(target=self._watchdog, name="ember-serve-watchdog", daemon=True).start()

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            try:  # busy: say so and close, without a thread
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    # ---------------------------------------------------------------- header deadline
    def watch(self, conn) -> float:
        deadline = time.monotonic() + self.header_seconds
        with self._lock:
            self._reading[conn] = deadline
        return deadline

    def unwatch(self, conn, deadline):
        with self._lock:
            if self._reading.get(conn) == deadline:
                del self._reading[conn]

    def _watchdog(self):
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                late = [c for c, d in self._reading.items() if d < now]
                for c in late:
                    del self._reading[c]
            for c in late:  # the handler's blocked read returns and it ends
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def server_close(self):
        self._stop.set()
        super().server_close()


def make_site_server(folder, handler=SiteHandler, port: int = 0, host: str = "127.0.0.1", **limits) -> SiteServer:
    """A SiteServer for the site in `folder` on host:port (0: any free port); limits: max_connections,
    header_seconds."""
    import functools
    return SiteServer((host, port), functools.partial(handler, directory=os.fspath(folder)), **limits)
