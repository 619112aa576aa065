"""`ember chat --messages FILE --json` (one JSON object: the prompt's ids, the reply's, text, stopped) against the
library's ChatEngine on the same conversation; `ember chat` interactive over stdin (a /regenerate and /clear);
`ember generate --activations`; bad input as clear errors."""
from __future__ import annotations

import json
import subprocess
import sys

from smollm2_assets import smollm2_gguf


def _ember(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "ember", *args], capture_output=True, text=True, input=stdin,
                          timeout=600)


def test_chat_messages_json_equals_the_library(tmp_path):
    from ember.models.common.chat import ChatEngine
    from ember.models.common.generate import SamplingParams
    from ember.models.text import load_text_model
    path = smollm2_gguf()
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a color."}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    r = _ember("chat", "--model", str(path), "--messages", str(tmp_path / "m.json"), "--json", "-n", "20",
               "--temperature", "0.7", "--top-k", "40", "--seed", "3")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    model, tok = load_text_model(path)
    engine = ChatEngine(model, tok)
    reply = engine.reply(msgs, max_tokens=20, params=SamplingParams(0.7, 40, 1.0, 1.0, 3))
    assert out["text"] == reply.text() and out["tokens"] == reply.result.tokens
    assert out["prompt_tokens"] == engine.prompt_ids(msgs) and out["stopped"] == reply.result.stopped
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"color": {"enum": ["red", "blue"]}},
                                  "required": ["color"]}))
    r = _ember("chat", "--model", str(path), "--messages", str(tmp_path / "m.json"), "--json", "--json-schema",
               str(schema))
    assert json.loads(json.loads(r.stdout)["text"])["color"] in ("red", "blue")


def test_chat_interactive_and_errors(tmp_path):
    path = smollm2_gguf()
    r = _ember("chat", "--model", str(path), "-n", "12", stdin="What is 2+2?\n/regenerate\n/clear\nHi\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("tokens/s") == 3 and "4" in r.stdout
    (tmp_path / "bad.json").write_text('[{"content": "no role"}]')
    r = _ember("chat", "--model", str(path), "--messages", str(tmp_path / "bad.json"), "--json")
    assert r.returncode == 1 and "message 0 must be an object with a 'role'" in r.stderr
    r = _ember("chat", "--model", str(path), "--choices")
    assert r.returncode == 2
    r = _ember("generate", "The capital of France is", "--model", str(path), "-n", "4", "--activations", "float32",
               "--json")
    assert r.returncode == 0, r.stderr
    assert "Paris" in json.loads(r.stdout)["text"]
