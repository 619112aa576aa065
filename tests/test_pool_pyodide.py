"""The page's kernel pool (web/pool.js, cpu_kernels/pool.c, ember.backends.cpu_pool) under Pyodide in Node, its workers
on worker_threads as the page's are Web Workers: the same bits on 1 and 3 threads for every kernel it runs
(llama.cpp-style quantized matmuls, float-activation quantized matmuls, the GEMM in every shape class, the fused
decode step with threaded matvecs and attention), native's bits where native runs the same C, and a worker lost
mid-job ends in an ember error, not a hang, after which the page computes on one thread with the same results.

References are computed in the test: numpy's product (tolerance), the single-thread session (bits), and the native
build of q8dot.c / decode.c (bits)."""
from __future__ import annotations

import ctypes
import hashlib

import numpy as np
import pytest

import ember
from ember.backends import cpu_decode, cpu_float_kernels, cpu_matmul, cpu_native_kernels, cpu_q8dot
from ember.ggml.codec import quantize
from pyodide_runner import PyodideSession, node_path, pyodide_dist, unavailable  # noqa: F401

THREADS = (1, 3)  # (a job's cut never depends on the thread count; 3 threads also claim its chunks unevenly)

# seeded inputs, the same on every platform (numpy's PCG64, float32 casts)
INPUTS = r'''
import hashlib
import numpy as np
from ember.ggml.codec import quantize

def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

def quantized(qtype, rows, cols, seed):
    w = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return quantize(w, qtype, "w").reshape(rows, -1)

def floats(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

Q8_CASES = [("Q4_0", 1, 2048, 512), ("Q8_0", 3, 1500, 640), ("Q4_K", 1, 1024, 768), ("Q6_K", 5, 700, 512),
            ("Q5_1", 2, 900, 1024)]
QF_CASES = [("Q4_K", 2, 1000, 512), ("Q8_0", 5, 800, 640)]
GEMM_CASES = [  # (a shape, b shape, how b is laid out): each path of gemm.c, split by rows or columns
    ((1, 640), (640, 3000), "plain"), ((700, 300), (300, 1), "plain"), ((257, 300), (300, 200), "plain"),
    ((200, 300), (300, 1100), "transposed"), ((6, 200, 64), (6, 64, 200), "plain"),
    ((3, 1, 130, 70), (70, 90), "transposed"), ((2, 3, 100, 64), (2, 3, 64, 100), "plain"),
    # results past the pool's 16 MiB per call: blocks of the batch; blocks of rows (the last row not alone)
    ((3, 1500, 64), (3, 64, 1500), "plain"), ((2097, 64), (64, 2000), "transposed"),
    # a batch of short sentences through a linear layer (one GEMM over all rows); attention's (batch, heads) stacks
    # as views of (batch, tokens, heads, dim) (copied into one batch dim)
    ((32, 19, 384), (384, 1536), "transposed"), ((8, 3, 40, 32), (8, 3, 32, 40), "heads")]

def gemm_operands(i, ashape, bshape, layout):
    a = floats(ashape, 100 + i)
    b = floats(bshape, 200 + i)
    if layout == "transposed":  # (K, N) as the transpose of an (N, K) array: strides kept, not copied
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2)).swapaxes(-1, -2)
    if layout == "heads":  # q (B, H, T, D) and k^T (B, H, D, T) as views of (B, T, H, D) arrays
        a = np.ascontiguousarray(a.swapaxes(1, 2)).swapaxes(1, 2)
        b = np.ascontiguousarray(b.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    return a, b
'''

