"""`ember api`: an OpenAI-compatible HTTP server over one chat model (and one sentence encoder), stdlib only.

    POST /v1/chat/completions   messages -> a chat.completion, or with "stream": true server-sent events of
                                chat.completion.chunk objects ending with `data: [DONE]`; response_format
                                json_schema / json_object constrains decoding (ember.grammar)
    POST /v1/completions        a prompt continued (text_completion), streamed too
    POST /v1/embeddings         sentence embeddings (all-MiniLM-L6-v2 by default)
    GET  /v1/models             the models served

It binds 127.0.0.1 unless told otherwise, and holds to ember.httpd's bounds whatever a client sends: at most
$EMBER_HTTP_MAX_CONNECTIONS connections, $EMBER_HTTP_HEADER_SECONDS for a request's headers and body to arrive, a
status line for every request that does not parse. Requests run one at a time on the model (a lock; the HTTP server is
threaded, so a second client waits), and the chat model's KV cache is shared: a request whose messages extend the
previous conversation prefills only what is new. Every failure is an OpenAI-shaped error object
{"error": {"message", "type", "param", "code"}} with its HTTP status — malformed JSON, unknown models or paths,
bodies over MAX_BODY bytes, prompts past the context, max_tokens past it, schemas ember cannot compile — and an
unexpected exception is a 500 with a one-line message, never a traceback.
"""
from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

from ember.httpd import BoundedRequests, BoundedServer

MAX_BODY = 1 << 20              # bytes of one request body
MAX_BATCH = 256                 # embeddings inputs per request


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.kind, self.param, self.code = status, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def _num(body, name, default, lo, hi, cast=float):
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise APIError(400, f"'{name}' must be a number in [{lo}, {hi}], got {json.dumps(v)[:40]}", param=name)
    return cast(v)


