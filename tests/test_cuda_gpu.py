"""CUDA backend on a real GPU: the compiled kernels against torch (CPU) and ember's CPU reference,
cuBLAS dtypes and the TF32 switch, devices and streams. The op parity suite (test_ops_*.py,
test_nn_*.py) and the models' parity tests also run on cuda through the `device` fixture.
Without CuPy or a GPU the whole module skips, saying which is missing."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ember
import ember.nn.functional as F
from ember.backends import cuda_backend as C
from ember.backends import cuda_fused as CF
from ember.quant import QTensor

try:
    BE = ember.device("cuda").backend
except ember.DeviceError as e:
    pytest.skip(f"no CUDA GPU to run the kernels on: {e}", allow_module_level=True)

TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def gpu(a, dtype="float32"):
    return ember.tensor(a, dtype=dtype, device="cuda")


def ref(a, dtype):  # what the GPU holds, as torch float32
    return torch.tensor(ember.tensor(a, dtype=dtype).float().numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_kernels_match_torch(dtype):
    x, w, b = rnd(4, 3, 1000), rnd(1000, seed=1), rnd(1000, seed=2)
    tx, tw, tb = ref(x, dtype), ref(w, dtype), ref(b, dtype)
    with ember.no_grad():
        X, W, B = gpu(x, dtype), gpu(w, dtype), gpu(b, dtype)
        got = {"softmax": F.softmax(X, -1), "softmax_dim0": F.softmax(X, 0), "log_softmax": F.log_softmax(X, -1),
               "layer_norm": F.layer_norm(X, (1000,), W, B), "rms_norm": F.rms_norm(X, (1000,), W, eps=1e-6)}
    tf = torch.nn.functional
    want = {"softmax": torch.softmax(tx, -1), "softmax_dim0": torch.softmax(tx, 0), "log_softmax": torch.log_softmax(tx, -1),
            "layer_norm": tf.layer_norm(tx, (1000,), tw, tb), "rms_norm": tf.rms_norm(tx, (1000,), tw, eps=1e-6)}
    for k in want:
        assert got[k].dtype == X.dtype, k
        np.testing.assert_allclose(got[k].float().numpy(), want[k].numpy(), atol=4 * TOL[dtype], rtol=TOL[dtype], err_msg=k)


@pytest.mark.parametrize("case", ["plain", "causal", "mask", "long", "float16", "bfloat16"])
def test_flash_attention_matches_torch(case):
    dtype = case if case in ("float16", "bfloat16") else "float32"
    L, S = (1024, 1024) if case == "long" else (7, 45)
    q, k, v = rnd(2, 4, L, 64), rnd(2, 4, S, 64, seed=1), rnd(2, 4, S, 64, seed=2)
    m = rnd(2, 1, L, S, seed=3) if case == "mask" else None
    causal = case in ("causal", "long")
    with ember.no_grad():
        got = F.scaled_dot_product_attention(gpu(q, dtype), gpu(k, dtype), gpu(v, dtype),
                                             attn_mask=None if m is None else gpu(m, dtype), is_causal=causal)
    want = torch.nn.functional.scaled_dot_product_attention(ref(q, dtype), ref(k, dtype), ref(v, dtype),
                                                            attn_mask=None if m is None else ref(m, dtype), is_causal=causal)
    np.testing.assert_allclose(got.float().numpy(), want.numpy(), atol=4 * TOL[dtype], rtol=TOL[dtype])


def test_rope_kernel_matches_rotate_half():
    B, T, H, D = 2, 9, 4, 64
    x = rnd(B, T, H, D)
    ang = np.outer(np.arange(T), 1.0 / 10000 ** (np.arange(0, D, 2) / D)).astype(np.float32)
    got = BE.to_numpy(CF.rope(BE, BE.from_numpy(x, ember.float32), BE.from_numpy(np.cos(ang), ember.float32),
                              BE.from_numpy(np.sin(ang), ember.float32)))
    cos, sin = np.cos(np.concatenate([ang, ang], -1))[None, :, None], np.sin(np.concatenate([ang, ang], -1))[None, :, None]
    rot = np.concatenate([-x[..., D // 2:], x[..., : D // 2]], -1)
    np.testing.assert_allclose(got, x * cos + rot * sin, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("m", [1, 3, 64])
def test_quantized_matmul_kernels_match_cpu(qtype, m):
    w = QTensor.quantize(rnd(300, 512, seed=5), qtype)
    x = rnd(m, 512, seed=6)
    got = BE.to_numpy(CF.qmatmul(BE, BE.from_numpy(x, ember.float32), w.data, w.ggml_type, w.shape))
    np.testing.assert_allclose(got, w.matmul_t(x), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cublas_matmul_dtypes(dtype):
    a, b = rnd(3, 65, 130), rnd(130, 33, seed=1)
    got = (gpu(a, dtype) @ gpu(b, dtype)).float().numpy()
    want = (ref(a, dtype).double() @ ref(b, dtype).double()).numpy()
    np.testing.assert_allclose(got, want, atol=8 * TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("case", ["2d", "folded", "transposed", "batched", "batched_transposed", "strided",
                                  "broadcast"])
def test_bf16_gemm_layouts_match_torch_and_the_float32_route(case):
    """bfloat16 matmuls run as one cuBLAS bfloat16 GEMM (float32 sums) for the layouts models use, and give the
    float32 route's values to within a bfloat16 rounding; a broadcast batch keeps the float32 route."""
    from ember.backends.array_module_backend import ArrayModuleBackend
    shapes = {"2d": ((65, 130), (130, 33)), "folded": ((2, 3, 65, 130), (130, 33)),
              "transposed": ((3, 65, 130), (33, 130)), "batched": ((2, 3, 65, 130), (2, 3, 130, 33)),
              "batched_transposed": ((2, 65, 130), (2, 33, 130)), "strided": ((65, 260), (130, 33)),
              "broadcast": ((2, 3, 65, 130), (1, 3, 130, 33))}[case]
    a, b = gpu(rnd(*shapes[0]), "bfloat16"), gpu(rnd(*shapes[1], seed=1), "bfloat16")
    if case == "strided":
        a = a[:, ::2]
    if "transposed" in case:
        b = b.transpose(-1, -2)
    fast = BE._bf16_gemm(a._data, b._data)
    assert (fast is None) == (case == "broadcast")
    got = (a @ b).float().numpy()
    want = (ref(a.float().numpy(), "float32").double() @ ref(b.float().numpy(), "float32").double()).numpy()
    np.testing.assert_allclose(got, want, atol=8 * TOL["bfloat16"], rtol=TOL["bfloat16"])
    route = BE.to_numpy(ArrayModuleBackend.matmul(BE, a._data, b._data)).astype(np.uint32) << 16
    route = route.view(np.float32)
    assert np.all(np.abs(got - route) <= 2.0 ** -7 * np.abs(route) + 1e-30)