KERNELS = INPUTS + r'''
from ember.backends import cpu_matmul, cpu_q8dot
from ember.backends.cpu_quant import qmatmul
from ember.ggml import types as T
pool = cpu_matmul.pool_kernels()
jobs = pool.pool.state()["jobs"] if pool is not None else 0
out = {"q8": [], "qf": [], "gemm": [], "gemm_close": []}
for i, (qtype, m, n, k) in enumerate(Q8_CASES):
    raw, x = quantized(qtype, n, k, i), floats((m, k), 50 + i)
    out["q8"].append(digest(cpu_q8dot.q8_matmul(x, raw, qtype, (n, k))))
for i, (qtype, m, n, k) in enumerate(QF_CASES):
    raw, x = quantized(qtype, n, k, 10 + i), floats((m, k), 60 + i)
    out["qf"].append(digest(qmatmul(None, x, raw, T.get(qtype), (n, k))))
gemm = pool or cpu_matmul.wasm_kernels()  # (the kernels themselves: mm leaves a row vector to this thread)
for i, (ashape, bshape, layout) in enumerate(GEMM_CASES):
    a, b = gemm_operands(i, ashape, bshape, layout)
    c = gemm.matmul(a, b)
    out["gemm"].append(digest(c))
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out["gemm_close"].append(float(np.abs(c - want).max() / np.abs(want).max()))
was = cpu_matmul.set_deterministic(True)  # the plain module's GEMM: on the pool (gemm_exact.c) from 2 threads
out["exact"] = [digest(cpu_matmul.mm(*gemm_operands(i, *case))) for i, case in enumerate(GEMM_CASES)]
import ember
from ember.backends import cpu_fused  # long attention, a block of query rows at a time (on the pool: attention_blocks)
for det in (True, False):
    cpu_matmul.set_deterministic(det)
    for i, (length, keys) in enumerate(((1500, 1500), (2797, 1500))):  # (2797: a last block of one row, composed)
        q, k, v = floats((1, 2, length, 64), 70 + i), floats((1, 2, keys, 64), 80 + i), floats((1, 2, keys, 64), 90 + i)
        out.setdefault("attention", []).append(digest(cpu_fused.attention(None, q, k, v, None, 0.125, False)))
    for i, (xshape, n) in enumerate((((32, 19, 384), 1536), ((700, 300), 200))):  # a linear layer: on the pool its
        x, w, b = floats(xshape, 110 + i), floats((n, xshape[-1]), 120 + i), floats(n, 130 + i)  # bias is added there
        y, ref = cpu_fused.linear(ember.device("cpu").backend, x, w, b), cpu_matmul.mm(x, w.T)
        ref += b  # (the composed linear: the product, then numpy's add)
        out.setdefault("linear", []).append(digest(y))
        out.setdefault("linear_composed", []).append(digest(ref))
cpu_matmul.set_deterministic(was)
from ember.nn import functional as F  # linear_act: on the pool, the bias and the activation in its memory
for i, act in enumerate(("gelu", "gelu_tanh", "silu")):
    x, w, b = floats((32, 19, 384), 140 + i), floats((1536, 384), 150 + i) * 0.1, floats(1536, 160 + i)
    y = cpu_fused.linear_act(ember.device("cpu").backend, x, w, b, act)  # (None: no pool, composed)
    ref = F.linear_act_composed(ember.tensor(x), ember.tensor(w), ember.tensor(b), act).numpy()
    out.setdefault("linear_act", []).append(digest(ref if y is None else y))
    out.setdefault("linear_act_composed", []).append(digest(ref))
    out.setdefault("linear_act_fused", []).append(y is not None)
x = floats((300, 1537), 95) * 4  # SiLU and GELU (elementwise.c, blocks of elements on the pool; an odd tail)
out["attention"] += [digest(cpu_fused.silu(None, x)), digest(cpu_fused.gelu(None, x, "none"))]
out["status"] = cpu_matmul.pool_status()
out["jobs"] = (pool.pool.state()["jobs"] - jobs) if pool is not None else 0
result = out
'''

# the float kernels (conv.c, attention.c, rows.c), each call large enough for the pool (cpu_pool_kernels.POOL_MIN_*)
FLOATS = INPUTS + r'''
from ember.backends import cpu_dense, cpu_float_kernels as CFK

def float_calls(fk):
    x, w, b = floats((1, 24, 40, 64), 1), floats((32, 24, 3, 3), 2) * 0.3, floats(32, 3)
    dx, dw = floats((1, 32, 64, 64), 4), floats((32, 1, 3, 3), 5)
    qkv = floats((2, 200, 3, 4, 64), 6)  # a fused projection: q, k, v strided views of it
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    kk, vv = floats((2, 4, 300, 64), 7), floats((2, 4, 300, 32), 8)
    mask = np.where(floats((1, 1, 200, 300), 9) > 1.5, -np.inf, 0).astype(np.float32)
    xs, lw, lb = floats((300, 512), 10) * 3, floats(512, 11), floats(512, 12)
    inplace, ch = floats((300, 512), 13), floats((2, 16, 80, 80), 14)
    wide = floats((300, 700), 15)[:, :512]  # rows with a stride, out into a strided view
    out_view = np.zeros((300, 600), np.float32)[:, :512]
    u = cpu_dense.winograd_weight(floats((32, 24, 3, 3), 17) * 0.3)
    return {"conv": fk.conv2d(x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu"),
            "conv_again": fk.conv2d(x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu"),  # (w and b kept in the pool's memory)
            "conv_s2": fk.conv2d(x, w, None, (2, 2), (1, 1), (1, 1), 1, "gelu"),
            "winograd": fk.conv3x3_winograd(x, u, b, (1, 1), "silu"),
            "winograd_again": fk.conv3x3_winograd(x, u, b, (1, 1), "silu"),
            "depthwise": fk.conv2d(dx, dw, None, (1, 1), (1, 1), (1, 1), 32, "relu"),
            "attn_causal": fk.attention(q, k, v, None, 0.125, True),
            "attn_mask": fk.attention(q, kk, vv, mask, 0.125, False),
            "ln": fk.layer_norm(xs, lw, lb, 1e-5), "gelu": fk.bias_act(xs, lb, "gelu"),
            "inplace": fk.bias_act(inplace, None, "gelu_tanh", out=inplace),
            "channels": fk.bias_act(ch, floats(16, 16), "silu", channels=16),
            "strided": fk.bias_act(wide, lb, "gelu", out=out_view)}
'''

