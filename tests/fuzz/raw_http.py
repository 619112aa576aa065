"""One raw HTTP request over a socket to a server this process runs, for the fuzzer's `ember serve` and
`ember api` harnesses (serve_requests.py, api_requests.py): the server on a thread with its handler's exceptions
counted, the exchange, and the findings both share (a handler exception, no reply, no status line)."""
from __future__ import annotations

import socket
import threading
import traceback

from ember.errors import EmberError


class RawReply(Exception):
    """A finding: the server misbehaved on a raw request."""


class Refused(EmberError):
    """A 4xx/5xx answer: the fuzzer counts it as a clean refusal."""


def serve_in_thread(srv, state: dict):
    """Run srv on a daemon thread; state gets its port and the list its handler's exceptions go to."""
    errors = []
    srv.handle_error = lambda request, addr: errors.append(traceback.format_exc(limit=-2))  # counted, not printed
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    state.update(port=srv.server_address[1], errors=errors)


def exchange(port, errors, raw: bytes, timeout: float, slow_may_hang: bool = False):
    """Send raw (after b"SLOW:", a client that never finishes its request) and read the reply to the close.
    Returns (status, status line, reply, data sent), or None where a slow client got no reply; raises RawReply for
    a finding, and Refused for a reset while the client still sent a request over the header limits. A slow client
    may outlast `timeout` unanswered where slow_may_hang."""
    before = len(errors)
    slow = raw.startswith(b"SLOW:")
    data = raw[5:] if slow else raw
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    reply, reset = b"", False
    try:
        s.sendall(data)
        while chunk := s.recv(65536):
            reply += chunk
    except socket.timeout:
        if not (slow and slow_may_hang):
            raise RawReply(f"no reply within {timeout:g} s to {data[:80]!r}") from None
    except (ConnectionResetError, BrokenPipeError):
        reset = True  # cut off (a request over the limits, a slow client at the deadline)
    finally:
        s.close()
    if len(errors) > before:
        raise RawReply(f"the server's handler raised: {' | '.join(errors[before:])[-400:]}")
    if not reply:
        if slow:
            return None
        if reset and len(data) > 65536:  # the server answered 431 and closed while the client still sent:
            raise Refused("ember: reset while sending a request over the header limits")  # its reply was lost
        raise RawReply(f"no reply to {data[:80]!r}")
    line = reply.split(b"\r\n", 1)[0]
    parts = line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise RawReply(f"no status line: {line[:80]!r}")
    return int(parts[1]), line, reply, data
