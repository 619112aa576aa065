"""The demo Llama inside Pyodide (Node): loads from files on the in-memory filesystem, tokenizes with ember's
pure-Python tokenizer, and greedy-decodes the same ids and text as CPython."""
from __future__ import annotations

import base64
import os

import pytest
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401  (fixtures)

from ember.models.common.generate import SamplingParams, generate
from ember.models.llama.load import DEMO_DIR, load_llama

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(DEMO_DIR, "model.safetensors")),
                                reason="demo checkpoint not present")

SNIPPET = """
import base64, os
os.makedirs("/tmp/demo", exist_ok=True)
for name, data in {files!r}.items():
    with open("/tmp/demo/" + name, "wb") as f:
        f.write(base64.b64decode(data))
from ember.models.common.generate import SamplingParams, generate
from ember.models.llama import load_llama
model, tok = load_llama("/tmp/demo")
ids = tok.encode({prompt!r})
out = list(generate(model, ids, {n}, SamplingParams(temperature=0)))
result = {{"backend": tok.impl.backend, "prompt": ids, "tokens": out, "text": tok.decode(out)}}
"""


def test_demo_generates_the_same_in_pyodide(pyodide_session):  # noqa: F811
    prompt, n = "The import statement", 16
    files = {}
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        with open(os.path.join(DEMO_DIR, name), "rb") as f:
            files[name] = base64.b64encode(f.read()).decode()
    out = pyodide_session.run(SNIPPET.format(files=files, prompt=prompt, n=n), timeout=300)["result"]
    model, tok = load_llama()
    ids = tok.encode(prompt)
    want = list(generate(model, ids, n, SamplingParams(temperature=0)))
    assert out["backend"] == "python"
    assert out["prompt"] == ids and out["tokens"] == want and out["text"] == tok.decode(want)
