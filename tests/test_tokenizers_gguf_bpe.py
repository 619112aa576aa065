"""GGUF byte-level BPE ("gpt2") vocabularies token-exact with llama.cpp's own tokenizer (llama-cpp-python,
`Llama.tokenize` on a vocab_only load of the same file): SmolLM2-135M-Instruct's real vocabulary (`smollm`), and
the same vocabulary under the other pre-tokenizer names ember knows, on ~330 mixed strings (code, prose,
whitespace runs, other scripts, digits, emoji, special-token text), with and without special-token parsing;
decoding as llama.cpp's detokenize; natively and inside Pyodide."""
from __future__ import annotations

import ctypes
import json

import pytest

import bpe_corpus
from smollm2_assets import smollm2_gguf, write_vocab_gguf

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from ember.io.gguf import metadata  # noqa: E402
from ember.tokenizers import TokenizerError  # noqa: E402
from ember.tokenizers.gguf_bpe import BpeTokenizer  # noqa: E402

# one name per pre-tokenizer kind ember implements (None: no tokenizer.ggml.pre, llama.cpp's "default"), plus
# names that share a kind but differ in llama.cpp's per-name settings (add_bos, ignore_merges)
PRES = ["llama-bpe", "qwen2", "gpt-2", None, "falcon", "starcoder", "chatglm-bpe", "deepseek-coder", "dbrx",
        "stablelm2", "command-r"]


@pytest.fixture(scope="module")
def smollm2():
    path = smollm2_gguf()
    return path, metadata(path)


@pytest.fixture(scope="module")
def corpus():
    return bpe_corpus.corpus()


def _llamacpp(path):
    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False)


def _detokenize(ll, ids) -> str:
    """llama.cpp's llama_detokenize (special tokens not rendered) with a buffer that fits: llama-cpp-python's
    Llama.detokenize reads each piece into 32 bytes and drops longer ones (whitespace-run tokens)."""
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    buf = ctypes.create_string_buffer(64 * len(ids) + 64)
    n = llama_cpp.llama_detokenize(ll._model.vocab, arr, len(ids), buf, len(buf), False, False)
    assert n >= 0, n
    return buf.raw[:n].decode("utf-8", errors="replace")


def _compare(tok, ll, texts):
    bad = []
    for special in (True, False):
        for s in texts:
            want = ll.tokenize(s.encode("utf-8"), add_bos=True, special=special)
            got = tok.encode(s, special=special)
            if got != want:
                bad.append((special, s, got[:16], want[:16]))
    return bad


def test_smollm2_vocabulary_matches_llamacpp(smollm2, corpus):
    path, md = smollm2
    assert md["tokenizer.ggml.pre"] == "smollm"
    tok, ll = BpeTokenizer.from_gguf_metadata(md, str(path)), _llamacpp(path)
    assert len(corpus) >= 300
    bad = _compare(tok, ll, corpus)
    assert not bad, f"{len(bad)} of {2 * len(corpus)} differ, first: {bad[:3]}"
    for s in corpus:  # decoding: control tokens are dropped, as llama.cpp's detokenize drops them
        ids = ll.tokenize(s.encode("utf-8"), add_bos=False, special=True)
        assert tok.decode(ids) == _detokenize(ll, ids), s
        stream = tok.decode_stream()
        assert "".join(p for p in (stream.step(i) for i in ids) if p) == tok.decode(ids), s
    # the chat model's stops: llama.cpp's end-of-generation tokens, <|im_end|> (the file's EOS) and <|endoftext|>
    assert tok.eos_ids == [0, 2] and tok.bos_id == 1 and not tok.add_bos
    assert tok.encode("<|im_start|>user\nhi<|im_end|>", special=True) == [1, 4093, 198, 6004, 2]


@pytest.mark.parametrize("pre", PRES, ids=lambda p: p or "no-pre")
def test_pre_tokenizers_match_llamacpp(smollm2, corpus, tmp_path, pre):
    _, md = smollm2
    path = write_vocab_gguf(tmp_path / "vocab.gguf", md, pre)
    tok, ll = BpeTokenizer.from_gguf_metadata(metadata(path), str(path)), _llamacpp(path)
    bad = _compare(tok, ll, corpus)
    assert not bad, f"{pre}: {len(bad)} of {2 * len(corpus)} differ, first: {bad[:3]}"


@pytest.mark.parametrize("pre,add_bos", [("llama-bpe", None), ("llama-bpe", False), ("smollm", True)])
def test_add_bos_token_as_llamacpp(smollm2, tmp_path, pre, add_bos):
    _, md = smollm2
    path = write_vocab_gguf(tmp_path / "vocab.gguf", md, pre, add_bos=add_bos)
    tok, ll = BpeTokenizer.from_gguf_metadata(metadata(path), str(path)), _llamacpp(path)
    for text in ("Hello", ""):
        assert tok.encode(text) == ll.tokenize(text.encode(), add_bos=True, special=False)
        assert tok.encode(text, bos=False) == ll.tokenize(text.encode(), add_bos=False, special=False)


def test_unknown_pre_tokenizer_is_a_clear_error(smollm2):
    _, md = smollm2
    with pytest.raises(TokenizerError, match=r"x\.gguf: tokenizer\.ggml\.pre 'my-own-regex' is not a pre-tokenizer"):
        BpeTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.pre": "my-own-regex"}, "x.gguf")
    with pytest.raises(TokenizerError, match="merges"):
        BpeTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.merges": [1, 2]}, "x.gguf")
    with pytest.raises(TokenizerError, match="eos_token_id 99999999"):
        BpeTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.eos_token_id": 99999999}, "x.gguf")


PYODIDE_SNIPPET = """
import json, time
from ember.io.gguf import metadata
from ember.tokenizers.gguf_bpe import BpeTokenizer
texts = json.loads(open("/tok/corpus.json").read())
start = time.perf_counter()
tok = BpeTokenizer.from_gguf_metadata(metadata("/tok/model.gguf"), "smollm2")
setup = time.perf_counter() - start
start = time.perf_counter()
ids = [[tok.encode(t, special=s) for t in texts] for s in (True, False)]
seconds = time.perf_counter() - start
result = {"ids": ids, "decoded": [tok.decode(i) for i in ids[0]], "setup_s": setup,
          "tokens_per_s": sum(len(i) for row in ids for i in row) / seconds}
"""


def test_smollm2_vocabulary_in_pyodide_matches_llamacpp(smollm2, corpus, tmp_path):
    from pyodide_runner import PyodideSession, node_path, unavailable
    from ember.wasm.assets import PyodideFetchError, ensure_pyodide
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    try:
        dist = ensure_pyodide()
    except PyodideFetchError as exc:
        unavailable(str(exc))
    path, md = smollm2
    write_vocab_gguf(tmp_path / "model.gguf", md, "smollm")  # the vocabulary alone (a few MB, not the 98 MB file)
    (tmp_path / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    ll = _llamacpp(path)
    with PyodideSession(dist=dist, mounts={"/tok": tmp_path}) as session:
        out = session.run(PYODIDE_SNIPPET, timeout=600)["result"]
    for k, special in enumerate((True, False)):
        for text, got in zip(corpus, out["ids"][k]):
            assert got == ll.tokenize(text.encode("utf-8"), add_bos=True, special=special), (special, text)
    for text, got, dec in zip(corpus, out["ids"][0], out["decoded"]):
        assert dec == _detokenize(ll, got), text
    print(f"GGUF BPE tokenizer in Pyodide: vocabulary load {out['setup_s']:.2f} s, {out['tokens_per_s']:.0f} tokens/s")
