"""Gemma 3 270M (Q4_K_M GGUF from PyPI, ember.models.gemma3.fetch) decode and prefill speed: ember vs llama.cpp
(llama-cpp-python) on the same file in the same run, greedy, float32 KV cache on both sides.

    python bench/bench_gemma.py [--tokens 16] [--repeats 3] [--threads 2] [--sampling] [--json]

Each engine runs `--repeats` times, interleaved, and the best run is reported (noise only ever slows a run
down); the ratio is ember's best over llama.cpp's best, measured in this run.
"""
from __future__ import annotations

from ember.models.gemma3.fetch import fetch_gemma3_270m
from ember.models.gemma3.load import load_gguf
from llamacpp_race import best_runs, llamacpp_model, parse_args, print_report, speed_report

PROMPT = "The capital of France is a city that has been at the centre of European history for centuries, and"


def main():
    a = parse_args(__doc__, tokens=16)
    path = fetch_gemma3_270m(progress=True)
    model, tok = load_gguf(path)
    llm = llamacpp_model(path, 512, a.threads)
    prompt = tok.encode(PROMPT)
    e, l = best_runs(model, llm, prompt, a.tokens, a.repeats, a.sampling)
    res = {**speed_report(path, prompt, a.tokens, a.threads, e, l), "sampling": a.sampling}
    if not a.sampling:  # (sampled tokens come from each engine's own random numbers)
        res["same_tokens"] = e["tokens"] == l["tokens"]
    print_report(res, a.json)


if __name__ == "__main__":
    main()