# plain 1x1 convs over a concatenation's parts (C2f's) and alone: a map under the rule's pointwise_pixels (gemm.c on
# the pool, its bias and activation in the pool's memory) and one over it (conv.c); a batch of two (composed)
POINTWISE = INPUTS + r'''
import ember
from ember.backends import cpu_dense, cpu_matmul
be = ember.device("cpu").backend
out, taken = {}, {}
for name, (c1, c2, o, h, w, n) in {"small": (96, 64, 128, 20, 15, 1), "large": (40, 24, 48, 130, 130, 1),
                                   "batch": (32, 32, 64, 20, 15, 2)}.items():
    parts = [floats((n, c1, h, w), 30), floats((n, c2, h, w), 31)]
    wt, bias = floats((o, c1 + c2, 1, 1), 32) * 0.2, floats(o, 33)
    wa = np.ascontiguousarray(wt[:, :c1])  # (the first part's weight, for a conv of it alone)
    for act in ("silu", None):
        for b in (bias, None):
            key = f"{name} {act} {b is not None}"
            for again in range(2):  # (the second call: the weight kept in the pool's memory)
                fused = cpu_dense.conv_cat_act(be, parts, wt, b, act)
                whole = cpu_dense.conv_bias_act(be, np.concatenate(parts, 1), wt, b, (1, 1), (0, 0), (1, 1), 1, act)
                alone = cpu_dense.conv_bias_act(be, parts[0], wa, b, (1, 1), (0, 0), (1, 1), 1, act)
            taken[key] = fused is not None
            out[key] = [digest(whole), None if fused is None else digest(fused), digest(alone)]
result = {"out": out, "taken": taken}
'''


# gemm.c's epilogue (ember_sgemm_ep) against the product then rows.c's bias_act pass: a bias per row, per column,
# none; every activation; each of gemm.c's paths (blocked, k past one KC block, a row vector, a column, k = 0)
EPILOGUE = INPUTS + r"""
from ember.backends import cpu_matmul, cpu_float_kernels as CFK
from ember.backends.cpu_wasm_kernels import EP_ACT, EP_COLS, EP_NONE, EP_ROWS
side, pool, fk = cpu_matmul.wasm_kernels(), cpu_matmul.pool_kernels(), CFK.kernels()
out = {}
for m, k, n in ((37, 300, 61), (5, 3, 9), (1, 40, 70), (70, 40, 1), (130, 600, 17), (8, 0, 16)):
    a, b = floats((m, k), m + k), floats((k, n), n + 1)
    rb, cb = floats(m, 7), floats(n, 8)
    y0 = side.matmul(a, b)
    for act in (None, "relu", "silu", "gelu", "gelu_tanh"):
        for mode, bias in ((EP_ROWS, rb), (EP_COLS, cb), (EP_ACT, None), (EP_NONE, None)):
            if (mode == EP_ACT) != (act is not None) and bias is None:
                continue  # (the calls conv and linear make: no bias and no activation is EP_NONE)
            y = np.full((m, n), np.nan, np.float32)
            side.matmul_ep(a, b, y, bias, mode, CFK.ACTS[act])
            if mode == EP_ROWS:  # (a conv's output (1, channels, pixels))
                want = fk.bias_act(y0.reshape(1, m, n).copy(), bias, act, channels=m)
            else:
                want = fk.bias_act(y0.copy(), bias, act) if bias is not None or act is not None else y0
            out[f"{m}x{k}x{n} {mode} {act}"] = [digest(y), digest(want)]
a, b, cb = floats((300, 200), 1), floats((200, 257), 2), floats(257, 3)
y0 = side.matmul(a, b)
for act in (None, "silu", "gelu"):  # (the pool's linear: the epilogue on its threads; none on one thread)
    got = pool.matmul(a, b, bias=cb, act=act) if pool is not None else fk.bias_act(y0.copy(), cb, act)
    out[f"linear {act}"] = [digest(got), digest(fk.bias_act(y0.copy(), cb, act))]
# a 1x1 conv on gemm.c (its K in blocks, each element's chain continued across them) and on conv.c's direct conv
for c, o, h, w in ((300, 64, 30, 20), (600, 48, 20, 15)):
    x, wt, bias = floats((1, c, h, w), c), floats((o, c, 1, 1), o) * 0.1, floats(o, 5)
    for act in ("silu", None):
        out[f"1x1 {c} {act}"] = [digest(fk.pointwise([x], wt, bias, act, False)),
                                 digest(fk.conv2d(x, wt, bias, (1, 1), (0, 0), (1, 1), 1, act))]
result = out
"""


# a conv's output read by the next conv (a chain, and C2f's split halves read back in order and swapped), then made
# writeable and written: the bytes each call copies into the pool's memory and the bits it gives
CHAIN = INPUTS + r"""
import ember
from ember.backends import cpu_dense, cpu_pool
be = ember.device("cpu").backend
copied, real = [0], cpu_pool.Pool.write
def write(self, at, a):
    copied[0] += a.nbytes
    return real(self, at, a)
cpu_pool.Pool.write = write  # (put back at the end: the session serves the other tests too)
x, w1, b1 = floats((1, 24, 40, 64), 40), floats((32, 24, 3, 3), 41) * 0.3, floats(32, 42)
w2, w3, b3 = floats((48, 32, 3, 3), 43) * 0.2, floats((64, 48, 1, 1), 44) * 0.2, floats(64, 45)
conv3 = lambda a, w, b, s=1: cpu_dense.conv_bias_act(be, a, w, b, (s, s), (1, 1), (1, 1), 1, "silu")
for _ in range(3):  # (from the third: weights kept in the pool's memory since the second; only activations copied)
    steps, out = {}, {}
    for name, fn in (("y1", lambda: conv3(x, w1, b1)), ("y2", lambda: conv3(out["y1"], w2, None)),
                     ("s2", lambda: conv3(out["y1"], w2, None, 2)),
                     ("halves", lambda: cpu_dense.conv_cat_act(be, [out["y2"][:, :24], out["y2"][:, 24:]], w3, b3,
                                                               "silu")),
                     ("swapped", lambda: cpu_dense.conv_cat_act(be, [out["y2"][:, 24:], out["y2"][:, :24]],
                                                                np.ascontiguousarray(w3[:, ::-1]), b3, "silu"))):
        copied[0] = 0
        out[name] = fn()
        steps[name] = copied[0]
conv1 = lambda parts, w: cpu_dense.conv_bias_act(be, np.concatenate(parts, 1), w, b3, (1, 1), (0, 0), (1, 1), 1,
                                                  "silu")
out["halves_whole"] = conv1([out["y2"][:, :24], out["y2"][:, 24:]], w3)
out["swapped_whole"] = conv1([out["y2"][:, 24:], out["y2"][:, :24]], np.ascontiguousarray(w3[:, ::-1]))
writeable = out["y1"].flags.writeable
out["y1"].flags.writeable = True  # (made writeable and written: read as it is now)
out["y1"] *= 0.5
copied[0] = 0
after, steps["written"] = conv3(out["y1"], w2, None), copied[0]
fresh = conv3(np.array(out["y1"]), w2, None)
cpu_pool.Pool.write = real
result = {"out": {k: digest(v) for k, v in out.items() if v is not None}, "taken": {k: v is not None for k, v in out.items()},
          "after": digest(after), "fresh": digest(fresh), "copied": steps, "writeable": writeable,
          "sizes": {k: v.nbytes for k, v in out.items() if v is not None}}
"""


