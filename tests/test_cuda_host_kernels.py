"""The CUDA kernels' own C++ run on the CPU: rows.cu, attention.cu and quant.cu are compiled by g++
as host code against a small shim (one std::thread per CUDA thread of a block, blocks one after another,
__shared__ as static storage, __syncthreads / __syncwarp as barriers, warp shuffles through an
exchange buffer), then launched by FusedKernels over numpy exactly as CudaBackend launches them on
a GPU. So the kernels' indexing, block reductions, online softmax and dtype conversions are checked
against torch without a GPU; what stays unverified here is only GPU-specific behaviour (PTX
conversions, real warp scheduling, memory coalescing and speed).
"""
from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from ember import dtypes as D
from ember.backends import cuda_fused as CF
from ember.backends import cuda_kernels as K
from ember.quant import QTensor
from test_cuda_emulated import SIGS, EmulatedKernels

GXX = shutil.which("g++") or shutil.which("c++")

_SHIM = r"""
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
using std::min;
struct Dim { unsigned x, y, z; };
static thread_local Dim threadIdx, blockIdx;
static Dim blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __shared__ static

struct Barrier {
    std::mutex m; std::condition_variable cv; int n = 0, count = 0, gen = 0;
    void wait() {
        std::unique_lock<std::mutex> l(m);
        int g = gen;
        if (++count == n) { count = 0; ++gen; cv.notify_all(); }
        else cv.wait(l, [&] { return g != gen; });
    }
};
static Barrier g_block, g_warp[32];
static float g_xchg[32][32];
static void __syncthreads() { g_block.wait(); }
static void __syncwarp(unsigned = 0xFFFFFFFFu) { g_warp[threadIdx.x >> 5].wait(); }
static float shuffle(float v, int src) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_xchg[w][l] = v; __syncwarp();
    const float r = g_xchg[w][src & 31]; __syncwarp();
    return r;
}
static float __shfl_xor_sync(unsigned, float v, int o) { return shuffle(v, (threadIdx.x & 31) ^ o); }
static float __shfl_sync(unsigned, float v, int src) { return shuffle(v, src); }

static void run_grid(int gx, int gy, int bx, const std::function<void()>& body) {
    blockDim = {(unsigned)bx, 1, 1}; gridDim = {(unsigned)gx, (unsigned)gy, 1};
    g_block.n = bx;
    for (auto& w : g_warp) w.n = 32;
    std::vector<std::thread> ts;  // one thread per CUDA thread, reused for every block in turn
    for (int t = 0; t < bx; ++t)
        ts.emplace_back([=, &body] {
            threadIdx = {(unsigned)t, 0, 0};
            for (int by = 0; by < gy; ++by)
                for (int b = 0; b < gx; ++b) {
                    blockIdx = {(unsigned)b, (unsigned)by, 0};
                    body();
                    g_block.wait();  // the block's shared memory is reused by the next one
                }
        });
    for (auto& t : ts) t.join();
}
"""

_CONVERT = r"""
extern "C" void host_convert(const float* f, u16* h, u16* b, long n) {
    for (long i = 0; i < n; ++i) { h[i] = f32_to_f16_bits(f[i]); b[i] = f32_to_bf16_bits(f[i]); }
}
"""
_CTYPE = {"f32": "float", "f16": "u16", "bf16": "u16"}


