"""A server run on a thread for the length of a `with`, and one raw request read to the close: how the hostile
HTTP tests (test_hostile_serve.py, test_hostile_api.py) talk to `ember serve` and `ember api`."""
from __future__ import annotations

import contextlib
import socket
import threading


@contextlib.contextmanager
def serving(srv):
    """Run srv (a socketserver) on a daemon thread; yields its port, then shuts it down and closes it."""
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def raw(port, data: bytes, timeout=10.0) -> bytes:
    """Send data on a fresh connection to 127.0.0.1:port and read the reply until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