# a Gemma 3-shaped model large enough that its matvecs (512 x 1536) and, past 128 cached rows, its attention (8
# heads) split between threads; Q4_K / Q8_0 projections beside float32 ones
DECODE = r'''
import numpy as np
import ember
from ember.models.gemma3.config import Gemma3Config, GLOBAL, SLIDING
from ember.models.gemma3.model import Gemma3
from ember.quant import quantize as quantize_model, set_activations

CONFIG = dict(vocab_size=300, dim=512, hidden_dim=1536, n_layers=3, n_heads=8, n_kv_heads=2, head_dim=64,
              max_seq_len=256, sliding_window=160, layer_types=[SLIDING, GLOBAL, SLIDING], query_pre_attn_scalar=64.0)

def model():
    m = Gemma3(Gemma3Config(**CONFIG))
    rng = np.random.default_rng(11)
    m.model.embed_tokens.load_table(rng.standard_normal((CONFIG["vocab_size"], CONFIG["dim"])).astype(np.float32))
    for name, p in m.named_parameters():
        scale = 0.3 if "norm" in name else 1.0 / np.sqrt(p.shape[-1])
        p._data[...] = (1.0 if "norm" in name else 0.0) + scale * rng.standard_normal(p.shape).astype(np.float32)
    m = m.eval().requires_grad_(False)
    quantize_model(m, "q4_k", include=lambda name, mod: "mlp" in name)
    quantize_model(m, "q8_0", include=lambda name, mod: "q_proj" in name or "o_proj" in name)
    set_activations(m, "q8")  # k_proj, v_proj stay float32
    m.head = lambda x: x  # the final norm's output: decode.c's last step
    return m

def states(m, turns, keep=1):
    """Hidden states (hex) of each turn's prompt (run composed) and of its greedy-ish decode steps (fused), every
    keep-th step; and whether every step ran fused."""
    cache = m.new_cache(256)
    out, fused = [], []
    with ember.no_grad():
        for ids, steps in turns:
            h = m(ember.tensor([ids]), cache).numpy()[0, -1]
            out.append(h.tobytes().hex())
            for i in range(steps):
                h = m(ember.tensor([[int(np.abs(h).argmax()) % CONFIG["vocab_size"]]]), cache).numpy().reshape(-1)
                if i % keep == 0 or i == steps - 1:
                    out.append(h.tobytes().hex())
                fused.append(m._fused_decoder._plan is not None)
    return out, all(fused), type(m._fused_decoder._plan).__name__

PROMPT = [int(t) for t in np.random.default_rng(12).integers(0, CONFIG["vocab_size"], 140)]
ONE_TOKEN = [([3], 150)]  # every step fused: attention past 128 rows splits by heads
TURNS = [(PROMPT, 5), (PROMPT[:7], 4)]  # prompts run composed between fused steps: the pool's cache copy follows

def plan_steps():
    """The model's decode plan stepped on fixed inputs (x, rope tables, caches of 200 rows): (x after each step,
    the cache rows it wrote) as hex. The same inputs natively and in the page (a model's own rope tables come
    from numpy's cos / sin, whose last bits differ between the two)."""
    from ember.backends.cpu_decode import decoder_plan
    from ember.models.common import fused_decode as FD
    spec = FD.model_spec(model(), [])
    plan = decoder_plan(None, spec)
    rng = np.random.default_rng(13)
    kvh, hd = CONFIG["n_kv_heads"], CONFIG["head_dim"]
    bufs = [(rng.standard_normal((1, kvh, 256, hd)).astype(np.float32),
             rng.standard_normal((1, kvh, 256, hd)).astype(np.float32)) for _ in range(CONFIG["n_layers"])]
    out = []
    for slot in (200, 201, 202):
        x = rng.standard_normal(CONFIG["dim"]).astype(np.float32)
        rope = rng.standard_normal((len(spec["ropes"]), hd)).astype(np.float32)
        plan.step(x, rope, [(k, v, slot, slot + 1) for k, v in bufs], written=0)
        out.append(x.tobytes().hex())
        out += [k[0, :, slot].tobytes().hex() + v[0, :, slot].tobytes().hex() for k, v in bufs]
    return out, type(plan).__name__
'''


