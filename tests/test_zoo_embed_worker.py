"""The page's semantic-search path in CPython: worker_api.handle("load", tool "embed") on the real
all-MiniLM-L6-v2 folder as worker.js writes it (flat file names), handle("embed") vectors equal to
sentence-transformers', passages split from a document, a cosine ranking, and bad requests answered with
an error code (the worker stays alive)."""
import asyncio
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ember.wasm import worker_api as W


def run(coro):
    with ThreadPoolExecutor(1) as pool:  # as test_web_worker_api: a loop of its own, in a thread
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="module")
def flat_minilm(tmp_path_factory):
    from ember.models.bert.fetch import fetch_minilm
    src, d = fetch_minilm(), tmp_path_factory.mktemp("embed")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "sentence_bert_config.json"):
        shutil.copy(src / name, d / name)  # what ember.js's TOOL_FILES.embed fetches
    return src, d


def test_worker_embeds_and_ranks_like_sentence_transformers(flat_minilm):
    st = pytest.importorskip("sentence_transformers")
    src, folder = flat_minilm
    info = run(W.handle("load", {"tool": "embed", "folder": str(folder), "device": "cpu"}))["ok"]
    assert info["dim"] == 384 and info["parameters"] > 20_000_000
    doc = ("Cats are small domesticated felines. They purr when content.\n\n"
           "The stock market fell sharply on Tuesday after interest rates rose.\n\n"
           "Python lists are mutable sequences; tuples are immutable.")
    passages = run(W.handle("embed", {"input": doc, "opts": {"split": True}}))["ok"]["passages"]
    assert len(passages) == 3 and passages[2].startswith("Python lists")
    out = run(W.handle("embed", {"input": passages + ["which data structure can change?"]}))["ok"]
    v = np.frombuffer(out["vectors"], "<f4").reshape(out["count"], out["dim"])
    ref = st.SentenceTransformer(str(src), device="cpu").encode(passages + ["which data structure can change?"])
    assert ((v * ref).sum(-1) / np.linalg.norm(ref, axis=-1)).min() > 1 - 1e-5
    scores = v[:3] @ v[3]
    assert scores.argmax() == 2


def test_worker_refuses_bad_embed_requests(flat_minilm):
    bad = run(W.handle("embed", {"input": []}))
    assert bad["error"] == "bad_request" and "1 to" in bad["message"]
    bad = run(W.handle("load", {"tool": "embed", "folder": "/nonexistent", "device": "cpu"}))
    assert bad["error"] == "bad_model"
