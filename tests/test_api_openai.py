"""`ember api` through the official `openai` Python client against localhost: models, non-streaming and streaming
chat (the stream's text equals the non-streamed reply), a JSON-schema response that validates, completions,
embeddings equal to sentence-transformers' all-MiniLM-L6-v2, and every error case as an OpenAI error object (bad
JSON, unknown model, unknown path, oversized body, too many tokens, an uncompilable schema, a wrong API key)."""
from __future__ import annotations

import http.client
import json
import threading

import numpy as np
import pytest

from smollm2_assets import smollm2_gguf

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def loaded():
    from ember.models.text import load_text_model
    return load_text_model(smollm2_gguf())


@pytest.fixture(scope="module")
def server(loaded):
    from ember.models.bert.fetch import fetch_minilm
    from ember.models.bert.sentence import SentenceEncoder
    from ember.models.text.openai_server import make_server
    model, tok = loaded
    srv = make_server(model, tok, port=0, embedder=SentenceEncoder(fetch_minilm()), api_key="sk-test")
    assert srv.server_address[0] == "127.0.0.1"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="sk-test",
                         max_retries=0)


def test_models(client):
    assert [m.id for m in client.models.list().data] == [MODEL, "all-minilm-l6-v2"]


def test_chat_streaming_equals_non_streaming(client, loaded):
    from ember.models.common.chat import ChatEngine, SamplingParams
    msgs = [{"role": "user", "content": "Name the capital of France."}]
    cold = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=40, temperature=0)
    # the server's first chat is a fresh engine's reply (what the model says is the model's: a 135M model's answer
    # flips at near ties, so the reference is the same reply computed here, not a word it should contain)
    want = ChatEngine(*loaded).reply(msgs, max_tokens=40, params=SamplingParams(temperature=0))
    assert cold.choices[0].message.content == want.text() and cold.object == "chat.completion"
    assert cold.choices[0].finish_reason == want.result.finish_reason == "stop"
    u = cold.usage
    assert u.completion_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    # the same conversation again: its prompt is in the KV cache already (all but its last token, which runs again
    # as one decode step: with q8 activations that can round differently from the batched prefill, so the warm
    # replies are compared with each other)
    chunks = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=40, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    warm = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=40, temperature=0)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == warm.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == warm.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == warm.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == u.prompt_tokens - 1
    short = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3


def test_json_schema_response_validates(client):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population_millions": {"type": "number"},
                                               "country": {"enum": ["France", "Italy", "Spain"]}},
              "required": ["city", "country"]}
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe Rome as JSON."}], max_tokens=160, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": 'Reply with a JSON object whose key "answer" is "yes".'}],
        max_tokens=200, temperature=0, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict)


def test_completions(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert "Paris" in r.choices[0].text and r.object == "text_completion"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True))
    assert streamed == r.choices[0].text


def test_embeddings_equal_sentence_transformers(client):
    st = pytest.importorskip("sentence_transformers")
    from ember.models.bert.fetch import fetch_minilm
    texts = ["A cat sits on the mat.", "Stock markets fell today."]
    got = client.embeddings.create(model="all-minilm-l6-v2", input=texts)  # the client asks for base64
    ref = st.SentenceTransformer(str(fetch_minilm()), device="cpu").encode(texts)
    vecs = np.array([d.embedding for d in got.data], np.float32)
    assert vecs.shape == ref.shape and np.abs(vecs - ref).max() < 1e-4
    floats = client.embeddings.create(model="all-minilm-l6-v2", input="x", encoding_format="float")
    assert len(floats.data[0].embedding) == 384


def _raw(server, method, path, body: bytes | None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
    conn.request(method, path, body=body, headers={"Authorization": "Bearer sk-test", **(headers or {})})
    r = conn.getresponse()
    out = r.status, json.loads(r.read().decode())
    conn.close()
    return out


def test_errors_are_openai_shaped(client, server):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=msgs)
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10 ** 6)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 9000}])
    assert e.value.body["code"] == "context_length_exceeded" and "maximum context length" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=msgs, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}})
    assert e.value.body["param"] == "response_format" and "uniqueItems" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=msgs, temperature=7)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0).models.list()
    status, body = _raw(server, "POST", "/v1/chat/completions", b"{not json", {"Content-Type": "application/json"})
    assert status == 400 and body["error"]["type"] == "invalid_request_error" and "not valid JSON" in \
        body["error"]["message"]
    status, body = _raw(server, "POST", "/v1/chat/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in body["error"]["message"]
    import socket  # an oversized body is refused from its Content-Length, before any of it is read
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n"
                     b"Content-Length: 2097152\r\n\r\n" + b"x" * 1000)
        data = b""
        while b"}}" not in data:  # the status line, headers and the whole (small) error object
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and json.loads(rest)["error"]["code"] == "request_too_large"
    status, body = _raw(server, "GET", "/v1/nothing", None)
    assert status == 404 and body["error"]["code"] == "unknown_url"
    status, body = _raw(server, "POST", "/v1/embeddings", json.dumps({"input": [[1, 2, 3]]}).encode())
    assert status == 400 and body["error"]["param"] == "input"