@pytest.fixture(scope="module")
def sessions(pyodide_dist):  # noqa: F811
    if node_path() is None:
        unavailable("ember: node not found on PATH; Pyodide tests need Node.js 20")
    started = {n: PyodideSession(dist=pyodide_dist, threads=n) for n in THREADS}
    yield started
    for s in started.values():
        s.close()


def test_every_kernel_gives_the_same_bits_on_any_thread_count(sessions):
    got = {n: sessions[n].run(KERNELS, timeout=600)["result"] for n in THREADS}
    assert got[1]["status"].startswith("1 thread") and got[1]["jobs"] == 0
    for n in THREADS[1:]:
        assert got[n]["status"] == f"{n} threads"
        assert got[n]["jobs"] >= len(got[1]["q8"]) + 2 * len(got[1]["gemm"]) - 2  # they ran on the pool, split
        # (but deterministic mode's row vector times a matrix: mm leaves it to this thread)
        for key in ("q8", "qf", "gemm", "exact", "attention", "linear", "linear_act"):  # exact: deterministic
            assert got[n][key] == got[1][key], (n, key)  # mode's GEMM (plain module's bits) on 1 thread
        assert got[n]["linear"] == got[n]["linear_composed"], n  # the bias added on the pool: numpy's add's bits
        # the registry's linear_act (its kernel runs on the pool only): its composed reference's bits
        assert all(got[n]["linear_act_fused"]) and got[n]["linear_act"] == got[n]["linear_act_composed"], n
    assert not any(got[1]["linear_act_fused"])
    assert max(got[1]["gemm_close"]) < 1e-5  # a matmul (against float64 numpy)
    # q8dot.c is native's C too: the page's bits are native's (and the numpy version's)
    ns = {}
    exec(INPUTS, ns)
    for (qtype, m, n, k), page in zip(ns["Q8_CASES"], got[3]["q8"]):
        i = ns["Q8_CASES"].index((qtype, m, n, k))
        raw, x = ns["quantized"](qtype, n, k, i), ns["floats"]((m, k), 50 + i)
        assert ns["digest"](cpu_q8dot.q8_matmul_numpy(x, raw, qtype, n)) == page, qtype
        if cpu_matmul.native_kernels() is not None:
            assert ns["digest"](cpu_q8dot.q8_matmul(x, raw, qtype, (n, k))) == page, qtype


ARGMAX = INPUTS + r'''
from ember.backends import cpu_matmul, cpu_pool_kernels, cpu_q8dot
kern = cpu_matmul.pool_kernels()
raw = quantized("Q8_0", 1003, 640, 7)
raw[500] = raw[17]  # two equal rows: equal logits, the first one wins
x = floats((1, 640), 8)
picks, ys = [], []
for name, xv in (("random", x), ("tie", None)):
    if xv is None:  # x along row 17's levels: rows 17 and 500 are the largest
        from ember.ggml.codec import dequantize
        xv = dequantize(raw[17:18].reshape(-1), "Q8_0", (1, 640)).astype(np.float32)
    y = cpu_q8dot.q8_matmul(xv, raw, "Q8_0", (1003, 640))
    picks.append(cpu_q8dot.q8_matmul_argmax(xv, raw, "Q8_0", (1003, 640)))
    ys.append(y.reshape(-1).tolist())
# the scan alone on the edge cases of numpy's argmax: NaN (the first), -0 and +0, -inf only, short and odd lengths
scans = []
side = cpu_matmul.wasm_kernels()
for case in ([np.nan, 1.0, np.nan], [-0.0, 0.0], [-np.inf] * 40, [1.0], floats(4099, 3), np.r_[floats(37, 4), np.nan],
             np.r_[floats(33, 5), 9.0, floats(30, 6), 9.0]):
    a = np.asarray(case, np.float32)
    if kern is not None:  # the pool's scan where the logits lie
        at = kern._io_at(a.nbytes)
        kern.pool.write(at, a)
        scans.append([int(kern._argmax(at, a.size)), int(np.argmax(a))])
    else:  # the side module's
        scans.append([side.argmax(a), int(np.argmax(a))])
empty = int(kern._argmax(kern._io_at(64), 0)) if kern is not None else side.argmax(np.empty(0, np.float32))
result = {"pool": isinstance(kern, cpu_pool_kernels.PoolKernels), "picks": picks, "ys": ys, "scans": scans,
          "empty": empty}
'''


def test_the_greedy_pick_from_logits_in_the_pool_is_numpys_argmax(sessions):
    """A greedy decode's head on the pool picks its token where the logits lie: the index numpy's argmax gives
    (ties: the first; NaN: the first NaN), on any thread count."""
    got = {n: sessions[n].run(ARGMAX, timeout=600)["result"] for n in THREADS}
    assert not got[1]["pool"] and got[3]["pool"]
    for n in THREADS:  # (1: the side module's scan of the logits it returned)
        assert got[n]["picks"] == [int(np.argmax(np.asarray(y, np.float32))) for y in got[n]["ys"]]
        assert got[n]["ys"] == got[1]["ys"] and got[n]["picks"] == got[1]["picks"]
        assert got[n]["picks"][1] == 17  # the tie: rows 17 and 500
        assert len(got[n]["scans"]) == 7 and got[n]["empty"] == -1  # (no logits: no index, never a read past them)
        for pool_pick, numpy_pick in got[n]["scans"]:
            assert pool_pick == numpy_pick


