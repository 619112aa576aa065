"""ember vs llama.cpp (llama-cpp-python) on the same GGUF and prompt: greedy decode and prefill speed, each engine
run `repeats` times interleaved and the best run kept (noise only ever slows a run down), shared by the GGUF
benchmarks (bench_chat.py, bench_gemma.py). --sampling: decode draws each token at temperature 0.8 with top-p 0.9
instead (no top-k, no min-p: llama.cpp's sampler chain with those alone, ember's Sampler), the speed a chat's
default settings give.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import ember
from ember.models.common.generate import SamplingParams, generate


def parse_args(doc, tokens):
    """--tokens (default `tokens`), --repeats, --threads and --json, described by the first line of doc."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sampling", action="store_true", help="temperature 0.8, top-p 0.9 instead of greedy")
    return ap.parse_args()


SAMPLING = {"temperature": 0.8, "top_p": 0.9}  # --sampling's draw, on both engines


def llamacpp_model(path, n_ctx, threads):
    """llama.cpp on path with every logit kept and a float32 KV cache (as ember's), at `threads` threads."""
    import llama_cpp
    return llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, logits_all=True,
                           verbose=False, type_k=0, type_v=0)


def run_ember(model, prompt, n, sampling=False):
    gen = generate(model, prompt, n, SamplingParams(**SAMPLING, seed=0) if sampling else SamplingParams(temperature=0))
    toks = list(gen)
    st = gen.stats
    return {"prefill_tok_s": len(prompt) / st.prompt_s, "decode_tok_s": st.tokens_per_s, "tokens": toks}


def run_llamacpp(llm, prompt, n, sampling=False):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    toks, t1, prefill = [], t0, 0.0
    for i in range(n):
        t = int(llm.sample(top_k=0, top_p=SAMPLING["top_p"], min_p=0.0, temp=SAMPLING["temperature"])) if sampling \
            else int(np.argmax(llm.scores[llm.n_tokens - 1]))
        toks.append(t)
        if i == 0:
            t1 = time.perf_counter()  # decode time, like ember's, starts after the first token is chosen
            prefill = t1 - t0
        if i + 1 < n:
            llm.eval([t])
    return {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": (n - 1) / (time.perf_counter() - t1), "tokens": toks}


def best_runs(model, llm, prompt, n, repeats, sampling=False):
    """(ember's best, llama.cpp's best): per figure the highest of `repeats` interleaved runs, tokens of the last."""
    best = {"ember": None, "llama.cpp": None}
    with ember.no_grad():
        for _ in range(repeats):
            for name, fn in (("ember", lambda: run_ember(model, prompt, n, sampling)),
                             ("llama.cpp", lambda: run_llamacpp(llm, prompt, n, sampling))):
                r = fn()
                b = best[name]
                best[name] = r if b is None else {k: max(b[k], r[k]) if k != "tokens" else r[k] for k in r}
    return best["ember"], best["llama.cpp"]


def speed_report(path, prompt, n, threads, e, l):
    """The figures both benchmarks print: speeds of each engine and ember's over llama.cpp's."""
    return {"model": path.name, "prompt_tokens": len(prompt), "new_tokens": n, "threads": threads,
            "ember": {k: round(v, 2) for k, v in e.items() if k != "tokens"},
            "llama.cpp": {k: round(v, 2) for k, v in l.items() if k != "tokens"},
            "decode_ratio": round(e["decode_tok_s"] / l["decode_tok_s"], 3),
            "prefill_ratio": round(e["prefill_tok_s"] / l["prefill_tok_s"], 3)}


def print_report(res, as_json):
    if as_json:
        import json
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
