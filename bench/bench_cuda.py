"""CUDA backend benchmarks: cuBLAS matmul TFLOP/s (f32, f32+TF32, f16, bf16), fused kernels vs the
same op composed from CuPy primitives (softmax, flash-style attention), quantized matvec (Q4_0,
Q4_K) bandwidth, and Llama decode tokens/s on cuda vs cpu. Skips, saying why, without a GPU.

    python bench/bench_cuda.py            # sizes for a datacenter GPU; --small for a quick look
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ember.backends import cuda_fused as CF


def timed(fn, sync, warmup=2, repeat=10):
    """Best wall time of fn() in seconds, the device synchronized around each run."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def bench_matmul(be, C, n):
    import ember
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    rows = []
    for label, dtype, tf32 in (("f32", ember.float32, False), ("f32+tf32", ember.float32, True),
                               ("f16", ember.float16, False), ("bf16", ember.bfloat16, False)):
        x, y = ember.tensor(a, dtype=dtype, device="cuda"), ember.tensor(b, dtype=dtype, device="cuda")
        C.allow_tf32 = tf32
        try:
            s = timed(lambda: x @ y, be.synchronize)
        finally:
            C.allow_tf32 = False
        rows.append((f"matmul {n}^3 {label}", f"{2 * n ** 3 / s / 1e12:.1f} TFLOP/s"))
    return rows


def bench_fused(be, small):
    import ember
    from ember.backends import array_module_fused as AF  # the CuPy-written forms the CUDA backend falls back to
    rng = np.random.default_rng(1)
    rows = []
    x = be.from_numpy(rng.standard_normal((256, 4096) if small else (4096, 32000)).astype(np.float32), ember.float32)
    fused = timed(lambda: CF.softmax(be, x, 1), be.synchronize)
    composed = timed(lambda: AF.softmax(be, x, 1), be.synchronize)
    rows.append((f"softmax {tuple(x.shape)} f32", f"fused {fused * 1e3:.2f} ms, composed {composed * 1e3:.2f} ms "
                                                  f"({composed / fused:.1f}x)"))
    L = 256 if small else 4096
    q, k, v = (be.from_numpy(rng.standard_normal((1, 32, L, 128)).astype(np.float32), ember.float16) for _ in range(3))
    scale = 128 ** -0.5
    fused = timed(lambda: CF.attention(be, q, k, v, None, scale, True), be.synchronize, repeat=3)
    composed = timed(lambda: AF.attention(be, q, k, v, None, scale, True), be.synchronize, repeat=3)
    rows.append((f"causal attention (1, 32, {L}, 128) f16", f"fused {fused * 1e3:.2f} ms, composed "
                                                             f"{composed * 1e3:.2f} ms ({composed / fused:.1f}x)"))
    return rows


def bench_qmatmul(be, small):
    import ember
    from ember.quant import QTensor
    n = 1024 if small else 4096
    w = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
    x = be.from_numpy(np.ones((1, n), np.float32), ember.float32)
    rows = []
    for qt in ("q4_0", "q4_k"):
        q = QTensor.quantize(w, qt)
        s = timed(lambda: CF.qmatmul(be, x, q.data, q.ggml_type, q.shape), be.synchronize)
        rows.append((f"qmatvec {n}x{n} {qt}", f"{s * 1e6:.0f} us, {q.nbytes / s / 1e9:.0f} GB/s of weights"))
    return rows


def bench_llama(small):
    import ember
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    c = LlamaConfig(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, hidden_dim=768, vocab_size=4096, max_seq_len=256) \
        if small else LlamaConfig(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden_dim=5632,
                                  vocab_size=32000, max_seq_len=512)  # TinyLlama-1.1B's shape, random weights
    ember.manual_seed(0)
    model = Llama(c)
    rows = []
    for dev in ("cuda", "cpu"):
        m = model.to(dev)
        with ember.no_grad():
            list(generate(m, [1, 2, 3], max_new_tokens=4, params=SamplingParams(temperature=0)))  # warm up
            t = time.perf_counter()
            toks = list(generate(m, [1, 2, 3], max_new_tokens=32, params=SamplingParams(temperature=0)))
            ember.device(dev).backend.synchronize()
            rows.append((f"llama {c.dim}d x {c.n_layers}L greedy decode on {dev}",
                         f"{len(toks) / (time.perf_counter() - t):.1f} tok/s"))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="small sizes (seconds, any GPU)")
    args = p.parse_args(argv)
    from ember.backends import cuda_backend as C
    if not C.is_available():
        reason = "CuPy is not installed (pip install cupy-cuda12x)" if C.cupy is None else "no CUDA GPU found"
        print(f"bench_cuda: skipped: {reason}")
        return 0
    import ember
    be = ember.device("cuda").backend
    print(f"device: {C.cupy.cuda.runtime.getDeviceProperties(be.index)['name'].decode()}  cupy {C.cupy.__version__}")
    rows = bench_matmul(be, C, 1024 if args.small else 8192) + bench_fused(be, args.small) + \
        bench_qmatmul(be, args.small) + bench_llama(args.small)
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
