"""SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI, ember.models.text.smollm2) as a chat model: decode and prefill speed,
ember vs llama.cpp (llama-cpp-python) on the same file and the same thread count in the same run (greedy, float32
KV cache on both sides), and the time to first token of a second chat turn against the first (the KV cache kept:
only the new turn is prefilled).

    python bench/bench_chat.py [--tokens 32] [--repeats 3] [--threads 2] [--json]

Each engine runs `--repeats` times, interleaved, and the best run is reported; ratios are ember's best over
llama.cpp's best in this run. The chat prompt is the rendered conversation (its chat template), ~60 tokens.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import ember
from ember.models.common.chat import ChatEngine, ChatSession
from ember.models.common.generate import SamplingParams, generate
from ember.models.text import load_text_model
from ember.models.text.smollm2 import fetch_smollm2

SYSTEM = "You are a helpful assistant who answers in a few sentences."
TURNS = ["Tell me about the history of Paris, the capital of France.", "And what about its most famous museum?"]


def run_ember(model, prompt, n):
    gen = generate(model, prompt, n, SamplingParams(temperature=0))
    toks = list(gen)
    st = gen.stats
    return {"prefill_tok_s": len(prompt) / st.prompt_s, "decode_tok_s": st.tokens_per_s, "tokens": toks}


def run_llamacpp(llm, prompt, n):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    toks, t1, prefill = [], t0, 0.0
    for i in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        toks.append(t)
        if i == 0:
            t1 = time.perf_counter()  # decode time, like ember's, starts after the first token is chosen
            prefill = t1 - t0
        if i + 1 < n:
            llm.eval([t])
    return {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": (n - 1) / (time.perf_counter() - t1), "tokens": toks}


def turns_ttft(engine, n):
    """(first turn's time to first token, second turn's, tokens prefilled in each) in a fresh session."""
    engine.prefix.reset()
    chat = ChatSession(engine, system=SYSTEM)
    out = []
    for q in TURNS:
        reply = chat.send(q, max_tokens=n)
        reply.text()
        out.append((chat.last.ttft_s, chat.last.prefill_tokens, chat.last.prompt_tokens))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import llama_cpp
    from ember.backends.cpu_matmul import native_kernels
    path = fetch_smollm2(progress=True)
    model, tok = load_text_model(path)
    if native_kernels() is not None:
        native_kernels().set_threads(a.threads)
    engine = ChatEngine(model, tok)
    prompt = engine.prompt_ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]}])
    llm = llama_cpp.Llama(str(path), n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    best = {"ember": None, "llama.cpp": None}
    with ember.no_grad():
        for _ in range(a.repeats):
            for name, fn in (("ember", lambda: run_ember(model, prompt, a.tokens)),
                             ("llama.cpp", lambda: run_llamacpp(llm, prompt, a.tokens))):
                r = fn()
                b = best[name]
                best[name] = r if b is None else {k: max(b[k], r[k]) if k != "tokens" else r[k] for k in r}
        ttft = [turns_ttft(engine, 8) for _ in range(a.repeats)]
    first = min(t[0][0] for t in ttft)
    second = min(t[1][0] for t in ttft)
    e, l = best["ember"], best["llama.cpp"]
    agree = next((i for i, (x, y) in enumerate(zip(e["tokens"], l["tokens"])) if x != y), len(e["tokens"]))
    res = {"model": path.name, "prompt_tokens": len(prompt), "new_tokens": a.tokens, "threads": a.threads,
           "ember": {k: round(v, 2) for k, v in e.items() if k != "tokens"},
           "llama.cpp": {k: round(v, 2) for k, v in l.items() if k != "tokens"},
           "decode_ratio": round(e["decode_tok_s"] / l["decode_tok_s"], 3),
           "prefill_ratio": round(e["prefill_tok_s"] / l["prefill_tok_s"], 3),
           "greedy_tokens_agree": agree,
           "turn1_ttft_ms": round(first * 1000, 1), "turn2_ttft_ms": round(second * 1000, 1),
           "turn2_over_turn1": round(second / first, 3),
           "prefilled": [[t[1], t[2]] for t in ttft[0]]}
    if a.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
