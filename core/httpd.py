"""What every HTTP server of ember (`ember serve`'s site, `ember api`) holds to, whatever a client sends:
bounded threads, bounded time for a request to arrive, and a status line for every request that does not parse.

    class Handler(BoundedRequests, http.server.BaseHTTPRequestHandler): methods = ("GET", "POST") ...
    server = BoundedServer(("127.0.0.1", 0), Handler)

A client may hold one of $EMBER_HTTP_MAX_CONNECTIONS connections (one more is answered 503 and closed, without a
thread), has $EMBER_HTTP_HEADER_SECONDS from its request's first byte to the end of its headers (a client that
trickles them is cut off however often it sends a byte; a handler extends the same watch over a body it reads,
`self.within_deadline()`), and $EMBER_HTTP_IDLE_SECONDS per socket read or write. A request line over
$EMBER_HTTP_MAX_REQUEST_LINE bytes is a 414, a garbled or empty one 400, an HTTP version past 1.x 505, a method the
handler does not serve 501, headers past http.client's limits 431 -- each with its status line (the stdlib sends
none to an "HTTP/0.9" request, so such a refusal reached the client as a bare page), never a traceback.

Layer: formats (with ember.hub, the network client); stdlib only.
"""
from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time

from . import settings


class BoundedRequests:
    """A mixin before a stdlib request handler (BaseHTTPRequestHandler or SimpleHTTPRequestHandler): one request
    per connection, read under the server's deadline (see the module docstring). self.path is always set ("" before
    the request line is read), so end_headers/log_message overrides may read it on any error path."""

    methods: tuple = ("GET", "HEAD")
    path = ""
    default_request_version = "HTTP/1.0"  # an error to a garbled request line carries its status line (0.9: none)

    def setup(self):
        self.timeout = self.server.idle_seconds  # the socket timeout StreamRequestHandler.setup applies
        super().setup()

    def handle_one_request(self):
        self.path, self.command, self.request_version = "", None, self.default_request_version
        self.close_connection = True
        limit = self.server.max_request_line
        try:
            with self.within_deadline():
                self.raw_requestline = self.rfile.readline(limit + 1)
                if self.raw_requestline in (b"\r\n", b"\n"):  # one empty line before a request is allowed
                    self.raw_requestline = self.rfile.readline(limit + 1)
                if not self.raw_requestline:
                    return
                if len(self.raw_requestline) > limit:
                    self.requestline, self.request_version = "", ""
                    self.send_error(414, f"Request line over {limit} bytes")
                    return
                if not self.parse_request():  # sends its own 400 / 505 / 431
                    return
        except OSError:  # a timeout, a reset, the deadline (a refusal the client is gone for included)
            self.close_connection = True
            return
        try:
            if self.command not in self.methods:
                self.send_error(501, f"Unsupported method ({self.command!r:.40})")
                return
            getattr(self, "do_" + self.command)()
            self.wfile.flush()
        except (TimeoutError, ConnectionError):  # the client went away or stalled mid-reply
            self.close_connection = True

    def parse_request(self) -> bool:
        if not self.raw_requestline.strip():  # the stdlib closes on an empty request line without a word
            self.requestline = ""
            self.send_error(400, "Empty request line")
            return False
        if not super().parse_request():
            return False
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):  # "HTTP/0.9" in a full request line
            self.request_version = "HTTP/1.0"
            self.send_error(505, "Only HTTP/1.0 and 1.1")
            return False
        return True

    def end_headers(self):
        # a reply after which this side closes says so: a keep-alive client not told would send its next request
        # on the socket and lose it when the close wins the race (a refused body is never read, so it must close)
        if self.close_connection and b"\r\nconnection:" not in b"".join(getattr(self, "_headers_buffer", [])).lower():
            self.send_header("Connection", "close")
        super().end_headers()

    def send_response_only(self, code, message=None):
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):  # ember never answers without a status line
            self.request_version = "HTTP/1.0"
        super().send_response_only(code, message)

    @contextlib.contextmanager
    def within_deadline(self):
        """Reads inside this block end when the server's header deadline passes (the socket is shut: what they
        read is then cut short, and the block raises TimeoutError as it ends)."""
        deadline = self.server.watch(self.connection)
        try:
            yield
        finally:
            if not self.server.unwatch(self.connection, deadline):
                raise TimeoutError("the client did not send its request within the deadline")


class BoundedServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with at most max_connections handler threads and a watchdog over the deadlines its
    handlers ask for (BoundedRequests.within_deadline). The limits default to the settings (module docstring)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, address, handler, max_connections: int | None = None, header_seconds: float | None = None,
                 idle_seconds: float | None = None, max_request_line: int | None = None):
        def pick(value, name):
            return settings.get(name) if value is None else value
        self.max_connections = pick(max_connections, "EMBER_HTTP_MAX_CONNECTIONS")
        self.header_seconds = pick(header_seconds, "EMBER_HTTP_HEADER_SECONDS")
        self.idle_seconds = pick(idle_seconds, "EMBER_HTTP_IDLE_SECONDS")
        self.max_request_line = pick(max_request_line, "EMBER_HTTP_MAX_REQUEST_LINE")
        self.slots = threading.BoundedSemaphore(self.max_connections)
        self._reading, self._lock = {}, threading.Lock()
        super().__init__(address, handler)
        self._stop = threading.Event()
        threading.Thread(target=self._watchdog, name="ember-http-watchdog", daemon=True).start()

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

    # ---------------------------------------------------------------- the deadline
    def watch(self, conn) -> float:
        deadline = time.monotonic() + self.header_seconds
        with self._lock:
            self._reading[conn] = deadline
        return deadline

    def unwatch(self, conn, deadline) -> bool:
        """False when the watchdog already cut the connection off."""
        with self._lock:
            if self._reading.get(conn) == deadline:
                del self._reading[conn]
                return True
            return False

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
