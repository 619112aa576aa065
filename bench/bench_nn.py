"""ember.nn's recurrent, attention and mixture-of-experts layers against torch on the CPU, in one run:
LSTM (2 layers, hidden 512, 128 steps, batch 16) and MultiheadAttention (sequence 512) forward and
forward + backward; a Mixtral-shaped MoE block decoding one token (8 experts, top 2) against the same block
computed densely (every expert on every token) and against transformers' block.

    python bench/bench_nn.py [--repeats 3] [--small] [--threads 1] [--cases lstm,mha,moe] [--json]

Engines are interleaved, each case's best of --repeats is kept, and ratios are ember's best over the
reference's best in this run (above 1: ember is slower). --small shrinks every shape (a quick look); --threads
sets torch's intra-op threads (numpy's BLAS keeps its own setting: run both with OPENBLAS_NUM_THREADS equal).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import ember
import ember.nn as nn
import ember.nn.functional as F
from ember.nn.module import Module


def best(fns, repeats):
    """{name: best seconds} over `repeats` interleaved rounds of every fn (one warm-up call each)."""
    for f in fns.values():
        f()
    out = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            out[k] = min(out[k], time.perf_counter() - t)
    return out


def _load(em, tm):
    em.load_state_dict({k: ember.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return em


def lstm_case(small):
    H, L, N = (128, 32, 4) if small else (512, 128, 16)
    tm = torch.nn.LSTM(H, H, 2)
    em = _load(nn.LSTM(H, H, 2), tm)
    x = np.random.default_rng(0).standard_normal((L, N, H)).astype(np.float32)
    tx, ex = torch.tensor(x, requires_grad=True), ember.tensor(x, requires_grad=True)

    def t_fwd():
        with torch.no_grad():
            tm(tx)

    def e_fwd():
        with ember.no_grad():
            em(ex)[0].numpy()

    def t_bwd():
        tm(tx)[0].sum().backward()

    def e_bwd():
        em(ex)[0].sum().backward()
    return f"LSTM 2x{H}, {L} steps, batch {N}", {"forward": (e_fwd, t_fwd), "forward+backward": (e_bwd, t_bwd)}


def mha_case(small):
    E, Hh, L, N = (128, 4, 128, 2) if small else (512, 8, 512, 4)
    tm = torch.nn.MultiheadAttention(E, Hh, batch_first=True)
    em = _load(nn.MultiheadAttention(E, Hh, batch_first=True), tm)
    x = np.random.default_rng(1).standard_normal((N, L, E)).astype(np.float32)
    tx, ex = torch.tensor(x, requires_grad=True), ember.tensor(x, requires_grad=True)

    def t_fwd():
        with torch.no_grad():
            tm(tx, tx, tx, need_weights=False)

    def e_fwd():
        with ember.no_grad():
            em(ex, ex, ex, need_weights=False)[0].numpy()

    def t_bwd():
        tm(tx, tx, tx, need_weights=False)[0].sum().backward()

    def e_bwd():
        em(ex, ex, ex, need_weights=False)[0].sum().backward()
    return f"MultiheadAttention E={E}, {Hh} heads, seq {L}, batch {N}", \
        {"forward": (e_fwd, t_fwd), "forward+backward": (e_bwd, t_bwd)}


def dense_moe(moe, x):
    """The same block with every expert on every token, weighted by the gate (zero off the top k)."""
    flat = x.reshape(-1, moe.hidden_size)
    _, w, idx = moe.gate(flat)
    E = moe.experts.num_experts
    full = F.one_hot(idx, E).float().mul(w.unsqueeze(-1)).sum(1)          # (T, E), zero off the top k
    y = 0
    for e in range(E):
        gate, up = F.linear(flat, moe.experts.gate_up_proj[e]).chunk(2, -1)  # (T, F) each
        y = y + F.linear(F.silu(gate) * up, moe.experts.down_proj[e]) * full[:, e:e + 1]
    return y.reshape(*x.shape)


def moe_case(small):
    H, FF, E = (256, 512, 8) if small else (1024, 3584, 8)
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    tm = MixtralSparseMoeBlock(MixtralConfig(hidden_size=H, intermediate_size=FF, num_local_experts=E,
                                             num_experts_per_tok=2))
    with torch.no_grad():
        for p in tm.parameters():
            p.normal_(0, 0.02)
    em = _load(nn.MoE(H, FF, num_experts=E, num_experts_per_tok=2), tm)
    x = np.random.default_rng(2).standard_normal((1, 1, H)).astype(np.float32)
    tx, ex = torch.tensor(x), ember.tensor(x)
    np.testing.assert_allclose(em(ex).numpy(), dense_moe(em, ex).numpy(), atol=1e-4)

    def t_fwd():
        with torch.no_grad():
            tm(tx)

    def e_fwd():
        with ember.no_grad():
            em(ex).numpy()

    def e_dense():
        with ember.no_grad():
            dense_moe(em, ex).numpy()
    return f"MoE decode, hidden {H}, ffn {FF}, {E} experts top 2", \
        {"vs transformers": (e_fwd, t_fwd), "vs dense experts": (e_fwd, e_dense)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default="lstm,mha,moe", help="comma-separated: lstm, mha, moe")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    cases = {"lstm": lstm_case, "mha": mha_case, "moe": moe_case}
    for case in (cases[c.strip()] for c in a.cases.split(",")):
        title, parts = case(a.small)
        for what, (mine, ref) in parts.items():
            t = best({"ember": mine, "ref": ref}, a.repeats)
            rows.append({"case": title, "what": what, "ember_ms": t["ember"] * 1e3, "ref_ms": t["ref"] * 1e3,
                         "ratio": t["ember"] / t["ref"]})
            if not a.json:
                r = rows[-1]
                print(f"{title:52s} {what:18s} ember {r['ember_ms']:9.1f} ms  ref {r['ref_ms']:9.1f} ms  "
                      f"ratio {r['ratio']:.2f}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
