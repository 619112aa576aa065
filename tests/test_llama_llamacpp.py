"""Llama GGUF files against llama.cpp itself (llama-cpp-python, built from source by .ci/install): the same
file, written with gguf-py in convert_hf_to_gguf's layout, must give llama.cpp's logits and greedy tokens."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.common.generate import SamplingParams, generate
from ember.models.llama.load import load_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from gguf_reference import tiny_llama  # noqa: E402
from test_llama_gguf import _tokenizer, _write  # noqa: E402

GGML_TYPE_F32 = 0  # KV cache in float32 on llama.cpp's side: its default f16 cache would round k and v


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tok = _tokenizer()
    hf = tiny_llama(tok.get_vocab_size())
    root = tmp_path_factory.mktemp("llamacpp")
    paths = {}
    for qtype in ("f32", "q8_0"):
        paths[qtype] = root / f"tiny-{qtype}.gguf"
        _write(paths[qtype], hf, tok, qtype)
    return paths


def _llamacpp(path):
    return llama_cpp.Llama(str(path), n_ctx=64, n_threads=1, logits_all=True, verbose=False, seed=0,
                           type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)


def _greedy_llamacpp(llm, prompt, n):
    llm.reset()
    llm.eval(prompt)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out


@pytest.mark.parametrize("qtype,tol", [("f32", 1e-4), ("q8_0", 1e-4)])
def test_logits_and_greedy_tokens_match_llamacpp(tiny, qtype, tol):
    # q8_0: a llama GGUF's weights multiply as llama.cpp's do (activations quantized to 8 bits per block, integer
    # dot products), so the quantized file matches as closely as the float one
    llm = _llamacpp(tiny[qtype])
    model, tok = load_llama(str(tiny[qtype]))
    prompt = tok.encode("The for statement is used for repeated execution", bos=True)
    # the same BPE vocabulary from the same metadata (this file sets no add_bos flag: ember's bos=True adds it)
    assert prompt == [0] + llm.tokenize(b"The for statement is used for repeated execution", add_bos=False)
    llm.reset()
    llm.eval(prompt)
    ref = np.asarray(llm.scores[:len(prompt)])                                     # (T, vocab)
    with ember.no_grad():
        got = model(ember.tensor([prompt])).numpy()[0]
    err = np.abs(got - ref).max()
    assert err < tol * np.abs(ref).max(), (qtype, err, np.abs(ref).max())
    want = _greedy_llamacpp(llm, prompt, 40)
    mine = list(generate(model, prompt, 40, SamplingParams(temperature=0)))
    assert mine == want