def test_tf32_only_when_allowed():
    a, b = rnd(256, 256), rnd(256, 256, seed=1)
    want = a.astype(np.float64) @ b
    exact = (gpu(a) @ gpu(b)).numpy()
    assert np.abs(exact - want).max() < 1e-4  # float32 GEMM: no 10-bit mantissa rounding
    try:
        C.allow_tf32 = True
        fast = (gpu(a) @ gpu(b)).numpy()
        np.testing.assert_allclose(fast, want, atol=5e-2)
    finally:
        C.allow_tf32 = False
    assert np.abs((gpu(a) @ gpu(b)).numpy() - want).max() < 1e-4


def test_bf16_round_trip_and_devices():
    bits = np.array([0x3F80, 0x7FC0, 0xFF80, 0x0001], np.uint16)
    t = ember.tensor(ember.tensor([1.0, float("nan"), float("-inf"), 9.18e-41], dtype=ember.bfloat16).numpy(),
                     dtype=ember.bfloat16, device="cuda")
    assert t.device == "cuda" and t.dtype is ember.bfloat16
    np.testing.assert_array_equal(BE.to_numpy(t._data), bits)
    C.synchronize()
    C.synchronize("cuda")
    assert C.memory_stats()["pool_bytes"] > 0
    n = C.device_count()
    with pytest.raises(ember.DeviceError, match=f"this machine has {n} CUDA GPU"):
        ember.zeros(1, device=f"cuda:{n}")
    if n > 1:  # a tensor on the second GPU stays there, and computes there
        y = (gpu(rnd(4)).to("cuda:1") * 2).sum()
        assert str(y.device) == "cuda:1"
        np.testing.assert_allclose(y.item(), 2 * rnd(4).sum(), rtol=1e-5)


def test_llama_decode_runs_on_cuda():
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    c = LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, hidden_dim=128, max_seq_len=64)
    ember.manual_seed(0)
    cpu = Llama(c)
    cuda = Llama(c).to("cuda")
    cuda.load_state_dict(cpu.state_dict())
    toks = ember.tensor([[3, 14, 15, 92, 65]])
    with ember.no_grad():
        want = cpu(toks).numpy()
        got = cuda(toks.to("cuda")).numpy()
    assert math.isfinite(float(np.abs(got).max()))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_bench_cuda_small_runs_and_its_fused_rows_equal_the_fallbacks():
    """bench/bench_cuda.py --small end to end (it had named a fallback that moved), and the fused kernels it times
    equal the CuPy-written forms it times them against."""
    import pathlib
    import runpy
    from ember.backends import array_module_fused as AF
    bench = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "bench" / "bench_cuda.py"))
    assert bench["main"](["--small"]) == 0
    x = BE.from_numpy(rnd(64, 1000), ember.float32)
    np.testing.assert_allclose(BE.to_numpy(CF.softmax(BE, x, 1)), BE.to_numpy(AF.softmax(BE, x, 1)), rtol=1e-5,
                               atol=1e-7)
    q, k, v = (BE.from_numpy(rnd(1, 4, 40, 64, seed=s), ember.float16) for s in (1, 2, 3))
    got = BE.to_numpy(CF.attention(BE, q, k, v, None, 0.125, True)).astype(np.float32)
    want = BE.to_numpy(AF.attention(BE, q, k, v, None, 0.125, True)).astype(np.float32)
    np.testing.assert_allclose(got, want, atol=3e-3)
