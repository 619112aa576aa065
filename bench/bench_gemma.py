"""Gemma 3 270M (Q4_K_M GGUF from PyPI, ember.models.gemma3.fetch) decode and prefill speed: ember vs llama.cpp
(llama-cpp-python) on the same file in the same run, greedy, float32 KV cache on both sides.

    python bench/bench_gemma.py [--tokens 16] [--repeats 3] [--threads 2] [--json]

Each engine runs `--repeats` times, interleaved, and the best run is reported (noise only ever slows a run
down); the ratio is ember's best over llama.cpp's best, measured in this run.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import ember
from ember.models.common.generate import SamplingParams, generate
from ember.models.gemma3.fetch import fetch_gemma3_270m
from ember.models.gemma3.load import load_gguf

PROMPT = "The capital of France is a city that has been at the centre of European history for centuries, and"


def run_ember(model, prompt, n):
    gen = generate(model, prompt, n, SamplingParams(temperature=0))
    toks = list(gen)
    st = gen.stats
    return {"prefill_tok_s": len(prompt) / st.prompt_s, "decode_tok_s": st.tokens_per_s, "tokens": toks}


def run_llamacpp(llm, prompt, n):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    toks = []
    for i in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        toks.append(t)
        if i == 0:
            t1 = time.perf_counter()  # decode time, like ember's, starts after the first token is chosen
            prefill = t1 - t0
        if i + 1 < n:
            llm.eval([t])
    return {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": (n - 1) / (time.perf_counter() - t1), "tokens": toks}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import llama_cpp
    path = fetch_gemma3_270m(progress=True)
    model, tok = load_gguf(path)
    llm = llama_cpp.Llama(str(path), n_ctx=512, n_threads=a.threads, n_threads_batch=a.threads, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    prompt = tok.encode(PROMPT)
    best = {"ember": None, "llama.cpp": None}
    with ember.no_grad():
        for _ in range(a.repeats):
            for name, fn in (("ember", lambda: run_ember(model, prompt, a.tokens)),
                             ("llama.cpp", lambda: run_llamacpp(llm, prompt, a.tokens))):
                r = fn()
                b = best[name]
                best[name] = r if b is None else {k: max(b[k], r[k]) if k != "tokens" else r[k] for k in r}
    e, l = best["ember"], best["llama.cpp"]
    res = {"model": path.name, "prompt_tokens": len(prompt), "new_tokens": a.tokens, "threads": a.threads,
           "ember": {k: round(v, 2) for k, v in e.items() if k != "tokens"},
           "llama.cpp": {k: round(v, 2) for k, v in l.items() if k != "tokens"},
           "decode_ratio": round(e["decode_tok_s"] / l["decode_tok_s"], 3),
           "prefill_ratio": round(e["prefill_tok_s"] / l["prefill_tok_s"], 3),
           "same_tokens": e["tokens"] == l["tokens"]}
    if a.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
