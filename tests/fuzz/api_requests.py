"""`ember api` for the fuzzer, a bounded local run: the worker serves a tiny random-weight chat model
(tests/chat_folder.py, built by the test) with ember.models.text.openai_server on 127.0.0.1 (8 connections, a 1 s
header-and-body deadline), and sends each input as one raw request: OpenAI request bodies mutated as JSON (hostile
values, deep nesting, huge strings) or as bytes, with hostile headers, methods and versions, or a client that never
finishes. Outcomes: a 2xx is accepted, a 4xx (and 501/503/505) a clean refusal; a 500 (an exception the server did
not expect), a reply without a status line, a traceback the server printed, or no reply within 10 s is a finding (RawReply)."""
from __future__ import annotations

import json
import os

from mutate import dumps, mutate_bytes, mutate_json
from raw_http import RawReply, Refused, exchange, serve_in_thread

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and? <|im_end|>"}]
BODIES = {
    "/v1/chat/completions": [
        {"model": "m", "messages": MESSAGES, "max_tokens": 4, "temperature": 0},
        {"messages": MESSAGES[1:2], "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True},
         "seed": 1, "top_p": 0.9, "top_k": 5, "stop": ["\n", "x"]},
        {"messages": MESSAGES[:2], "max_completion_tokens": 6, "response_format": {"type": "json_object"}},
        {"messages": MESSAGES[:2], "max_tokens": 8, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                    "b": {"enum": ["x", "y"]}}, "required": ["a"]}}}},
        {"messages": MESSAGES[:2], "max_tokens": 4, "tools": [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object"}}}], "repetition_penalty": 1.1},
    ],
    "/v1/completions": [{"model": "m", "prompt": "Hello", "max_tokens": 4},
                        {"prompt": ["The capital"], "max_tokens": 3, "stream": True, "temperature": 0.5}],
    "/v1/embeddings": [{"input": ["a", "b"], "encoding_format": "base64"}],
}
HEADERS = ["Content-Type: application/json", "Authorization: Bearer x", "Transfer-Encoding: chunked",
           "Connection: keep-alive", "Expect: 100-continue", "X: " + "y" * 70000, "NoColon"]


def gen(rng, base) -> bytes:
    kind = rng.random()
    if kind < 0.05:  # raw bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) + b"\r\n\r\n"
    path = rng.choice(list(BODIES) + ["/v1/chat/completions"] * 3 + ["/v1/models", "/v1/nothing", "/v1/models/x"])
    body = rng.choice(BODIES.get(path, BODIES["/v1/completions"]))
    body = {**body, "model": os.path.basename(os.environ["FUZZ_CHAT_DIR"])} if "model" in body else body
    r = rng.random()
    if r < 0.65:
        data = dumps(mutate_json(rng, body))
    elif r < 0.85:
        data = mutate_bytes(rng, json.dumps(body).encode())
    else:
        data = json.dumps(body).encode()
    method = rng.choice(["GET", "PUT", "HEAD", "OPTIONS", "post"]) if rng.random() < 0.1 else \
        ("GET" if path.startswith("/v1/models") else "POST")
    version = rng.choice(["HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.1x"]) if rng.random() < 0.1 else "HTTP/1.1"
    headers = ["Host: x", "Connection: close"] + [rng.choice(HEADERS) for _ in range(rng.choice([0, 0, 1, 2]))]
    length = len(data)
    if rng.random() < 0.1:  # a Content-Length that lies
        length = rng.choice([0, length - 1, length + 10, -1, 2 ** 64, 10 ** 7])
    head = f"{method} {path} {version}\r\n" + "".join(h + "\r\n" for h in headers)
    head += f"Content-Length: {length}\r\n\r\n" if rng.random() < 0.95 else "\r\n"
    raw = head.encode() + data
    if rng.random() < 0.02 or (isinstance(length, int) and length > len(data) and length < 10 ** 6):
        return b"SLOW:" + raw  # the body never ends: the server cuts it at its deadline
    return raw


_SERVER = {}


def _server():
    if "port" not in _SERVER:
        from ember.models.text import load_text_model
        from ember.models.text.openai_server import Handler, make_server
        Handler.log_message = lambda *args: None
        folder = os.environ["FUZZ_CHAT_DIR"]  # tests/chat_folder.py's model, built by the test
        model, tok = load_text_model(folder)
        srv = make_server(model, tok, port=0, model_path=folder, max_connections=8, header_seconds=1.0)
        serve_in_thread(srv, _SERVER)
    return _SERVER["port"], _SERVER["errors"]


def load(raw: bytes):
    """Send one request; raise RawReply for a finding, Refused for a 4xx, return the status of a 2xx."""
    got = exchange(*_server(), raw, timeout=10)
    if got is None:
        return None
    status, _, reply, data = got
    rest = reply.partition(b"\r\n\r\n")[2]
    if status == 500:
        raise RawReply(f"{status}: {rest[:300]!r} for {data[:120]!r}")
    if b"data: " in rest and b'"server_error"' in rest:  # a stream that failed after its headers went out
        raise RawReply(f"a stream ended in a server error: {rest[-300:]!r} for {data[:120]!r}")
    if status >= 400:
        raise Refused(f"ember: HTTP {status}")
    return status
