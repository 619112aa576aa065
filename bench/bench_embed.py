"""all-MiniLM-L6-v2 sentence embeddings per second: ember (cpu, and webgpu when it works here) vs
sentence-transformers on torch CPU, the same real weights and the same texts in one run (ratio reported).

    python bench/bench_embed.py [--sentences 256] [--batch-size 32] [--repeats 3] [--devices cpu,webgpu] [--json]

Texts are sentences of CPython's documentation (pydoc_data.topics); each engine is timed `--repeats` times,
interleaved, best run reported (noise only slows a run). The machine may be shared: read the ratio.
"""
from __future__ import annotations

import argparse
import json
import re
import time

import numpy as np


def sentences(n):
    import pydoc_data.topics as topics
    text = " ".join(topics.topics[k] for k in sorted(topics.topics))
    s = [" ".join(x.split()) for x in re.split(r"(?<=[.!?])\s+", text)]
    return [x for x in s if 20 < len(x) < 400][:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.models.bert.fetch import fetch_minilm
    from ember.models.bert.sentence import SentenceEncoder
    folder = fetch_minilm(progress=True)
    texts = sentences(a.sentences)
    engines = {}
    try:
        import torch
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(str(folder), device="cpu")
        engines["sentence-transformers (torch cpu)"] = lambda: st.encode(texts, batch_size=a.batch_size)
        threads = torch.get_num_threads()
    except ImportError:
        threads = None
    for dev in a.devices.split(","):
        enc = SentenceEncoder(folder, device=dev, batch_size=a.batch_size)
        enc.encode(texts[:a.batch_size])  # warm-up: kernels compiled, buffers allocated
        engines[f"ember {dev}"] = (lambda e: lambda: e.encode(texts))(enc)
    best = {k: float("inf") for k in engines}
    outs = {}
    for _ in range(a.repeats):
        for name, fn in engines.items():
            t = time.perf_counter()
            outs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t)
    rate = {k: len(texts) / v for k, v in best.items()}
    ref = next((k for k in rate if k.startswith("sentence")), None)
    res = {"sentences": len(texts), "batch_size": a.batch_size, "torch_threads": threads,
           "sentences_per_s": {k: round(v, 1) for k, v in rate.items()}}
    if ref:
        res["ratio_vs_sentence_transformers"] = {k: round(v / rate[ref], 3) for k, v in rate.items() if k != ref}
        res["min_cosine"] = {k: float(((v * outs[ref]).sum(-1)).min()) for k, v in outs.items() if k != ref}
    print(json.dumps(res, indent=None if a.json else 1))


if __name__ == "__main__":
    main()
