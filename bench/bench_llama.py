"""Llama decode speed at the llama2.c stories15M shape (dim 288, 6 layers, 6 heads, vocab 32000, seq 256;
random weights) — ember vs transformers eager (torch CPU) on the same weights in the same run, and vs
llama.cpp (llama-cpp-python, f32 GGUF of the same weights, f32 KV cache) when it is installed, plus
ember's per-op overhead on tiny tensors (what bounds a model this small).

    python bench/bench_llama.py [--tokens 64] [--threads 1,2] [--json]
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_llama.py

Every engine runs with the same thread count (ember's BLAS and compiled kernels, torch, llama.cpp), at each count
of --threads (1 and 2 by default), the figures printed with it. Each side
is timed `--repeats` times, interleaved, and the best run is reported (noise only ever slows a run down).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time

import numpy as np

import ember
from ember.models.common.generate import SamplingParams, generate
from ember.models.llama import names
from ember.models.llama.config import LlamaConfig
from ember.models.llama.model import Llama

STORIES15M = dict(vocab_size=32000, dim=288, hidden_dim=768, n_layers=6, n_heads=6, n_kv_heads=6, max_seq_len=256,
                  norm_eps=1e-5)


def blas_info():
    try:
        from threadpoolctl import threadpool_info
        return [{k: b.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for b in threadpool_info() if b.get("user_api") == "blas"]
    except ImportError:
        return "threadpoolctl not installed"


def random_model(seed=0):
    ember.manual_seed(seed)
    m = Llama(LlamaConfig(**STORIES15M)).eval()
    rng = np.random.default_rng(seed)
    sd = {n: rng.normal(0, 0.05 if p.ndim == 2 else 0.1, p.shape).astype(np.float32) + (1.0 if p.ndim == 1 else 0)
          for n, p in m.named_parameters()}  # llama2.c-like magnitudes so greedy decoding is not degenerate
    m.load_state_dict(sd)  # as load_llama does (weights re-stored in the backend's preferred layout)
    return m.requires_grad_(False)  # as load_llama returns it: inference takes the fused paths


def ember_decode(m, prompt, n):
    g = generate(m, prompt, n, SamplingParams(temperature=0))
    toks = list(g)
    return toks, g.stats.tokens_per_s


def torch_model(m):
    import torch
    import transformers
    c = m.config
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**c.to_hf(), "attn_implementation": "eager"})).eval()
    sd = names.to_hf({k: v for k, v in m.state_dict().items()}, c)
    hf.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in sd.items()})
    return hf


def torch_decode(hf, prompt, n):
    import torch
    with torch.no_grad():
        out = hf(torch.tensor([prompt]), use_cache=True)
        pkv, tok = out.past_key_values, int(out.logits[0, -1].argmax())
        toks, t0 = [tok], time.perf_counter()
        for _ in range(n - 1):
            out = hf(torch.tensor([[tok]]), past_key_values=pkv, use_cache=True)
            pkv, tok = out.past_key_values, int(out.logits[0, -1].argmax())
            toks.append(tok)
        return toks, (n - 1) / (time.perf_counter() - t0)


def llamacpp_model(m, folder):
    """The same weights as a llama.cpp GGUF (convert_hf_to_gguf layout, f32; a placeholder SentencePiece-style
    vocabulary of the right size, since only ids go in) loaded by llama-cpp-python; None if not installed."""
    try:
        import gguf
        import llama_cpp
    except ImportError:
        return None
    c = m.config
    path = os.path.join(folder, "stories15m-shape.gguf")
    w = gguf.GGUFWriter(path, "llama")
    for add, v in ((w.add_context_length, c.max_seq_len), (w.add_embedding_length, c.dim),
                   (w.add_block_count, c.n_layers), (w.add_feed_forward_length, c.hidden_dim),
                   (w.add_head_count, c.n_heads), (w.add_head_count_kv, c.n_kv_heads),
                   (w.add_layer_norm_rms_eps, c.norm_eps), (w.add_rope_freq_base, 10000.0)):
        add(v)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(c.vocab_size - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    from ember.models.llama.gguf import GGUF  # ember's reader maps GGUF -> HF names: invert its table
    layer = {hf: g for g, hf in GGUF.layer_names.items()}
    top = {hf: g for g, hf in GGUF.top_names.items()}

    def permute(a, heads):  # convert_hf_to_gguf's LlamaModel.permute: rotate-half rows -> interleaved pairs
        return a.reshape(heads, 2, a.shape[0] // heads // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
    for k, v in names.to_hf(dict(m.state_dict()), c).items():
        a = np.ascontiguousarray(v.numpy(), np.float32)
        if k in top:
            w.add_tensor(top[k], a)
            continue
        _, _, i, *rest = k.split(".")
        base = ".".join(rest[:-1])
        if base == "self_attn.q_proj":
            a = permute(a, c.n_heads)
        elif base == "self_attn.k_proj":
            a = permute(a, c.n_kv_heads)
        w.add_tensor(f"blk.{i}.{layer[base]}.weight", np.ascontiguousarray(a))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path, llama_cpp


def llamacpp_decode(ref, prompt, n, threads):
    path, llama_cpp = ref
    llm = llama_cpp.Llama(path, n_ctx=256, n_threads=threads, n_threads_batch=threads, logits_all=True,
                          verbose=False, type_k=0, type_v=0)  # float32 KV cache, as ember's
    llm.eval(prompt)
    toks, t0 = [int(np.argmax(llm.scores[llm.n_tokens - 1]))], time.perf_counter()
    for _ in range(n - 1):
        llm.eval([toks[-1]])
        toks.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
    return toks, (n - 1) / (time.perf_counter() - t0)


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def op_overheads(reps=2000):
    """µs per call of ember ops on tiny tensors, next to the bare numpy call."""
    a, w = ember.randn(1, 1, 288), ember.randn(288, 288)
    an, wn = a.numpy(), w.numpy()
    cache = ember.randn(1, 6, 100, 48)
    k = ember.randn(1, 6, 1, 48)
    cn, kn = cache.numpy(), k.numpy()
    cases = {"add": (lambda: a + a, lambda: an + an), "mul_scalar": (lambda: a * 0.5, lambda: an * np.float32(0.5)),
             "matmul 1x288@288x288": (lambda: a @ w, lambda: an @ wn),
             "linear (transpose+matmul)": (lambda: ember.nn.functional.linear(a, w), lambda: an @ wn.T),
             "reshape": (lambda: a.reshape(1, 1, 6, 48), lambda: an.reshape(1, 1, 6, 48)),
             "slice [..., :96]": (lambda: a[..., :96], lambda: an[..., :96]),
             "transpose(1, 2)": (lambda: cache.transpose(1, 2), lambda: cache.numpy().swapaxes(1, 2)),
             "cat (kv append)": (lambda: ember.cat([cache, k], 2), lambda: np.concatenate([cn, kn], 2)),
             "silu": (lambda: ember.nn.functional.silu(a), lambda: an / (1 + np.exp(-an))),
             "rms_norm (fused)": (lambda: ember.nn.functional.rms_norm(a, (288,), None, 1e-5),
                                  lambda: an * (1 / np.sqrt((an * an).mean(-1, keepdims=True) + 1e-5))),
             "softmax (fused)": (lambda: ember.nn.functional.softmax(a, -1),
                                 lambda: _np_softmax(an))}
    out = {}
    for name, (f, g) in cases.items():
        res = []
        for fn in (f, g):
            fn()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            res.append((time.perf_counter() - t) / reps * 1e6)
        out[name] = {"ember_us": round(res[0], 2), "numpy_us": round(res[1], 2)}
    return out


def count_ops(m, prompt):
    """Primitive ops per decoded token (backend calls through the CPU device)."""
    be = ember.device("cpu").backend
    counts = {}
    originals = {}
    for name in ("unary", "binary", "where", "cast", "reduce", "reshape", "permute", "expand", "slice", "cat",
                 "contiguous", "matmul", "index_select", "gather", "scatter", "full"):  # (fused ops: registry kernels)
        orig = getattr(be, name)
        originals[name] = orig

        def wrap(*a, _n=name, _o=orig, **k):
            counts[_n] = counts.get(_n, 0) + 1
            return _o(*a, **k)
        setattr(be, name, wrap)
    try:
        cache = m.new_cache()
        with ember.no_grad():
            m(ember.tensor([prompt]), cache)
            counts.clear()
            m(ember.tensor([[5]]), cache)
    finally:
        for name, orig in originals.items():
            setattr(be, name, orig)
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])), sum(counts.values())


def main():
    from ember.backends.cpu_malloc import keep_freed_memory
    keep_freed_memory()  # as the ember CLI does (EMBER_MALLOC_TUNING=0 opts out)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2", help="thread counts, every engine alike (default 1,2)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import sys
    sys.path.insert(0, os.path.dirname(__file__))
    import threads as bench_threads
    import torch
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")}
    prompt = [1, 450, 4996, 17354, 1701, 432, 17204, 975]
    m = random_model()
    hf = torch_model(m)
    tmp = tempfile.mkdtemp(prefix="bench-llama-")
    lcpp = llamacpp_model(m, tmp)
    results = []
    for n in bench_threads.parse(a.threads):
        what = bench_threads.use(n)
        torch.set_num_threads(n)
        ember_decode(m, prompt, 8), torch_decode(hf, prompt, 8)   # warm up
        e_runs, t_runs, l_runs, l_toks = [], [], [], None
        for _ in range(a.repeats):  # a pause before each engine: the last one's worker threads stop spinning
            time.sleep(0.2)
            e_toks, e = ember_decode(m, prompt, a.tokens)
            time.sleep(0.2)
            t_toks, t = torch_decode(hf, prompt, a.tokens)
            e_runs.append(e)
            t_runs.append(t)
            if lcpp:
                time.sleep(0.2)
                l_toks, l = llamacpp_decode(lcpp, prompt, a.tokens, n)
                l_runs.append(l)
        res = {"shape": "stories15M", "tokens": a.tokens, "threads": n, "ember_threads": what,
               "ember_tok_s": round(max(e_runs), 1), "transformers_tok_s": round(max(t_runs), 1),
               "speedup": round(max(e_runs) / max(t_runs), 2), "ember_runs": [round(x, 1) for x in e_runs],
               "transformers_runs": [round(x, 1) for x in t_runs], "same_greedy_tokens": e_toks == t_toks,
               "llamacpp_tok_s": round(max(l_runs), 1) if l_runs else None,
               "llamacpp_runs": [round(x, 1) for x in l_runs],
               "ember_over_llamacpp": round(max(e_runs) / max(l_runs), 2) if l_runs else None,
               "same_tokens_as_llamacpp": e_toks == l_toks if l_runs else None, "loadavg": os.getloadavg()}
        results.append(res)
        if not a.json:
            print(f"decode tokens/s at stories15M shape ({a.tokens} tokens, {n} thread(s) every engine: ember "
                  f"{what}, torch {n}, llama.cpp {n}; best of {a.repeats}; load {res['loadavg']}):")
            print(f"  ember        {res['ember_tok_s']:8.1f}   runs {res['ember_runs']}")
            print(f"  transformers {res['transformers_tok_s']:8.1f}   runs {res['transformers_runs']}")
            print(f"  speedup      {res['speedup']:8.2f}x   same greedy tokens: {res['same_greedy_tokens']}")
            if l_runs:
                print(f"  llama.cpp    {res['llamacpp_tok_s']:8.1f}   runs {res['llamacpp_runs']}   (ember / llama.cpp "
                      f"{res['ember_over_llamacpp']:.2f}x, same greedy tokens: {res['same_tokens_as_llamacpp']})")
    shutil.rmtree(tmp, ignore_errors=True)
    ops, n_ops = count_ops(m, prompt)
    overhead = op_overheads()
    blas = blas_info()
    extra = {"ops_per_token": n_ops, "ops": ops, "op_overhead_us": overhead, "blas": blas, "env": env,
             "numpy": np.__version__, "torch": torch.__version__, "cpu": platform.processor() or platform.machine()}
    if a.json:
        print(json.dumps({"by_threads": results, **extra}))
        return
    print(f"ember backend ops per decoded token: {n_ops} {ops}")
    print("per-op overhead (µs, ember vs bare numpy):")
    for k, v in overhead.items():
        print(f"  {k:28s} {v['ember_us']:8.2f} {v['numpy_us']:8.2f}")
    print(f"BLAS: {blas}\nenv: {env}")


if __name__ == "__main__":
    main()
