"""Tokens/s of ember's pure-Python tokenizer runtime against the Rust `tokenizers` package.

    python bench/bench_tokenizers.py [--pyodide] [--chars N]

Text: CPython's own documentation (pydoc_data.topics: prose and code). Tokenizers: Whisper
tiny.en and all-MiniLM-L6-v2 (real tokenizer.json files, fetched like the tests do) and the
Llama-2-style BPE the tests train. "cold" includes filling the per-word cache; "warm" is a
second pass over the same text; native is one `encode` call (single-threaded in Rust).
CPython numbers are CPU time; the Pyodide numbers are wall time inside Node.
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from test_tokenizers import MINILM, WHISPER, cached_wheel_file, llama_config  # noqa: E402

from ember.tokenizers import Tokenizer  # noqa: E402


def timed(fn):
    """CPU seconds of this process: steadier than wall time on a shared machine (both
    sides run single-threaded here)."""
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def bench_cpython(name: str, json_text: str, text: str) -> None:
    ours, load_s = timed(lambda: Tokenizer.from_str(json_text, backend="python"))
    native = Tokenizer.from_str(json_text, backend="native")
    for tok in (ours, native):
        tok.no_truncation()
        tok.no_padding()
    enc, cold = timed(lambda: ours.encode(text))
    _, warm = timed(lambda: ours.encode(text))
    ref, native_s = timed(lambda: native.encode(text))
    assert enc.ids == ref.ids, f"{name}: ids differ from tokenizers"
    n = len(enc.ids)
    print(f"{name:9s} {n:7d} tokens | python load {load_s:5.2f} s, cold {n / cold:9,.0f} tok/s, "
          f"warm {n / warm:9,.0f} tok/s | native {n / native_s:10,.0f} tok/s "
          f"({native_s / warm:.2f}x the warm time)")


def bench_pyodide(json_text: str, text: str) -> None:
    from pyodide_runner import PyodideSession
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "tokenizer.json").write_text(json_text, encoding="utf-8")
        Path(folder, "text.txt").write_text(text, encoding="utf-8")
        with PyodideSession(mounts={"/tok": folder}) as session:
            out = session.run(
                "import time\nfrom ember.tokenizers import Tokenizer\n"
                "t0 = time.perf_counter(); tok = Tokenizer.from_file('/tok/tokenizer.json')\n"
                "tok.encode('warm up'); t1 = time.perf_counter()\n"
                "text = open('/tok/text.txt').read(); n = len(tok.encode(text).ids)\n"
                "t2 = time.perf_counter(); tok.encode(text); t3 = time.perf_counter()\n"
                "result = [t1 - t0, n, t2 - t1, t3 - t2]\n", timeout=600)["result"]
    setup, n, cold, warm = out
    print(f"whisper in Pyodide (Node): load + first encode {setup:.2f} s, cold {n / cold:,.0f} "
          f"tok/s, warm {n / warm:,.0f} tok/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=200_000, help="characters of text")
    parser.add_argument("--pyodide", action="store_true", help="also time Whisper in Pyodide")
    args = parser.parse_args()
    from pydoc_data.topics import topics
    text = "\n".join(topics.values())
    text = (text * (args.chars // len(text) + 1))[:args.chars]
    whisper = cached_wheel_file(*WHISPER).read_text(encoding="utf-8")
    bench_cpython("whisper", whisper, text)
    bench_cpython("minilm", cached_wheel_file(*MINILM).read_text(encoding="utf-8"), text)
    bench_cpython("llama-bpe", json.dumps(llama_config()), text)
    if args.pyodide:
        bench_pyodide(whisper, text)


if __name__ == "__main__":
    main()