def test_the_float_kernels_give_the_same_bits_on_any_thread_count(sessions, tmp_path):
    """conv.c, attention.c and rows.c on the pool: the side module's bits on 1 thread, native's where native
    builds the same C (SSSE3, no FMA: the plain wasm module's arithmetic; the row kernels' everywhere)."""
    code = FLOATS + r'''
from ember.backends import cpu_matmul
pool = cpu_matmul.pool_kernels()
jobs = pool.pool.state()["jobs"] if pool is not None else 0
fk = CFK.kernels()
calls = float_calls(fk)
result = {"kind": type(fk).__name__, "path": cpu_matmul.matmul_path(),
          "out": {k: v.tobytes().hex() for k, v in calls.items()},
          "jobs": (pool.pool.state()["jobs"] - jobs) if pool is not None else 0}
if pool is not None:  # a weight called twice is kept in the pool's memory; one called once is not
    w2, u = floats((32, 24, 3, 3), 2) * 0.3, cpu_dense.winograd_weight(floats((32, 24, 3, 3), 18))
    x = floats((1, 24, 40, 64), 1)
    kept = []
    for _ in range(2):
        fk.conv2d(x, w2, None, (1, 1), (1, 1), (1, 1), 1, None), fk.conv3x3_winograd(x, u, None, (1, 1))
        kept.append([cpu_matmul.derived(a, "pool") is not None for a in (w2, u)])
    result["kept"] = kept
'''
    got = {n: sessions[n].run(code, timeout=600)["result"] for n in THREADS}
    assert got[1]["kind"] == "FloatKernels" and got[1]["jobs"] == 0
    for n in THREADS[1:]:
        # every call but LayerNorm's (its rows cost no more than their copies: it stays on this thread) split
        assert got[n]["kind"] == "PoolFloatKernels" and got[n]["jobs"] >= len(got[1]["out"]) - 1, (n, got[n]["jobs"])
        assert got[n]["kept"] == [[False, False], [True, True]]
        for key, hexed in got[1]["out"].items():
            assert got[n]["out"][key] == hexed, (n, key)
    cc = cpu_native_kernels.compiler()
    if cc is None:
        pytest.skip("no C compiler to build native's float kernels with")
    lib = ctypes.CDLL(str(cpu_native_kernels.build(cc, tmp_path / "k.so", ["-mssse3"])))
    ns = {}
    exec(FLOATS, ns)
    native = ns["float_calls"](cpu_float_kernels.FloatKernels(lib, native=True))
    relaxed = "relaxed" in got[3]["path"] and "no relaxed" not in got[3]["path"]
    for key, y in native.items():
        if key in ("ln", "gelu", "inplace", "channels", "strided") or not relaxed:
            assert y.tobytes().hex() == got[3]["out"][key], key


def test_pointwise_convs_over_parts_on_the_pool_are_the_concatenations(sessions):
    """conv_cat_act in the page's pool (its parts written where the call's x goes, no concatenated copy) gives the
    bits of conv_bias_act on the concatenation, on both of the page's 1x1 paths (gemm.c with the bias and
    activation in its epilogue, conv.c over a large map), and a plain 1x1 conv the side module's bits on one
    thread; a batch is left to the composed path. On one thread the side module takes the gemm.c path itself
    (the parts concatenated, a batch image by image) and leaves conv.c's large map to the composed path."""
    got = {n: sessions[n].run(POINTWISE, timeout=600)["result"] for n in THREADS}
    for key, taken in got[1]["taken"].items():
        assert taken == (not key.startswith("large")), key
    for key, taken in got[3]["taken"].items():
        assert taken == (not key.startswith("batch")), key
    for n in THREADS:
        for key, (whole, fused, alone) in got[n]["out"].items():
            assert fused in (None, whole), (n, key)
            assert [whole, alone] == [got[1]["out"][key][0], got[1]["out"][key][2]], (n, key)


def test_gemm_epilogue_gives_the_product_then_bias_act(sessions):
    """gemm.c's epilogue (the page's 1x1 convs and the pool's linear layers: a bias and an activation applied to
    each panel of the product as it is done) gives the bits of the product then rows.c's bias_act pass, on each of
    gemm.c's paths, with a bias per row, per column or none, every activation, on any thread count; and a 1x1
    conv on gemm.c gives conv.c's direct conv's bits (each output one multiply-add chain over its channels on
    both, whatever gemm.c's blocks of K), so the rule's choice between them changes no result."""
    for n in THREADS:
        got = sessions[n].run(EPILOGUE, timeout=600)["result"]
        assert len(got) == 6 * 15 + 3 + 4
        for key, (y, want) in got.items():
            assert y == want, (n, key)


