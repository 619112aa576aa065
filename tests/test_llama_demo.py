"""The shipped demo model (models/llama/demo, trained by ember on CPython's help topics): small, loads in
transformers too, its tokenizer.json runs in ember's pure-Python tokenizer, and it writes the corpus's words."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import ember
from ember.models.common.generate import SamplingParams, generate
from ember.models.common.tokenizer import TextTokenizer
from ember.models.llama.corpus import build_corpus
from ember.models.llama.load import DEMO_DIR, load_llama

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(DEMO_DIR, "model.safetensors")),
                                reason="demo checkpoint not present")


def test_demo_is_small():
    total = sum(os.path.getsize(os.path.join(DEMO_DIR, f)) for f in os.listdir(DEMO_DIR))
    assert total < 8 * 2**20


def test_demo_tokenizer_pure_python_matches_native():
    tokenizers = pytest.importorskip("tokenizers")
    with open(os.path.join(DEMO_DIR, "tokenizer.json"), encoding="utf-8") as f:
        text = f.read()
    py = TextTokenizer.from_json(text, backend="python")
    native = tokenizers.Tokenizer.from_str(text)
    sample = build_corpus()[20000:26000] + " naïve café — 数字 🙂"
    ids = py.encode(sample, bos=False)
    assert ids == native.encode(sample).ids
    assert py.decode(ids) == sample


def test_demo_matches_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, tok = load_llama()
    hf = transformers.LlamaForCausalLM.from_pretrained(DEMO_DIR, torch_dtype=torch.float32).eval()
    ids = tok.encode("The try statement specifies exception handlers", bos=True)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()
    with ember.no_grad():
        got = model(ember.tensor([ids])).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-4 * np.abs(ref).max(), rtol=0)


def test_demo_writes_corpus_words():
    model, tok = load_llama()
    out = tok.decode(generate(model, tok.encode("The while statement", bos=True), 60,
                              SamplingParams(temperature=0)))
    words = re.findall(r"[A-Za-z]{3,}", out)
    vocab = set(re.findall(r"[A-Za-z]{3,}", build_corpus()))
    assert len(words) >= 10, out
    assert sum(w in vocab for w in words) / len(words) >= 0.9, out
