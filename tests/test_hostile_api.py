"""`ember api` against hostile clients, over a tiny random-weight chat model (tests/chat_folder.py): every request
that does not parse gets its status line (never a traceback or a dropped connection), a body that is JSON but not
what the API takes is a 4xx OpenAI error object, and slow clients are bounded (the header-and-body deadline, the cap
on connections), as for `ember serve` (ember.httpd). Each test talks raw HTTP."""
import contextlib
import json
import socket
import time

import pytest

import chat_folder
from serving import raw as serving_raw, serving


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from ember.models.text import load_text_model
    return load_text_model(chat_folder.build(tmp_path_factory.mktemp("chat") / "m"))


@contextlib.contextmanager
def running(model, **limits):
    from ember.models.text.openai_server import make_server
    srv = make_server(*model, port=0, embedder=None, **limits)
    errors = []
    srv.handle_error = lambda request, addr: errors.append(addr)  # a traceback: counted
    with serving(srv) as port:
        yield port
    assert not errors, f"{len(errors)} requests ended in a traceback"


def raw(port, data: bytes, timeout=20.0) -> bytes:
    return serving_raw(port, data, timeout)


def post(port, body: bytes, path="/v1/chat/completions") -> tuple[int, dict | bytes]:
    r = raw(port, f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)
    head, _, rest = r.partition(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    return code, (json.loads(rest) if rest.startswith(b"{") else rest)


@pytest.mark.parametrize("request_bytes, code", [
    (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 400),
    (b"GET /v1/models HTTP/9.9\r\n\r\n", 505),
    (b"GET /v1/models HTTP/0.9\r\n\r\n", 505),
    # 0.9 in a full request line with over-long headers: the 431 went out as a bare page, without a status line
    (b"GET /v1/models HTTP/0.9\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", 431),
    (b"DELETE /v1/models HTTP/1.1\r\n\r\n", 501),
    (b"\r\n\r\nGET /v1/models HTTP/1.1\r\n\r\n", 400),  # empty request lines: the stdlib closed without a word
    (b"\nGET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n", 200),  # one before a request is allowed
    (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 411),
], ids=["url-100k", "tls-hello", "http-9.9", "http-0.9", "http-0.9-headers", "delete", "empty-lines", "one-empty-line",
        "chunked", "negative-length"])
def test_a_bad_request_gets_its_status_not_a_traceback(model, request_bytes, code):
    with running(model) as port:
        reply = raw(port, request_bytes)
        assert reply.startswith(b"HTTP/1.") and int(reply.split(b" ", 2)[1]) == code, reply[:200]
        assert raw(port, b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": [1]}, "stream_options"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": "x"}, "stream_options"),
    ({"messages": [{"role": "user", "content": ["a", "b"]}]}, "messages"),
    ({"messages": {"role": "user"}}, "messages"),
    ({"messages": [{"role": "user"}]}, "messages"),  # the template reads message['content']: a 500 before
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": True}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": float("nan")}, "temperature"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_k": 1e300}, "top_k"),
    ({"messages": [{"role": "user", "content": "hi"}], "stop": [{"x": 1}]}, "stop"),
    ({"messages": [{"role": "user", "content": "hi"}], "seed": "1"}, "seed"),
    ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": 7}},
     "response_format"),
    *[({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": schema}}}, "response_format") for schema in (
        {"type": {"a": 1}}, {"type": "array", "minItems": "2"}, {"type": "array", "prefixItems": 3},
        {"type": "object", "properties": {"a": {}}, "required": [["a"]]}, {"type": "integer", "minimum": "0"},
        {"type": "string", "format": ["date"]}, {"type": "string", "maxLength": 1e300}, {"allOf": [7]})],
], ids=["stream-options-list", "stream-options-str", "content-list", "messages-object", "no-content", "max-tokens-bool",
        "temperature-nan", "top-k-huge", "stop-object", "seed-str", "schema-int", "schema-type-object",
        "schema-min-items-str", "schema-prefix-int", "schema-required-list", "schema-minimum-str",
        "schema-format-list", "schema-max-length-huge", "schema-all-of-int"])
def test_a_body_the_api_does_not_take_is_a_400_naming_the_field(model, body, param):
    with running(model) as port:
        code, reply = post(port, json.dumps(body).encode())
        assert code == 400, reply
        assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["param"] == param, reply


def test_json_that_is_not_a_request(model):
    with running(model) as port:
        for body in (b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"1e999999", b'"x"', b"null", b"{" * 50):
            code, reply = post(port, body)
            assert code == 400 and reply["error"]["message"], (body[:20], reply)
        code, reply = post(port, b'{"input": "hi"}', path="/v1/embeddings")
        assert code == 404 and reply["error"]["code"] == "model_not_found"  # served without an encoder


def test_a_refused_body_is_not_read_as_the_next_request(model):
    # a 404 before the body is read: the body (here a request of its own) must not be answered on the connection
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    with running(model) as port:
        reply = raw(port, b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
                    + smuggled)
        assert reply.count(b"HTTP/1.1 ") == 1 and b" 404 " in reply.split(b"\r\n", 1)[0]
        # and the reply says the connection closes: a keep-alive client would otherwise send its next request on it
        assert b"\r\nconnection: close\r\n" in reply.partition(b"\r\n\r\n")[0].lower() + b"\r\n"


def test_a_reply_streams_and_a_conversation_stays_usable(model):
    # the hostile requests above must not cost the good ones: a streamed chat, a completion, then keep-alive.
    # Seeded: at the API's default temperature (1.0) the random model draws its end of turn within 5 tokens 1.5% of
    # the time, a short reply that is right but not what is checked here
    with running(model) as port:
        code, reply = post(port, json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                                             "seed": 0, "stream": True,
                                             "stream_options": {"include_usage": True}}).encode())
        assert code == 200 and reply.rstrip().endswith(b"data: [DONE]")
        events = [json.loads(line[6:]) for line in reply.split(b"\n\n") if line.startswith(b"data: {")]
        assert events[-1]["usage"]["completion_tokens"] == 5
        code, reply = post(port, json.dumps({"prompt": "Hello", "max_tokens": 3, "seed": 0}).encode(), "/v1/completions")
        assert code == 200 and reply["usage"]["completion_tokens"] == 3
        out = raw(port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n"
                  b"Connection: close\r\n\r\n")  # two requests on one connection
        assert out.count(b"HTTP/1.1 200 OK") == 2


def test_slow_clients_are_cut_off_and_bounded(model):
    with running(model, max_connections=3, header_seconds=1.0) as port:
        held = []
        for head in (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n",  # headers never finished
                     b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"mess",  # a body never
                     b"POST /v1/chat/completions HTTP/1.1\r\n"):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(head)
            held.append(s)
        time.sleep(0.2)
        assert raw(port, b"GET /v1/models HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 503")  # the fourth: refused
        t0 = time.monotonic()
        for s in held:  # each closed by the server at the deadline
            s.settimeout(5)
            try:
                s.recv(65536)
                assert s.recv(65536) == b""
            except ConnectionResetError:
                pass
            s.close()
        assert time.monotonic() - t0 < 4
        # the client sees EOF when the watchdog shuts the socket, a moment before the handler thread ends and frees
        # its slot: a client honouring Retry-After is served within a second or two
        for _ in range(20):
            reply = raw(port, b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n")
            if not reply.startswith(b"HTTP/1.0 503"):
                break
            time.sleep(0.1)
        assert reply.startswith(b"HTTP/1.1 200")
