"""Gemma 3 270M (the Q4_K_M GGUF) decode in Pyodide under Node, the page's CPU engine: tokens/s with the
fused output pick (greedy decoding's argmax over the 262k-row tied Q8_0 output without its logits,
quant.c ember_q8_0_argmax) against every logit computed, and sampled (temperature 0.8, top-k 40, top-p 0.9)
with the bounded top-k (ember_q8_0_rows_above) against every logit, in one run, interleaved, best round; and
where a token's time goes (the output pick, the layers' quantized matmuls, the rest: Python, numpy).

    python bench/bench_gemma_page.py [--tokens 16] [--rounds 3] [--baseline main|module.wasm] [--json]

--baseline also times the fused pick with another kernel module (cpu_wasm_kernels.wasm as committed at a git
revision, or a file) in the same interleaved rounds: a kernel change's tok/s before and after in one run.

The tokens of both paths must be equal (the pick and the top-k are exact); the page in Chromium is e2e/test_web_gemma.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_wasm_qmatmul import baseline_module  # noqa: E402
from pyodide_runner import PyodideSession  # noqa: E402

PROMPT = "The capital of France is a city that has been at the centre of European history for centuries, and"

ENGINE = r'''
import time
import numpy as np
import ember
from ember.models.gemma3.load import load_gguf
from ember.models.llama.generate import SamplingParams, generate
from ember.backends import cpu_matmul
from ember.quant import QTensor, qlinear

model, tok = load_gguf({path!r})
ids = tok.encode({prompt!r}, bos=True)
timers = {{"pick": 0.0, "qmatmul": 0.0}}

def timed(key, fn):
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            timers[key] += time.perf_counter() - t0
    return wrapper

QTensor.argmax_matmul_t = timed("pick", QTensor.argmax_matmul_t)
QTensor.topk_matmul_t = timed("pick", QTensor.topk_matmul_t)
qlinear.QLinear.forward = timed("qmatmul", qlinear.QLinear.forward)
fused_pick, topk_head = model.greedy_head, model.topk_head
GREEDY, SAMPLED = SamplingParams(temperature=0), SamplingParams(0.8, 40, 0.9, 1.0, 7)
best = {{}}
for r in range({rounds}):
    for name, pick, module, params in (
            ("fused pick", fused_pick, None, GREEDY), ("all logits", None, None, GREEDY),
            ("sampled top-40, bounded", topk_head, None, SAMPLED), ("sampled top-40, all logits", None, None, SAMPLED),
            *((("fused pick, baseline kernels", fused_pick, {baseline!r}, GREEDY),) if {baseline!r} else ())):
        cpu_matmul.use_wasm_kernels(module)  # None: the shipped module, as the page loads it
        model.greedy_head = model.topk_head = pick
        first = []

        def start_decode(t):  # the first token comes from the prompt's forward: time the steps after it
            if not first:
                first.append(t)
                for k in timers:
                    timers[k] = 0.0

        gen = generate(model, ids, {tokens}, params, on_token=start_decode)
        toks = list(gen)
        st = gen.stats
        steps = len(toks) - 1
        row = {{"tok_s": st.tokens_per_s, "tokens": toks, "ms_per_token": 1e3 * st.decode_s / steps,
                "pick_ms": 1e3 * timers["pick"] / steps, "layers_qmatmul_ms": 1e3 * timers["qmatmul"] / steps}}
        if name not in best or row["tok_s"] > best[name]["tok_s"]:
            best[name] = row
result = best
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="also the fused pick with this kernel module: a git revision or a .wasm file")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.models.gemma3.fetch import fetch_gemma3_270m
    path = fetch_gemma3_270m(progress=True)
    with tempfile.TemporaryDirectory(prefix="ember-gemma-bench-") as tmp:
        mounts, baseline = {"/gemma": str(path.parent)}, None
        if a.baseline:
            base = baseline_module(a.baseline, Path(tmp))
            mounts["/base"], baseline = str(base.parent), f"/base/{base.name}"
        with PyodideSession(mounts=mounts) as s:
            best = s.run(ENGINE.format(path=f"/gemma/{path.name}", prompt=PROMPT, tokens=a.tokens, rounds=a.rounds,
                                       baseline=baseline), timeout=3600)["result"]
    f, full = best["fused pick"], best["all logits"]
    sb, sf = best["sampled top-40, bounded"], best["sampled top-40, all logits"]
    res = {"new_tokens": a.tokens, "same_tokens": f["tokens"] == full["tokens"],
           "same_sampled_tokens": sb["tokens"] == sf["tokens"],
           **{name: {k: round(v, 2) for k, v in r.items() if k != "tokens"} for name, r in best.items()},
           "speedup": round(f["tok_s"] / full["tok_s"], 2), "sampled_speedup": round(sb["tok_s"] / sf["tok_s"], 2)}
    if a.baseline:
        b = best["fused pick, baseline kernels"]
        res["same_tokens_as_baseline_kernels"] = b["tokens"] == f["tokens"]
        res["kernels_speedup_vs_baseline"] = round(f["tok_s"] / b["tok_s"], 2)
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