def _trampolines(src):
    """extern "C" launch_<kernel>(gx, gy, bx, params...) for every kernel instantiated in `src`."""
    text = K.source(src).replace("\\\n", "\n")
    macros = dict(re.findall(r"#define (EMBER_\w+)\(SUF, \w+\)(.*?)(?=\n\n|\nEMBER_|\n#define)", text, re.S))
    out = []
    for macro, suf, _ in re.findall(r"^(EMBER_\w+)\((\w+), (\w+)\)$", text, re.M):
        for name, params in re.findall(r'extern "C" __global__ void (\w+)##SUF\((.*?)\)\s*\{', macros[macro], re.S):
            ps = [" ".join(p.replace("IO::T", _CTYPE.get(suf, "?")).split()) for p in params.split(",")]
            names = [p.replace("*", " ").split()[-1] for p in ps]
            out.append(f'extern "C" void launch_{name}{suf}(int gx, int gy, int bx, {", ".join(ps)}) '
                       f'{{ run_grid(gx, gy, bx, [&] {{ {name}{suf}({", ".join(names)}); }}); }}')
    return "\n".join(out)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if GXX is None:
        pytest.skip("no C++ compiler (g++): the kernels cannot be built for the host")
    d = tmp_path_factory.mktemp("hostk")
    objs = []
    for src in K.SOURCES:  # one translation unit per .cu, as NVRTC compiles them
        cpp = d / (src + ".cpp")
        cpp.write_text(_SHIM + f'#include "{src}"\n' + _trampolines(src) + (_CONVERT if src == "rows.cu" else ""))
        obj = d / (src + ".o")
        r = subprocess.run([GXX, "-std=c++17", "-O1", "-fPIC", "-w", "-I", K.KERNEL_DIR, "-c", str(cpp), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        objs.append(str(obj))
    so = d / "kernels.so"
    r = subprocess.run([GXX, "-shared", "-pthread", *objs, "-o", str(so)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return ctypes.CDLL(str(so))


_CT = {np.int32: ctypes.c_int32, np.int64: ctypes.c_int64, np.float32: ctypes.c_float}


class HostKernels(EmulatedKernels):
    """Launches go to the kernels compiled for the host instead of the numpy emulation."""

    name = "cudahost"

    def __init__(self, lib):
        super().__init__()
        self.lib = lib

    def _run(self, kernel, grid, block, args):
        fn = getattr(self.lib, f"launch_{kernel}")
        sig = SIGS[kernel]
        fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p if k == "ptr" else _CT[dt] for k, dt in sig]
        fn.restype = None
        gx, gy = grid[0], grid[1] if len(grid) > 1 else 1
        fn(gx, gy, block[0], *[a.ctypes.data if k == "ptr" else a for (k, _), a in zip(sig, args)])


TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
SUF = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _to(a, dtype):
    return D.f32_to_bf16_bits(a) if dtype == "bfloat16" else a.astype(D.get(dtype).np)


def _f(a):
    return D.bf16_bits_to_f32(a) if a.dtype == np.uint16 else a.astype(np.float32)


def _ref(a, dtype):
    return torch.tensor(_f(_to(a, dtype)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_kernels_on_host_match_torch(lib, dtype):
    be = HostKernels(lib)
    x, w, b = rnd(2, 3, 150) * 3, rnd(150, seed=1), rnd(150, seed=2)  # 150: a partial last warp
    X, W, B = _to(x, dtype), _to(w, dtype), _to(b, dtype)
    tx, tw, tb = _ref(x, dtype), _ref(w, dtype), _ref(b, dtype)
    s = rnd(4, 3, 5, seed=3)  # softmax over a middle axis (moved last and back)
    tf = torch.nn.functional
    cases = {"softmax": (CF.softmax(be, X, 2), torch.softmax(tx, 2)),
             "softmax_dim1": (CF.softmax(be, _to(s, dtype), 1), torch.softmax(_ref(s, dtype), 1)),
             "log_softmax": (CF.log_softmax(be, X, 2), torch.log_softmax(tx, 2)),
             "layer_norm": (CF.layer_norm(be, X, W, B, 1e-5), tf.layer_norm(tx, (150,), tw, tb)),
             "rms_norm": (CF.rms_norm(be, X, W, 1e-6), tf.rms_norm(tx, (150,), tw, eps=1e-6))}
    for key, (got, want) in cases.items():
        assert got.dtype == X.dtype and got.shape == tuple(want.shape), key
        np.testing.assert_allclose(_f(got), want.numpy(), atol=4 * TOL[dtype], rtol=TOL[dtype], err_msg=key)
    assert {f"softmax_{SUF[dtype]}", f"layer_norm_{SUF[dtype]}", f"rms_norm_{SUF[dtype]}"} <= set(be.launches)


def test_row_kernel_with_many_threads_and_extremes(lib):
    be = HostKernels(lib)
    x = rnd(2, 2000) * 30  # 1024 threads per row, exp of large negatives
    x[1, :5] = -np.inf
    got = CF.softmax(be, x, 1)
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(x), 1).numpy(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", ["plain", "causal", "causal_wide", "mask_broadcast", "mask_heads", "gqa",
                                  "float16", "bfloat16", "masked_row", "long_keys"])
def test_attention_kernel_on_host_matches_torch(lib, case):
    be = HostKernels(lib)
    dtype = case if case in ("float16", "bfloat16") else "float32"
    B, H, L, S, Dh, Dv = 1, 2, 5, 70, 40, 36  # S over two key tiles, Dh not a multiple of 32
    if case == "causal":
        S = L
    if case == "long_keys":
        S = 300
    q, k, v = rnd(B, H, L, Dh), rnd(B, H, S, Dh, seed=1), rnd(B, H, S, Dv, seed=2)
    m = None
    if case == "mask_broadcast":
        m = rnd(1, 1, L, S, seed=3)
    elif case == "mask_heads":
        m = rnd(H, L, S, seed=3)
    elif case == "gqa":
        q, m = rnd(B, H, 3 * L, Dh), rnd(1, 1, 3 * L, S, seed=3)
    elif case == "masked_row":
        m = np.zeros((L, S), np.float32)
        m[2] = -np.inf
        m[3, 40:] = -np.inf  # a whole key tile masked for one row
    causal = case.startswith("causal")
    got = _f(CF.attention(be, _to(q, dtype), _to(k, dtype), _to(v, dtype), None if m is None else _to(m, dtype),
                          1 / math.sqrt(Dh), causal))
    want = torch.nn.functional.scaled_dot_product_attention(_ref(q, dtype), _ref(k, dtype), _ref(v, dtype),
                                                            attn_mask=None if m is None else _ref(m, dtype),
                                                            is_causal=causal).numpy()
    assert be.launches[-1] == f"attention_{SUF[dtype]}"
    if case == "masked_row":
        assert np.isnan(got[:, :, 2]).all()  # every key masked: NaN, as the composed path
        got, want = np.delete(got, 2, axis=2), np.delete(want, 2, axis=2)
    np.testing.assert_allclose(got, want, atol=4 * TOL[dtype], rtol=TOL[dtype])


def test_rope_kernel_on_host(lib):
    be = HostKernels(lib)
    Bn, T, H, Dh = 2, 5, 3, 12
    x = rnd(Bn, T, H, Dh)
    ang = np.outer(np.arange(T), 1.0 / 10000 ** (np.arange(0, Dh, 2) / Dh)).astype(np.float32)
    got = CF.rope(be, x, np.cos(ang), np.sin(ang))
    cos, sin = np.cos(np.concatenate([ang, ang], -1))[None, :, None], np.sin(np.concatenate([ang, ang], -1))[None, :, None]
    rot = np.concatenate([-x[..., Dh // 2:], x[..., : Dh // 2]], -1)
    np.testing.assert_allclose(got, x * cos + rot * sin, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("m", [3, 40])
def test_quant_kernels_on_host_match_cpu_qtensor(lib, qtype, m):
    be = HostKernels(lib)
    w = QTensor.quantize(rnd(20, 512, seed=7), qtype)
    x = rnd(m, 512, seed=8)
    got = CF.qmatmul(be, x, w.data, w.ggml_type, w.shape)
    assert be.launches[-1] == ("qmatvec_" if m <= 32 else "dequant_") + qtype
    np.testing.assert_allclose(got, w.matmul_t(x), rtol=1e-5, atol=1e-4)


def test_float_conversions_match_numpy_bit_for_bit(lib):
    """The host paths of common.cuh's f32 -> f16 / bf16 stores (the GPU uses cvt.rn, the same rounding)."""
    rng = np.random.default_rng(10)
    bits = np.concatenate([rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0, 0x80000000, 0x33000000, 0x33000001,
                                     0x387FE000, 0x477FF000, 0x477FEFFF, 0x38800000], np.uint32)])
    f = bits.view(np.float32)
    n = len(f)
    h = np.empty(n, np.uint16)
    b = np.empty(n, np.uint16)
    lib.host_convert(f.ctypes.data_as(ctypes.c_void_p), h.ctypes.data_as(ctypes.c_void_p),
                     b.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(n))
    with np.errstate(over="ignore"):
        want_h = f.astype(np.float16).view(np.uint16)
    nan = np.isnan(f)
    np.testing.assert_array_equal(h[~nan], want_h[~nan])
    assert np.isnan(h[nan].view(np.float16)).all()
    np.testing.assert_array_equal(b, D.f32_to_bf16_bits(f))
