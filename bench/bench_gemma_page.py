"""Gemma 3 270M (the Q4_K_M GGUF) decode in Pyodide under Node, the page's CPU engine: tokens/s with the
fused output pick (greedy decoding's argmax over the 262k-row tied Q8_0 output without its logits,
quant.c ember_q8_0_argmax) against every logit computed, and sampled (temperature 0.8, top-k 40, top-p 0.9)
with the bounded top-k (ember_q8_0_rows_above) against every logit, in one run, interleaved, best round; and
where a token's time goes (the output pick, the layers' quantized matmuls, the rest: Python, numpy).

    python bench/bench_gemma_page.py [--tokens 16] [--rounds 3] [--code main] [--baseline main|module.wasm] [--json]

--code REV also runs every path with ember as committed at REV (a wheel of it in a second Pyodide, rounds
alternating): a change's tok/s before and after, Python included, under the same load. --baseline also times
the fused pick with another kernel module (cpu_wasm_kernels.wasm as committed at a git
revision, or a file) in the same interleaved rounds: a kernel change's tok/s before and after in one run.

The tokens of both paths must be equal (the pick and the top-k are exact); the page in Chromium is e2e/test_web_gemma.py.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_wasm_qmatmul import baseline_module  # noqa: E402
from pyodide_runner import PyodideSession  # noqa: E402

PROMPT = "The capital of France is a city that has been at the centre of European history for centuries, and"

SETUP = r'''
import builtins
import time
import numpy as np
import ember
from ember.backends import cpu_matmul
from ember.models.common.generate import SamplingParams, generate
from ember.models.gemma3.load import load_gguf
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
if hasattr(QTensor, "topk_matmul_t"):  # (an older ember may lack it: --code)
    QTensor.topk_matmul_t = timed("pick", QTensor.topk_matmul_t)
qlinear.QLinear.forward = timed("qmatmul", qlinear.QLinear.forward)
try:  # under Node: the process's CPU time, which a loaded machine stretches far less than the wall clock
    from js import process as node_process
    cpu_s = lambda: (lambda u: (u.user + u.system) / 1e6)(node_process.cpuUsage())  # noqa: E731
except ImportError:
    cpu_s = time.process_time
GREEDY, SAMPLED = SamplingParams(temperature=0), SamplingParams(0.8, 40, 0.9, 1.0, 7)
heads = {{"greedy": model.greedy_head, "topk": getattr(model, "topk_head", None)}}
paths = [("fused pick", "greedy", None, GREEDY), ("all logits", None, None, GREEDY),
         ("sampled top-40, bounded", "topk", None, SAMPLED), ("sampled top-40, all logits", None, None, SAMPLED)]
if {baseline!r}:
    paths.append(("fused pick, baseline kernels", "greedy", {baseline!r}, GREEDY))


def one_round():
    rows = {{}}
    for name, head, module, params in paths:
        if head is not None and heads[head] is None:
            continue
        cpu_matmul.use_wasm_kernels(module)  # None: the shipped module, as the page loads it
        model.greedy_head, model.topk_head = heads["greedy"] if head == "greedy" else None, \
            heads["topk"] if head == "topk" else None
        first = []

        def start_decode(t):  # the first token comes from the prompt's forward: time the steps after it
            if not first:
                first.append(cpu_s())
                for k in timers:
                    timers[k] = 0.0

        gen = generate(model, ids, {tokens}, params, on_token=start_decode)
        toks = list(gen)
        cpu = cpu_s() - first[0]
        st = gen.stats
        steps = len(toks) - 1
        rows[name] = {{"tok_s": st.tokens_per_s, "tokens": toks, "ms_per_token": 1e3 * st.decode_s / steps,
                      "cpu_ms_per_token": 1e3 * cpu / steps, "tok_per_cpu_s": steps / cpu,
                      "pick_ms": 1e3 * timers["pick"] / steps, "layers_qmatmul_ms": 1e3 * timers["qmatmul"] / steps}}
    return rows


builtins._ember_gemma_bench = one_round
result = True
'''

ROUND = "import builtins\nresult = builtins._ember_gemma_bench()"


def code_wheel(rev: str, tmp: Path) -> Path:
    # the ember wheel as committed at a git revision: the whole package's before and after, not just the kernels
    from ember.wasm.assets import build_wheel
    src = tmp / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    return build_wheel(tmp / "wheel", source=src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", help="also the fused pick with this kernel module: a git revision or a .wasm file")
    ap.add_argument("--code", help="also every path with the ember package as committed at this git revision, in a "
                    "second Pyodide whose rounds alternate with this one's")
    ap.add_argument("--by", choices=("tok_s", "tok_per_cpu_s"), default="tok_s",
                    help="the best round by wall-clock tok/s, or by tokens per second of the process's CPU time "
                    "(steadier on a loaded machine; the speedups below use the same figure)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from ember.models.gemma3.fetch import fetch_gemma3_270m
    path = fetch_gemma3_270m(progress=True)
    with tempfile.TemporaryDirectory(prefix="ember-gemma-bench-") as tmp, contextlib.ExitStack() as stack:
        mounts, baseline = {"/gemma": str(path.parent)}, None
        if a.baseline:
            base = baseline_module(a.baseline, Path(tmp))
            mounts["/base"], baseline = str(base.parent), f"/base/{base.name}"
        setup = SETUP.format(path=f"/gemma/{path.name}", prompt=PROMPT, tokens=a.tokens, baseline=baseline)
        sessions = {"": stack.enter_context(PyodideSession(mounts=mounts))}
        if a.code:
            wheel = code_wheel(a.code, Path(tmp))
            sessions[f" [{a.code}]"] = stack.enter_context(PyodideSession(mounts=mounts, install_ember=False,
                                                                          wheels=[wheel]))
        for s in sessions.values():
            s.run(setup, timeout=600)
        best = {}
        for _ in range(a.rounds):  # the sessions' rounds alternate: the same load on the machine for both
            for tag, s in sessions.items():
                for name, row in s.run(ROUND, timeout=3600)["result"].items():
                    if name + tag not in best or row[a.by] > best[name + tag][a.by]:
                        best[name + tag] = row
    f, full = best["fused pick"], best["all logits"]
    sb, sf = best["sampled top-40, bounded"], best["sampled top-40, all logits"]
    res = {"new_tokens": a.tokens, "same_tokens": f["tokens"] == full["tokens"],
           "same_sampled_tokens": sb["tokens"] == sf["tokens"],
           **{name: {k: round(v, 2) for k, v in r.items() if k != "tokens"} for name, r in best.items()},
           "speedup": round(f[a.by] / full[a.by], 2), "sampled_speedup": round(sb[a.by] / sf[a.by], 2)}
    if a.code:
        old = f" [{a.code}]"
        res["same_tokens_as_code_baseline"] = best["fused pick" + old]["tokens"] == f["tokens"]
        res["greedy_speedup_vs_code_baseline"] = round(f[a.by] / best["fused pick" + old][a.by], 2)
        res["same_sampled_tokens_as_code_baseline"] = best["sampled top-40, all logits" + old]["tokens"] == sb["tokens"]
        res["sampled_speedup_vs_code_baseline"] = round(sb[a.by] / best["sampled top-40, all logits" + old][a.by], 2)
    if a.baseline:
        b = best["fused pick, baseline kernels"]
        res["same_tokens_as_baseline_kernels"] = b["tokens"] == f["tokens"]
        res["kernels_speedup_vs_baseline"] = round(f[a.by] / b[a.by], 2)
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))


if __name__ == "__main__":
    main()
