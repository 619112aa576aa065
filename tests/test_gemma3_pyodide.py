"""Gemma 3 270M (the real Q4_K_M GGUF) inside Pyodide under Node, through the page's own code path
(wasm/worker_api.py load + run of the text tool, with the wasm quantized-matmul kernels): the same prompt ids and the same
tokens as native CPython for the same prompt and seed, greedy, sampled, and sampled from the top k (bounded in
the page, from every logit natively). Also reports what the page
would: tokens/s in Pyodide and the wasm heap after loading and generating (printed, never asserted on speed)."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401  (fixture)

from gemma3_assets import gemma3_gguf

PROMPT = "The capital of France is"
N = 4  # few tokens: one decode step is ~0.3 s in Pyodide on a loaded 2-core machine
SEED = 7

SNIPPET = """
import time
import ember
from ember.backends import cpu_matmul
from ember.wasm import worker_api
info = worker_api.load("llama", {folder!r})
heap_loaded = int(__import__("pyodide_js")._module.HEAP8.length)
runs = []
for opts in {runs!r}:
    t0 = time.perf_counter()
    r = await worker_api.run("llama", {prompt!r}, opts)
    r["wall_s"] = time.perf_counter() - t0
    runs.append(r)
result = {{"info": info, "runs": runs, "path": cpu_matmul.matmul_path(), "heap_loaded": heap_loaded,
           "heap_end": int(__import__("pyodide_js")._module.HEAP8.length)}}
"""


@pytest.fixture(scope="module")
def gguf():
    return gemma3_gguf()


def _native(path, prompt, opts):
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.gemma3.load import load_gguf
    model, tok = load_gguf(path)
    ids = tok.encode(prompt, bos=True)
    p = SamplingParams(opts["temperature"], opts.get("top_k", 0), opts["top_p"], 1.0, opts.get("seed"))
    return ids, list(generate(model, ids, opts["max_new_tokens"], p, tok.eos_ids))


def test_gemma_in_pyodide_generates_the_native_tokens(gguf, pyodide_dist):  # noqa: F811
    runs = [{"temperature": 0.0, "top_p": 1.0, "max_new_tokens": N},
            {"temperature": 0.8, "top_p": 0.9, "max_new_tokens": N, "seed": SEED},
            # top-k: the page computes only the rows that can be among the 40 largest logits, natively all
            {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "max_new_tokens": N, "seed": SEED}]
    with tempfile.TemporaryDirectory(prefix="ember-gemma-") as tmp:
        os.link(gguf, os.path.join(tmp, gguf.name)) if os.stat(gguf).st_dev == os.stat(tmp).st_dev \
            else shutil.copy(gguf, tmp)
        if node_path() is None:
            unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
        with PyodideSession(dist=pyodide_dist, mounts={"/gemma": tmp}) as session:
            out = session.run(SNIPPET.format(folder="/gemma", runs=runs, prompt=PROMPT), timeout=900)["result"]
    assert out["path"].startswith("wasm-simd128")
    assert out["info"]["parameters"] > 250e6 and out["info"]["bytes"] < 300e6  # quantized, not float32
    for opts, got in zip(runs, out["runs"]):
        ids, want = _native(gguf, PROMPT, opts)
        assert got["prompt_tokens"] == ids
        assert got["tokens"] == want, (opts, got["tokens"], want)
    tps = [r["tokens_per_s"] for r in out["runs"]]
    print(f"\nGemma 3 270M in Pyodide: decode {np.max(tps):.2f} tok/s, wasm heap {out['heap_loaded'] / 2**20:.0f} MiB "
          f"after load, {out['heap_end'] / 2**20:.0f} MiB after generating")
