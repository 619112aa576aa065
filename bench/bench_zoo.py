"""Decode speed of a GPT-2-small-shaped model (n_embd 768, 12 layers, 12 heads, vocab 50257; random
weights built with transformers, seeded) — ember (cpu; webgpu with --devices) vs transformers eager on torch
CPU, the same weights, prompt and greedy tokens in one run (ratio reported).

    python bench/bench_zoo.py [--tokens 32] [--prompt 16] [--repeats 3] [--devices cpu] [--layers 12] [--json]

Each engine is timed `--repeats` times, interleaved, best run reported. Decode tokens/s counts the tokens
after the first (the prompt's forward is reported apart). The machine may be shared: read the ratio.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch
    import transformers

    from ember.models.auto import from_pretrained
    from ember.models.common.generate import SamplingParams, generate
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=a.layers)
    cfg._attn_implementation = "eager"
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, a.prompt).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp, safe_serialization=True)
        models = {d: from_pretrained(tmp, device=d) for d in a.devices.split(",")}

    def run_torch():
        with torch.no_grad():
            t = time.perf_counter()
            out = ref.generate(torch.tensor([prompt]), max_new_tokens=1, do_sample=False, pad_token_id=0)
            first = time.perf_counter() - t
            t = time.perf_counter()
            out = ref.generate(torch.tensor([prompt]), max_new_tokens=a.tokens, do_sample=False,
                               min_new_tokens=a.tokens, pad_token_id=0)
            total = time.perf_counter() - t
        return out[0, len(prompt):].tolist(), (a.tokens - 1) / max(total - first, 1e-9)

    def run_ember(m):
        gen = generate(m, prompt, a.tokens, SamplingParams(temperature=0))
        toks = list(gen)
        return toks, gen.stats.tokens_per_s

    engines = {"transformers eager (torch cpu)": run_torch}
    for d, m in models.items():
        run_ember(m)  # warm-up
        engines[f"ember {d}"] = (lambda m: lambda: run_ember(m))(m)
    best, toks = {k: 0.0 for k in engines}, {}
    for _ in range(a.repeats):
        for k, fn in engines.items():
            toks[k], rate = fn()
            best[k] = max(best[k], rate)
    ref_name = "transformers eager (torch cpu)"
    res = {"shape": f"gpt2 n_embd=768 n_layer={a.layers} n_head=12 vocab=50257", "prompt": a.prompt,
           "tokens": a.tokens, "torch_threads": torch.get_num_threads(),
           "decode_tokens_per_s": {k: round(v, 1) for k, v in best.items()},
           "ratio_vs_transformers": {k: round(v / best[ref_name], 3) for k, v in best.items() if k != ref_name},
           "greedy_tokens_equal": {k: toks[k] == toks[ref_name] for k in toks if k != ref_name}}
    print(json.dumps(res, indent=None if a.json else 1))


if __name__ == "__main__":
    main()
