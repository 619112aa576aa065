"""The page's semantic-search path in CPython: worker_api.handle("load", tool "embed") on the real
all-MiniLM-L6-v2 folder as worker.js writes it (flat file names), handle("run", tool "embed") vectors equal to
sentence-transformers', passages split from a document, a cosine ranking, and bad requests answered with
an error code (the worker stays alive)."""
import asyncio
import json
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
    from ember.wasm.tools.embed import FILES
    for name, *_ in FILES:  # what the page fetches for a folder, flat as worker.js writes it
        shutil.copy(src / name, d / name.replace("/", "_"))
    return src, d


def test_worker_embeds_and_ranks_like_sentence_transformers(flat_minilm):
    st = pytest.importorskip("sentence_transformers")
    src, folder = flat_minilm
    info = run(W.handle("load", {"tool": "embed", "folder": str(folder), "device": "cpu"}))["ok"]
    assert info["dim"] == 384 and info["parameters"] > 20_000_000
    doc = ("Cats are small domesticated felines. They purr when content.\n\n"
           "The stock market fell sharply on Tuesday after interest rates rose.\n\n"
           "Python lists are mutable sequences; tuples are immutable.")
    passages = run(W.handle("run", {"tool": "embed", "input": doc, "opts": {"split": True}}))["ok"]["passages"]
    assert len(passages) == 3 and passages[2].startswith("Python lists")
    out = run(W.handle("run", {"tool": "embed", "input": passages + ["which data structure can change?"]}))["ok"]
    v = np.frombuffer(out["vectors"], "<f4").reshape(out["count"], out["dim"])
    ref = st.SentenceTransformer(str(src), device="cpu").encode(passages + ["which data structure can change?"])
    assert ((v * ref).sum(-1) / np.linalg.norm(ref, axis=-1)).min() > 1 - 1e-5
    scores = v[:3] @ v[3]
    assert scores.argmax() == 2


def test_worker_refuses_bad_embed_requests(flat_minilm):
    bad = run(W.handle("run", {"tool": "embed", "input": []}))
    assert bad["error"] == "bad_request" and "1 to" in bad["message"]
    bad = run(W.handle("load", {"tool": "embed", "folder": "/nonexistent", "device": "cpu"}))
    assert bad["error"] == "bad_model"


def test_worker_honours_the_flattened_pooling_config(flat_minilm, tmp_path):
    """1_Pooling/config.json arrives as 1_Pooling_config.json: a CLS-pooling variant embeds as
    sentence-transformers does with that config (not with the mean-pooling default), and the folder is left flat."""
    st = pytest.importorskip("sentence_transformers")
    src, flat = flat_minilm
    nested, cls = tmp_path / "nested", tmp_path / "flat"
    shutil.copytree(src, nested)
    shutil.copytree(flat, cls)
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    for p in (nested / "1_Pooling" / "config.json", cls / "1_Pooling_config.json"):
        p.write_text(json.dumps(pooling))
    run(W.handle("load", {"tool": "embed", "folder": str(cls), "device": "cpu"}))["ok"]
    assert sorted(p.name for p in cls.iterdir()) == sorted(p.name for p in flat.iterdir())
    texts = ["a cat sleeps on the sofa", "interest rates rose again"]
    out = run(W.handle("run", {"tool": "embed", "input": texts}))["ok"]
    v = np.frombuffer(out["vectors"], "<f4").reshape(out["count"], out["dim"])
    ref = st.SentenceTransformer(str(nested), device="cpu").encode(texts)
    mean = st.SentenceTransformer(str(src), device="cpu").encode(texts)
    assert ((v * ref).sum(-1) / np.linalg.norm(ref, axis=-1)).min() > 1 - 1e-5
    assert ((v * mean).sum(-1)).max() < 0.999  # CLS pooling differs from the default: the config was read