def test_a_convs_output_stays_in_the_pools_memory_for_the_next_conv(sessions):
    """A conv's output read back from the pool is kept there while it lives (read-only: backend arrays are never
    written in place): the next conv that reads it (a chain, C2f's halves in their order) copies no activation in,
    with the bits of the side module on one thread; parts out of order are copied; an output made writeable and
    written is read as it is now."""
    got = {n: sessions[n].run(CHAIN, timeout=600)["result"] for n in THREADS}
    one, pool = got[1], got[3]
    assert one["copied"] == {k: 0 for k in one["copied"]} and one["writeable"]  # (no pool: nothing kept)
    assert pool["taken"]["halves"] and pool["taken"]["swapped"] and not pool["writeable"]
    for k in ("y1", "y2", "s2", "halves_whole", "swapped_whole"):
        assert pool["out"][k] == one["out"][k], k
    assert pool["out"]["halves"] == one["out"]["halves_whole"] and pool["out"]["swapped"] == one["out"]["swapped_whole"]
    copied = pool["copied"]
    assert copied["y1"] >= 24 * 40 * 64 * 4  # (x is nobody's output: copied in; the call's parameters a few bytes)
    assert copied["y2"] < 4096 and copied["s2"] < 4096 and copied["halves"] < 4096, copied
    assert copied["swapped"] >= pool["sizes"]["y2"] and copied["written"] >= pool["sizes"]["y1"], copied
    assert pool["after"] == pool["fresh"] == one["after"] and pool["after"] != pool["out"]["y2"]


def test_whisper_decoder_steps_give_the_same_bits_on_any_thread_count(sessions):
    """decode_xattn.c's plan on the pool (PoolXattnPlan: weights placed, the self-attention cache mirrored) and on
    the side module: the same hidden states, including after a prompt run composed into the same cache between
    fused steps (the mirror copies the cache in again). Native's bits: test_whisper_fused_decode."""
    from test_whisper_fused_decode import BUILD, PAGE_RUN
    code = BUILD + PAGE_RUN + \
        "\nresult = run(random_whisper(5, d=384, heads=6, ffn=1536, vocab=3000), 300, 64, middle=6)\n"
    got = {n: sessions[n].run(code, timeout=600)["result"] for n in THREADS}
    assert got[1][1] == "XattnPlan"
    for n in THREADS[1:]:
        assert got[n][1] == "PoolXattnPlan" and got[n][0] == got[1][0], n
        assert got[n][2] == got[1][2], n  # the head on the pool (the plan's) = the side module's matmul


def test_the_decode_step_on_the_pool_equals_native(sessions):
    code = DECODE + """
m = model()
result = {"one": states(m, ONE_TOKEN, keep=10), "turns": states(m, TURNS), "plan": plan_steps()}
"""
    got = {n: sessions[n].run(code, timeout=900)["result"] for n in THREADS}
    for n in THREADS:
        for key in ("one", "turns"):
            page_states, fused, plan = got[n][key]
            assert fused and plan == ("DecodePlan" if n == 1 else "PoolDecodePlan"), (n, key, plan)
            assert page_states == got[1][key][0], (n, key)
        assert got[n]["plan"][0] == got[1]["plan"][0], n
    if cpu_decode.kernels() is None:
        pytest.skip(f"no native kernels here to compare with ({cpu_matmul.native_kernels_status()})")
    ns = {}
    exec(DECODE, ns)
    assert ns["plan_steps"]()[0] == got[3]["plan"][0]


def test_a_lost_worker_ends_the_job_in_an_error_and_the_page_goes_on(pyodide_dist):  # noqa: F811
    code = INPUTS + r'''
import js
from ember.backends import cpu_matmul, cpu_q8dot
from ember.backends.cpu_pool import PoolError
from ember.errors import EmberError
raw, x = quantized("Q8_0", 4000, 1024, 1), floats((2, 1024), 2)
before = digest(cpu_q8dot.q8_matmul(x, raw, "Q8_0", (4000, 1024)))
js.emberPoolOwner.lose(1, "the test")  # as web/pool.js reports a worker that died or was terminated
try:
    cpu_q8dot.q8_matmul(x, raw, "Q8_0", (4000, 1024))
    error = None
except PoolError as e:
    error = [str(e), isinstance(e, EmberError)]
result = {"error": error, "status": cpu_matmul.pool_status(),
          "after": digest(cpu_q8dot.q8_matmul(x, raw, "Q8_0", (4000, 1024))), "before": before}
'''
    with PyodideSession(dist=pyodide_dist, threads=2) as s:
        got = s.run(code, timeout=300)["result"]
    assert got["error"] is not None and got["error"][1], got
    assert "worker 1 of the kernel pool was lost mid-job" in got["error"][0]
    assert got["status"].startswith("1 thread (worker 1 of the kernel pool was lost")
    assert got["after"] == got["before"]


