"""ember's pure-Python tokenizer runtime inside Pyodide (Node), where `tokenizers` does not
exist: the same Whisper tokenizer.json must give the ids the Rust package gives in CPython."""
import json

import pytest

from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401
from test_tokenizers import CORPUS, WHISPER, cached_wheel_file

SNIPPET = """
import json, time
from ember.tokenizers import Tokenizer
start = time.perf_counter()
tok = Tokenizer.from_file("/tok/tokenizer.json")  # "auto": no tokenizers here -> python
tok.encode("warm up")  # builds the Unicode classes and the GPT-2 regex once
setup = time.perf_counter() - start
texts = json.loads(open("/tok/corpus.json").read())
start = time.perf_counter()
encodings = [tok.encode(t) for t in texts]
seconds = time.perf_counter() - start
stream = tok.decode_stream(skip_special_tokens=False)
result = {"backend": tok.backend, "ids": [e.ids for e in encodings],
          "offsets": [e.offsets for e in encodings],
          "decoded": [tok.decode(e.ids, skip_special_tokens=False) for e in encodings],
          "stream": [stream.step(i) for i in encodings[0].ids],
          "tokens_per_s": sum(len(e.ids) for e in encodings) / seconds, "setup_s": setup}
"""


def test_whisper_tokenizer_in_pyodide_matches_cpython(pyodide_dist, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    from pydoc_data.topics import topics
    path = cached_wheel_file(*WHISPER)
    texts = CORPUS + ["\n".join(topics.values())[:30000]]
    (tmp_path / "tokenizer.json").write_bytes(path.read_bytes())
    (tmp_path / "corpus.json").write_text(json.dumps(texts), encoding="utf-8")
    ref = tokenizers.Tokenizer.from_file(str(path))
    with PyodideSession(dist=pyodide_dist, mounts={"/tok": tmp_path}) as session:
        out = session.run(SNIPPET, timeout=300)["result"]
    assert out["backend"] == "python"
    for text, ids, offsets, decoded in zip(texts, out["ids"], out["offsets"], out["decoded"]):
        want = ref.encode(text)
        assert ids == want.ids, text
        assert [tuple(o) for o in offsets] == [tuple(o) for o in want.offsets], text
        assert decoded == ref.decode(want.ids, skip_special_tokens=False)
    from tokenizers.decoders import DecodeStream
    ref_stream = DecodeStream(skip_special_tokens=False)
    assert out["stream"] == [ref_stream.step(ref, i) for i in out["ids"][0]]
    print(f"pure-Python Whisper tokenizer in Pyodide: load + first encode {out['setup_s']:.2f} s, "
          f"then {out['tokens_per_s']:.0f} tokens/s")