class Service:
    """What the handlers call: the model, its chat engine, the encoder, one lock."""

    def __init__(self, model, tokenizer, model_id: str, context=None, embedder=None, embed_id="all-minilm-l6-v2",
                 api_key=None):
        from ..common.chat import ChatEngine
        self.model, self.tokenizer, self.model_id = model, tokenizer, model_id
        self.engine = ChatEngine(model, tokenizer, context=context)
        self.embedder, self.embed_id, self.api_key = embedder, embed_id, api_key
        self.lock = threading.Lock()
        self.created = int(time.time())

    # ------------------------------------------------------------------ request pieces
    def check_model(self, body, embeddings=False):
        want = self.embed_id if embeddings else self.model_id
        name = body.get("model")
        if name is None:
            return want
        if name != want:
            raise APIError(404, f"The model '{name}' does not exist (this server has '{want}')",
                           param="model", code="model_not_found")
        return name

    def sampling(self, body):
        from ..common.generate import SamplingParams
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise APIError(400, "'seed' must be an integer", param="seed")
        if body.get("n", 1) != 1:
            raise APIError(400, "only n=1 is supported", param="n")
        return SamplingParams(_num(body, "temperature", 1.0, 0, 2), int(_num(body, "top_k", 0, 0, 1 << 20, int)),
                              _num(body, "top_p", 1.0, 1e-9, 1), _num(body, "repetition_penalty", 1.0, 1e-3, 10),
                              seed)

    def max_tokens(self, body, default):
        key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        n = body.get(key, default)
        if n is None:
            return self.engine.context
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise APIError(400, f"'{key}' must be a positive integer", param=key)
        if n > self.engine.context:
            raise APIError(400, f"'{key}' is {n}; this model's context is {self.engine.context} tokens",
                           param=key, code="context_length_exceeded")
        return n

    @staticmethod
    def stops(body):
        stop = body.get("stop")
        if stop is None:
            return []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) for s in stop):
            raise APIError(400, "'stop' must be a string or a list of at most 4 strings", param="stop")
        return stop

    def constraint(self, body):
        from ember.grammar import GrammarError, from_response_format
        try:
            g = from_response_format(body.get("response_format"))
        except GrammarError as e:
            raise APIError(400, str(e), param="response_format") from None
        return None if g is None else g.constraint(self.tokenizer)

    @staticmethod
    def usage(r) -> dict:
        return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                "total_tokens": r.prompt_tokens + r.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": r.cached_tokens}}

    # ------------------------------------------------------------------ endpoints
    def models(self) -> dict:
        data = [{"id": self.model_id, "object": "model", "created": self.created, "owned_by": "ember"}]
        if self.embedder is not None:
            data.append({"id": self.embed_id, "object": "model", "created": self.created, "owned_by": "ember"})
        return {"object": "list", "data": data}

    def chat(self, body):
        """(status, dict) or a generator of SSE events (streaming)."""
        from ..common.chat import ContextFullError
        from ..common.chat_template import parse_messages
        from ember.errors import FormatError
        from ember.jinja import TemplateError, TemplateSyntaxError
        model = self.check_model(body)
        try:
            messages = parse_messages(json.dumps(body.get("messages")), "messages")
        except FormatError as e:
            raise APIError(400, str(e).replace("ember: messages: ", ""), param="messages") from None
        params, max_tokens, stop = self.sampling(body), self.max_tokens(body, None), self.stops(body)
        constraint = self.constraint(body)
        try:
            reply = self.engine.reply(messages, max_tokens, params, stop, constraint, tools=body.get("tools"))
        except ContextFullError as e:
            raise APIError(400, f"This model's maximum context length is {e.context} tokens. However, your "
                                f"messages resulted in {e.prompt_tokens} tokens.", param="messages",
                           code="context_length_exceeded") from None
        except TemplateSyntaxError:
            raise  # the model's template itself: the server's fault (a 500)
        except TemplateError as e:  # the conversation does not fit the template (roles, a missing field, size)
            raise APIError(400, f"the model's chat template refused these messages: {e}", param="messages") from None
        rid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if not body.get("stream"):
            text = reply.text()
            r = reply.result
            return {"id": rid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": r.finish_reason, "logprobs": None}],
                    "usage": self.usage(r), "system_fingerprint": "ember"}
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise APIError(400, "'stream_options' must be an object", param="stream_options")
        include_usage = bool(options.get("include_usage"))

        def chunk(delta, finish=None):
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "system_fingerprint": "ember", "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                                "finish_reason": finish}]}

        def events():
            yield chunk({"role": "assistant", "content": ""})
            for piece in reply:
                yield chunk({"content": piece})
            yield chunk({}, reply.result.finish_reason)
            if include_usage:
                yield {**chunk({}), "choices": [], "usage": self.usage(reply.result)}
        return events()

    def completions(self, body):
        from ..common.chat import Reply
        model = self.check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise APIError(400, "'prompt' must be a non-empty string", param="prompt")
        params, max_tokens, stop = self.sampling(body), self.max_tokens(body, 16), self.stops(body)
        ids = self.tokenizer.encode(prompt)
        if len(ids) >= self.engine.context:
            raise APIError(400, f"This model's maximum context length is {self.engine.context} tokens. However, "
                                f"your prompt resulted in {len(ids)} tokens.", param="prompt",
                           code="context_length_exceeded")
        reply = Reply(self.engine, ids, max_tokens, params, stop, self.constraint(body))
        rid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())

        def choice(text, finish):
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        if not body.get("stream"):
            text = reply.text()
            return {"id": rid, "object": "text_completion", "created": created, "model": model,
                    "choices": [choice(text, reply.result.finish_reason)], "usage": self.usage(reply.result)}

        def events():
            for piece in reply:
                yield {"id": rid, "object": "text_completion", "created": created, "model": model,
                       "choices": [choice(piece, None)]}
            yield {"id": rid, "object": "text_completion", "created": created, "model": model,
                   "choices": [choice("", reply.result.finish_reason)]}
        return events()

    def embeddings(self, body):
        if self.embedder is None:
            raise APIError(404, "this server has no embedding model (started with --embed-model none)",
                           param="model", code="model_not_found")
        model = self.check_model(body, embeddings=True)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or len(texts) > MAX_BATCH or \
                not all(isinstance(t, str) and t for t in texts):
            raise APIError(400, f"'input' must be a non-empty string or a list of 1..{MAX_BATCH} non-empty strings "
                                f"(token arrays are not supported)", param="input")
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise APIError(400, "encoding_format must be 'float' or 'base64'", param="encoding_format")
        vecs = self.embedder.encode(texts)                                           # (N, dim) float32
        n_tok = sum(len(self.embedder.tokenizer.encode(t).ids) for t in texts)
        return {"object": "list", "model": model,
                "data": [{"object": "embedding", "index": i,
                          "embedding": [float(x) for x in v] if fmt == "float" else
                          base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")}
                         for i, v in enumerate(vecs)],
                "usage": {"prompt_tokens": n_tok, "total_tokens": n_tok}}


def _one_line(e: BaseException) -> str:
    msg = str(e) if str(e).startswith("ember") else f"ember: {type(e).__name__}: {e}"
    return (msg.splitlines() or ["ember: error"])[0][:500]


class Handler(BoundedRequests, BaseHTTPRequestHandler):
    service: Service = None
    methods = ("GET", "POST")
    protocol_version = "HTTP/1.1"
    server_version = "ember-api"

    def log_message(self, fmt, *args):  # one line per request on stderr, without the default's noise
        sys.stderr.write(f"ember api: {self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")

    def _send(self, status: int, obj: dict):
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise APIError(411, "a request body needs a Content-Length header")
        n = int(length)
        if n > MAX_BODY:
            self.close_connection = True  # the rest of the body is not read
            raise APIError(413, f"the request body has {n:,} bytes; at most {MAX_BODY:,} are accepted",
                           code="request_too_large")
        with self.within_deadline():  # a body trickled in holds a thread no longer than headers may
            raw = self.rfile.read(n)
        if len(raw) < n:
            self.close_connection = True
            raise APIError(400, f"the request body ended after {len(raw):,} of {n:,} bytes")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise APIError(400, f"the request body is not valid JSON ({str(e)[:120]})") from None
        if not isinstance(body, dict):
            raise APIError(400, "the request body must be a JSON object")
        return body

    def _auth(self):
        key = self.service.api_key
        if key and self.headers.get("Authorization", "") != f"Bearer {key}":
            raise APIError(401, "Incorrect API key provided", kind="invalid_request_error", code="invalid_api_key")

    def do_GET(self):
        try:
            self._auth()
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, self.service.models())
            raise APIError(404, f"unknown path {self.path[:80]!r}", code="unknown_url")
        except APIError as e:
            self._send(e.status, e.body())

    def do_POST(self):
        routes = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings"}
        try:
            self._auth()
            name = routes.get(self.path.split("?")[0].rstrip("/"))
            if name is None:
                raise APIError(404, f"unknown path {self.path[:80]!r}", code="unknown_url")
            body = self._body()
            with self.service.lock:
                out = getattr(self.service, name)(body)
                if isinstance(out, dict):
                    return self._send(200, out)
                self._stream(out)
        except APIError as e:
            self.close_connection = True  # the body may be unread: it must not be taken for the next request
            self._send(e.status, e.body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except (TimeoutError, ConnectionError):
            raise  # the client is gone or too slow: nothing to answer (BoundedRequests closes the connection)
        except Exception as e:  # noqa: BLE001  (a 500 with one line, never a traceback and a dropped connection)
            self.close_connection = True
            self._send(500, APIError(500, _one_line(e), kind="server_error").body())

    def _stream(self, events):
        """Server-sent events: one `data: {json}` per chunk, then `data: [DONE]`; an error after the headers
        went out is sent as one last event holding the error object."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for ev in events:
                self.wfile.write(f"data: {json.dumps(ev, ensure_ascii=False)}\n\n".encode("utf-8"))
                self.wfile.flush()
        except APIError as e:
            self.wfile.write(f"data: {json.dumps(e.body())}\n\n".encode())
        except (TimeoutError, ConnectionError):
            raise
        except Exception as e:  # noqa: BLE001  (headers are out: the error is the last event)
            self.wfile.write(f"data: {json.dumps(APIError(500, _one_line(e), 'server_error').body())}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def make_server(model, tokenizer, host="127.0.0.1", port=8080, context=None, embedder=None, api_key=None,
                model_path=None, **limits) -> BoundedServer:
    """The server (not yet serving): server.serve_forever() in a thread, server.shutdown() to stop. limits:
    ember.httpd.BoundedServer's (max_connections, header_seconds, idle_seconds, max_request_line)."""
    from .smollm2 import MODEL_ID
    model_id = MODEL_ID if model_path is None else os.path.splitext(os.path.basename(str(model_path).rstrip("/")))[0]
    service = Service(model, tokenizer, model_id, context, embedder, api_key=api_key)
    handler = type("EmberHandler", (Handler,), {"service": service})
    return BoundedServer((host, port), handler, **limits)


def serve(model, tokenizer, host="127.0.0.1", port=8080, **kw) -> int:
    server = make_server(model, tokenizer, host, port, **kw)
    where = f"http://{host}:{server.server_address[1]}/v1"
    print(f"ember api: serving {server.RequestHandlerClass.service.model_id} at {where}"
          + ("" if host in ("127.0.0.1", "localhost", "::1") else "  (not loopback: reachable from the network)"),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