def test_quantized_weights_go_from_the_file_into_the_pool_only(pyodide_dist, tmp_path):  # noqa: F811
    """Inside weights_in_pool(), a GGUF's quantized tensors are SharedRows (the pool's memory, not Pyodide's heap,
    whether the file is in Pyodide's in-memory FS, read from its JS array, or a mounted one, read in pieces);
    products with them equal those with the heap's copy, and every other use gets the same bytes. Q5_0 blocks are
    held in the pool's bytes layout (expanded where they lie) and still read back as GGML's blocks."""
    from ember.io import gguf
    rng = np.random.default_rng(0)
    tensors = {"a": ember.QTensor.quantize(rng.standard_normal((2000, 512)).astype(np.float32), "q4_k", "a"),
               "b": ember.QTensor.quantize(rng.standard_normal((300, 256)).astype(np.float32), "q8_0", "b"),
               "c": ember.QTensor.quantize(rng.standard_normal((700, 512)).astype(np.float32), "q5_0", "c"),
               "small": ember.QTensor.quantize(rng.standard_normal((8, 64)).astype(np.float32), "q8_0", "small"),
               "norm": ember.tensor(rng.standard_normal(512).astype(np.float32))}
    gguf.save(tensors, tmp_path / "w.gguf")
    code = r'''
import hashlib, pickle, shutil
import numpy as np
import pyodide_js
import ember
from ember.backends import cpu_matmul, cpu_q8dot
from ember.backends.cpu_pool import SharedRows, weights_in_pool
shutil.copy("/data/w.gguf", "/tmp/w.gguf")  # a file of the in-memory FS, as the page's model files are
QROWS = {"a": [5, 1999, 0, 5], "b": [299], "c": [699, 3], "small": [7, 0]}
x = np.random.default_rng(1).standard_normal((3, 512)).astype(np.float32)
out = {}
for where in ("/tmp/w.gguf", "/data/w.gguf"):
    heap0 = pyodide_js._module.HEAPU8.length
    with weights_in_pool():
        w = ember.load(where)
    got = {"kinds": {k: type(getattr(v, "data", v)).__name__ for k, v in w.items()},
           "heap_growth": pyodide_js._module.HEAPU8.length - heap0,
           "layouts": {k: w[k].data.layout for k in ("a", "b", "c")},
           # rows dequantized where they lie (the pool's SharedRows) or by the side module (a heap array)
           "qrows": {k: hashlib.sha256(w[k].rows(np.array(QROWS[k])).tobytes()).hexdigest() for k in QROWS}}
    for name, qtype in (("a", "Q4_K"), ("c", "Q5_0")):
        a = w[name]
        got[name] = {"bytes": hashlib.sha256(np.asarray(a.data).tobytes()).hexdigest(),
                     "rows": hashlib.sha256(a.data[np.array([5, 699, 0])].tobytes()).hexdigest(),
                     "slice": hashlib.sha256(np.asarray(a.data[10:20]).tobytes()).hexdigest(),
                     "pickled": type(pickle.loads(pickle.dumps(a.data))).__name__}
        a.activations = "q8"
        for m in (1, 3):  # (one row: the decode loop; three: prefill's)
            y_heap = cpu_q8dot.q8_matmul_numpy(x[:m], np.asarray(a.data), qtype, a.shape[0])
            got[name][f"q8_equal_{m}"] = bool(np.array_equal(a.matmul_t(x[:m]), y_heap))
        a.activations = "float32"  # float32 activations: the pool's qmatmul
        got[name]["float_close"] = float(np.abs(a.matmul_t(x[:1]) - x[:1] @ a.numpy().T).max())
    out[where] = got
result = out
'''
    with PyodideSession(dist=pyodide_dist, threads=2, mounts={"/data": tmp_path}) as s:
        got = s.run(code, timeout=300)["result"]
    for where, g in got.items():
        assert g["kinds"] == {"a": "SharedRows", "b": "SharedRows", "c": "SharedRows", "small": "ndarray",
                              "norm": "Tensor"}, where
        assert g["heap_growth"] < 1 << 20, (where, g["heap_growth"])  # 1.1 MB of blocks went elsewhere
        assert g["layouts"] == {"a": None, "b": None, "c": [256 + 6, 16 * 34]}, (where, g["layouts"])
        for name in ("a", "c"):
            raw = np.asarray(tensors[name].data)
            h = g[name]
            assert h["bytes"] == hashlib.sha256(raw.tobytes()).hexdigest(), (where, name)
            assert h["rows"] == hashlib.sha256(raw[[5, 699, 0]].tobytes()).hexdigest(), (where, name)
            assert h["slice"] == hashlib.sha256(raw[10:20].tobytes()).hexdigest(), (where, name)
            assert h["pickled"] == "ndarray" and h["q8_equal_1"] and h["q8_equal_3"], (where, name, h)
            assert h["float_close"] < 1e-3, (where, name, h)
        for k, ids in {"a": [5, 1999, 0, 5], "b": [299], "c": [699, 3], "small": [7, 0]}.items():  # the codec's values
            assert g["qrows"][k] == hashlib.sha256(tensors[k].rows(np.array(ids)).tobytes()).hexdigest(), (where, k)


def test_the_arena_reuses_freed_ranges_and_grows_at_its_end():
    """The shared memory's allocator (pure Python, so tested here directly): first fit, freed neighbours merge,
    growth extends the last free range, and a memory that cannot grow raises MemoryError naming the sizes."""
    from ember.backends.cpu_pool import Arena
    size = [1 << 20]

    def grow(end):  # as web/pool.js's: the size after growing, or -1
        if end > 8 << 20:
            return -1
        size[0] = max(size[0], -(-end // 65536) * 65536)
        return size[0]
    arena = Arena(1000, size[0], grow)
    a, b, c = arena.alloc(100), arena.alloc(200), arena.alloc(300)
    assert a % 64 == 0 and a >= 1000 and b == a + 128 and c == b + 256
    arena.free(b)
    assert arena.alloc(150) == b  # first fit
    arena.free(a)
    arena.free(b)  # a and b merge: 384 bytes from a
    assert arena.alloc(384) == a
    big = arena.alloc(3 << 20)  # past the 1 MiB memory: grown
    assert size[0] >= big + (3 << 20) and arena.used_bytes() >= 3 << 20
    with pytest.raises(MemoryError, match="cannot grow"):
        arena.alloc(16 << 20)
    arena.free(big)
    assert arena.alloc(3 << 20) == big
