"""The CUDA backend's Python side without a GPU: FusedKernels over numpy, each kernel launch checked
against the kernel's C signature (parsed from the .cu source: argument count, pointer dtypes, int /
i64 / float scalar types, launch geometry) and then executed by a numpy emulation of what the kernel
computes. So argument marshalling, strides, fallbacks and dtype plumbing are verified here; the
kernels' own CUDA arithmetic is verified on a GPU by test_cuda_gpu.py.

`EmulatedKernels` is also registered as a device for a run of the op parity suite (see the end).
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from ember import dtypes as D
from ember.backends import cuda_fused as CF
from ember.backends import cuda_kernels as K
from ember.backends.cuda_backend import FusedKernels
from ember.quant import QTensor
from ember.ggml import types as T
from ember.ggml.codec import dequantize_rows

# ------------------------------------------------------------------ kernel signatures from the sources

_SCALAR = {"int": np.int32, "i64": np.int64, "float": np.float32}
_PTR = {"float": np.float32, "u8": np.uint8}
_IO = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def _signatures():
    """{kernel name: [(kind, numpy dtype)]} for every extern "C" kernel each macro instantiates."""
    sigs = {}
    for src in K.SOURCES:
        text = K.source(src).replace("\\\n", "\n")
        macros = dict(re.findall(r"#define (EMBER_\w+)\(SUF, \w+\)(.*?)(?=\n\n|\nEMBER_|\n#define)", text, re.S))
        for macro, suf, arg in re.findall(r"^(EMBER_\w+)\((\w+), (\w+)\)$", text, re.M):
            for name, params in re.findall(r'extern "C" __global__ void (\w+)##SUF\((.*?)\)\s*\{', macros[macro], re.S):
                out = []
                for p in params.split(","):
                    words = p.replace("const", "").replace("*", " * ").split()
                    if "*" in words:
                        out.append(("ptr", _IO[suf] if words[0] == "IO::T" else _PTR[words[0]]))
                    else:
                        out.append(("val", _SCALAR[words[0]]))
                sigs[f"{name}{suf}"] = out
    return sigs


SIGS = _signatures()


def test_signatures_parsed_for_every_kernel():
    assert {"softmax_bf16", "attention_f16", "qmatvec_q6_k", "dequant_q4_0", "rope_f32"} <= set(SIGS)
    assert SIGS["attention_f32"][5] == ("val", np.int32) and SIGS["attention_f32"][-1] == ("val", np.int64)


# ------------------------------------------------------------------ numpy emulation of each kernel

def _ld(a, suf):
    return D.bf16_bits_to_f32(a) if suf == "bf16" else a.astype(np.float32)


def _st(dst, v, suf):
    dst.reshape(-1)[:] = (D.f32_to_bf16_bits(v) if suf == "bf16" else v.astype(dst.dtype)).reshape(-1)


def _emulate(kernel, grid, block, a):
    if kernel.startswith(("qmatvec_", "dequant_")):
        return _emulate_quant(*kernel.split("_", 1), grid, a)
    name, suf = kernel.rsplit("_", 1)
    if name in ("softmax", "log_softmax", "layer_norm", "rms_norm"):
        n = int(a[-2] if name.endswith("norm") else a[-1])
        rows = a[0].size // n
        assert grid == (rows,) and block[0] % 32 == 0 and 32 <= block[0] <= 1024
        x = _ld(a[0], suf).reshape(rows, n)
        if name == "softmax":
            e = np.exp(x - x.max(-1, keepdims=True))
            return _st(a[1], e / e.sum(-1, keepdims=True), suf)
        if name == "log_softmax":
            s = x - x.max(-1, keepdims=True)
            return _st(a[1], s - np.log(np.exp(s).sum(-1, keepdims=True)), suf)
        eps = float(a[-1])
        if name == "layer_norm":
            xc = x - x.mean(-1, keepdims=True)
            y = xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * _ld(a[1], suf) + _ld(a[2], suf)
            return _st(a[3], y, suf)
        return _st(a[2], x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * _ld(a[1], suf), suf)
    if name == "rope":
        x, c, s, y, total, t, h, d = a
        assert grid == (math.ceil(int(total) / 256),)
        xv = _ld(x, suf).reshape(-1, int(t), int(h), int(d))
        x1, x2 = xv[..., : d // 2], xv[..., d // 2:]
        cc, ss = c.reshape(1, int(t), 1, -1), s.reshape(1, int(t), 1, -1)
        return _st(y, np.concatenate([x1 * cc - x2 * ss, x2 * cc + x1 * ss], -1), suf)
    if name == "attention":
        q, k, v, m, out, L, S, Dq, Dv, scale, causal, has, h2, m1, m2, ml, ms = a
        bh = q.size // (L * Dq)
        assert grid == (math.ceil(int(L) / 4), bh) and block == (128,)
        s = np.einsum("bld,bsd->bls", _ld(q, suf).reshape(bh, L, Dq) * scale, _ld(k, suf).reshape(bh, S, Dq))
        if has:  # read the mask exactly as the kernel's pointer arithmetic does (strides in elements)
            mv = np.lib.stride_tricks.as_strided(m, (bh // h2, h2, L, S), tuple(4 * int(i) for i in (m1, m2, ml, ms)))
            s = s + mv.reshape(bh, L, S)
        if causal:
            s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
        with np.errstate(invalid="ignore"):
            p = np.exp(s - s.max(-1, keepdims=True))
            o = np.einsum("bls,bsd->bld", p / p.sum(-1, keepdims=True), _ld(v, suf).reshape(bh, S, Dv))
        return _st(out, o, suf)
    raise AssertionError(f"no emulation for kernel {kernel}")


def _emulate_quant(name, qtype, grid, a):
    t = T.get(qtype)
    if name == "qmatvec":
        w, x, y, n, kk, rb, m = a
        assert grid == (math.ceil(int(n) / 4),) and int(m) <= 8
        wf = dequantize_rows(w.reshape(int(n), int(rb)), t).reshape(int(n), int(kk))
        y[...] = x.reshape(int(m), int(kk)) @ wf.T
        return
    w, out, r0, rows, kk, rb = a
    assert grid == (math.ceil(int(rows) * int(kk) / 256),)
    wr = w.reshape(-1, int(rb))[int(r0):int(r0) + int(rows)]
    out[...] = dequantize_rows(wr, t).reshape(int(rows), int(kk))


class EmulatedKernels(FusedKernels):
    """FusedKernels over numpy with every launch checked against its signature and emulated."""

    name = "cudaemu"

    def __init__(self, index=0):
        super().__init__(np, index)
        self.launches = []

    def _launch(self, src, kernel, grid, block, args):
        sig = SIGS[kernel]
        assert src in K.SOURCES and len(args) == len(sig), (kernel, len(args), len(sig))
        for i, ((kind, dt), arg) in enumerate(zip(sig, args)):
            if kind == "ptr":
                assert isinstance(arg, np.ndarray) and arg.dtype == dt, (kernel, i, type(arg), getattr(arg, "dtype", None))
                assert arg.flags.c_contiguous or arg.ndim == 4, (kernel, i, "non-contiguous buffer")
            else:
                assert type(arg) is dt, (kernel, i, type(arg), dt)
        assert all(0 < g < 2 ** 31 for g in grid) and len(grid) <= 2 and (len(grid) < 2 or grid[1] <= 65535)
        self.launches.append(kernel)
        self._run(kernel, grid, block, args)

    def _run(self, kernel, grid, block, args):
        _emulate(kernel, grid, block, args)


BE = EmulatedKernels()
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _to(a, dtype):
    return BE.from_numpy(a, D.get(dtype)) if dtype != "bfloat16" else D.f32_to_bf16_bits(a)


def _f(a):
    return D.bf16_bits_to_f32(a) if a.dtype == np.uint16 else a.astype(np.float32)


def _ref(a, dtype):  # the input as the kernel sees it (rounded to the storage dtype), in torch float32
    return torch.tensor(_f(_to(a, dtype)))


# ------------------------------------------------------------------ fused ops vs torch

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_row_kernels_match_torch(dtype):
    x, w, b = rnd(3, 5, 70), rnd(70, seed=1), rnd(70, seed=2)
    tx, tw, tb = _ref(x, dtype), _ref(w, dtype), _ref(b, dtype)
    X, W, B = _to(x, dtype), _to(w, dtype), _to(b, dtype)
    got = {"softmax": CF.softmax(BE, X, 2), "softmax_dim1": CF.softmax(BE, X, 1), "log_softmax": CF.log_softmax(BE, X, 2),
           "layer_norm": CF.layer_norm(BE, X, W, B, 1e-5), "layer_norm_plain": CF.layer_norm(BE, X, None, None, 1e-5),
           "rms_norm": CF.rms_norm(BE, X, W, 1e-6), "rms_norm_plain": CF.rms_norm(BE, X, None, 1e-6)}
    F = torch.nn.functional
    want = {"softmax": torch.softmax(tx, 2), "softmax_dim1": torch.softmax(tx, 1), "log_softmax": torch.log_softmax(tx, 2),
            "layer_norm": F.layer_norm(tx, (70,), tw, tb), "layer_norm_plain": F.layer_norm(tx, (70,)),
            "rms_norm": F.rms_norm(tx, (70,), tw, eps=1e-6), "rms_norm_plain": F.rms_norm(tx, (70,), eps=1e-6)}
    for key in want:
        assert got[key].dtype == X.dtype and got[key].shape == X.shape, key
        np.testing.assert_allclose(_f(got[key]), want[key].numpy(), atol=TOL[dtype] * 4, rtol=TOL[dtype], err_msg=key)
    assert {"softmax_" + {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]} <= set(BE.launches)


@pytest.mark.parametrize("case", ["none", "causal", "causal_long_keys", "mask_2d", "mask_heads", "mask_batch",
                                  "gqa_stacked", "float16", "bfloat16", "head_dim_300"])
def test_attention_kernel_matches_torch(case):
    dtype = case if case in ("float16", "bfloat16") else "float32"
    B, H, L, S, Dh = 2, 3, 5, 37, 8
    if case == "head_dim_300":
        Dh = 300  # over the kernel's 256: the composed fallback
    if case == "causal":
        S = L
    q, k, v = rnd(B, H, L, Dh), rnd(B, H, S, Dh, seed=1), rnd(B, H, S, 6, seed=2)
    mask = {"mask_2d": (L, S), "mask_heads": (H, L, S), "mask_batch": (B, 1, L, S)}.get(case)
    m = rnd(*mask, seed=3) if mask else None
    if case == "gqa_stacked":  # llama's layout: kv heads shared by stacked query groups, mask (1, 1, L, S)
        q, m = rnd(B, H, 2 * L, Dh), rnd(1, 1, 2 * L, S, seed=3)
    causal = case.startswith("causal")
    n0 = len(BE.launches)
    got = CF.attention(BE, _to(q, dtype), _to(k, dtype), _to(v, dtype), None if m is None else _to(m, dtype),
                       1 / math.sqrt(Dh), causal)
    want = torch.nn.functional.scaled_dot_product_attention(
        _ref(q, dtype), _ref(k, dtype), _ref(v, dtype), attn_mask=None if m is None else _ref(m, dtype), is_causal=causal)
    np.testing.assert_allclose(_f(got), want.numpy(), atol=TOL[dtype] * 4, rtol=TOL[dtype])
    used_kernel = any(n.startswith("attention_") for n in BE.launches[n0:])
    assert used_kernel == (case != "head_dim_300")


def test_attention_mask_with_more_batch_dims_broadcasts_the_output():
    q, k, v, m = rnd(4, 8), rnd(6, 8, seed=1), rnd(6, 8, seed=2), rnd(2, 1, 4, 6, seed=3)
    got = CF.attention(BE, q, k, v, m, 0.25, False)
    tq, tk, tv, tm = (torch.tensor(a) for a in (q, k, v, m))  # torch's sdpa will not broadcast here; the math does
    want = torch.softmax(tq @ tk.T * 0.25 + tm, -1) @ tv
    assert got.shape == (2, 1, 4, 8) == tuple(want.shape)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-5)


def test_attention_all_masked_row_is_nan_as_composed():
    q, k, v = rnd(1, 2, 4), rnd(1, 3, 4, seed=1), rnd(1, 3, 4, seed=2)
    m = np.zeros((2, 3), np.float32)
    m[1] = -np.inf
    got = CF.attention(BE, q, k, v, m, 0.5, False)
    assert np.isnan(got[0, 1]).all() and np.isfinite(got[0, 0]).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rope_kernel_matches_rotate_half(dtype):
    B, Tn, H, Dh = 2, 6, 3, 8
    x = rnd(B, Tn, H, Dh)
    ang = np.outer(np.arange(Tn), 1.0 / 10000 ** (np.arange(0, Dh, 2) / Dh)).astype(np.float32)  # (T, D/2)
    got = _f(CF.rope(BE, _to(x, dtype), np.cos(ang), np.sin(ang)))
    tx = _ref(x, dtype)
    cos = torch.tensor(np.cos(np.concatenate([ang, ang], -1)))[None, :, None]   # (1, T, 1, D)
    sin = torch.tensor(np.sin(np.concatenate([ang, ang], -1)))[None, :, None]
    rot = torch.cat([-tx[..., Dh // 2:], tx[..., : Dh // 2]], -1)               # HF rotate_half
    np.testing.assert_allclose(got, (tx * cos + rot * sin).numpy(), atol=TOL[dtype] * 4, rtol=TOL[dtype])
    with pytest.raises(ValueError, match="ember: rope needs"):
        CF.rope(BE, x, np.cos(ang)[:, :3], np.sin(ang))


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4_k", "q6_k", "q5_0"])
@pytest.mark.parametrize("m", [1, 5, 40])
def test_qmatmul_matches_cpu_qtensor(qtype, m):
    K_in = 512
    w = QTensor.quantize(rnd(48, K_in, seed=7), qtype)
    x = rnd(m, K_in, seed=8)
    got = CF.qmatmul(BE, x.reshape(1, m, K_in), w.data, w.ggml_type, w.shape)
    assert got.shape == (1, m, 48) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], w.matmul_t(x), rtol=1e-5, atol=1e-4)
    if qtype != "q5_0":  # the four kernel types dequantize in a kernel; others on the host, once
        kind = "qmatvec_" if m <= 32 else "dequant_"
        assert BE.launches[-1] == kind + qtype
    with pytest.raises(ValueError, match=r"ember: quantized matmul: input of shape \(3, 7\)"):
        CF.qmatmul(BE, np.zeros((3, 7), np.float32), w.data, w.ggml_type, w.shape)


def test_quantized_weight_uploaded_once():
    w = QTensor.quantize(rnd(8, 64, seed=9), "q8_0")
    CF.qmatmul(BE, rnd(1, 64), w.data, w.ggml_type, w.shape)
    dev = CF._device_weight(BE, w.data, w.ggml_type, w.shape, False)
    CF.qmatmul(BE, rnd(2, 64), w.data, w.ggml_type, w.shape)
    assert CF._device_weight(BE, w.data, w.ggml_type, w.shape, False) is dev


# ------------------------------------------------------------------ the op parity suite on the emulated device

_SUITE_SLOW = ["tests/test_nn_functional.py", "tests/test_nn_modules.py", "tests/test_ops_elementwise.py", "tests/test_ops_indexing.py", "tests/test_ops_reduce_movement.py"]
_RUN = ("import importlib, sys, pytest; d = importlib.import_module('ember.device'); "
        "d.register_backend('cudaemu', 'test_cuda_emulated', 'EmulatedKernels'); sys.exit(pytest.main(sys.argv[1:]))")


def _suite(files, select=()):
    """Run the parity files on cpu and cudaemu; a test may fail on cudaemu only where it fails on cpu too
    (a broken test or reference is not this backend's fault; a device-only failure is)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, EMBER_TEST_DEVICES="cpu,cudaemu",
               PYTHONPATH=os.pathsep.join([os.path.join(root, "tests"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _RUN, "-q", "-rA", "-p", "no:cacheprovider", *select, *files],
                       cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    # 1: some test failed, judged below; anything else (2 collection error, 5 no tests ran, ...) fails here
    assert r.returncode in (0, 1), f"exit {r.returncode}\n" + r.stdout[-4000:] + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR ")]
    assert not errors, "errors (setup, teardown or collection) in the parity run:\n" + "\n".join(errors[:20])
    failed = {line.split()[1] for line in lines if line.startswith("FAILED ")}
    on_emu = {f.replace("[cudaemu", "[DEV") for f in failed if "[cudaemu" in f}
    on_cpu = {f.replace("[cpu", "[DEV") for f in failed if "[cpu" in f}
    assert on_emu <= on_cpu, f"fail on the emulated cuda backend only: {sorted(on_emu - on_cpu)}\n{r.stdout[-3000:]}"
    passed_emu = [line for line in lines if line.startswith("PASSED ") and "[cudaemu" in line]
    assert passed_emu, "no test ran on the emulated cuda backend:\n" + r.stdout[-2000:]
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]


def test_fused_op_parity_on_emulated_cuda_backend():
    _suite(["tests/test_nn_functional.py"], ("-k", "softmax or norm or attention"))


@pytest.mark.slow
def test_full_op_parity_suite_on_emulated_cuda_backend():
    _suite(_SUITE_SLOW)


# ------------------------------------------------------------------ qmatmul through the tensor layer's dispatch

@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k"])
@pytest.mark.parametrize("m", [1, 40])
def test_qtensor_matmul_fused_on_a_device_with_qmatmul_composed_on_cpu(qtype, m):
    import ember
    ember.register_backend("cudaemu", __name__, "EmulatedKernels")
    w = QTensor.quantize(rnd(48, 256, seed=11), qtype)
    x = rnd(2, m, 256, seed=12)
    assert getattr(ember.device("cpu").backend, "qmatmul", None) is None
    composed = w.matmul_t(ember.tensor(x))                          # cpu: no fused op, on the host
    xd = ember.tensor(x, device="cudaemu")
    be = xd.device.backend
    n0 = len(be.launches)
    fused = w.matmul_t(xd)                                          # (2, m, 48) through CudaBackend's qmatmul code
    assert be.launches[n0:] and all(k == ("qmatvec_" if 2 * m <= 32 else "dequant_") + qtype for k in be.launches[n0:])
    assert str(fused.device) == "cudaemu" and fused.dtype == ember.float32 and fused.shape == (2, m, 48)
    np.testing.assert_allclose(fused.numpy(), composed.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(composed.numpy(), x @ w.numpy().T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rotary_embedding_fused_rope_matches_composed(dtype):
    import ember
    from ember.nn import functional as F
    ember.register_backend("cudaemu", __name__, "EmulatedKernels")
    B, Tn, H, Dh = 2, 6, 3, 8
    x = rnd(B, Tn, H, Dh)
    ang = np.outer(np.arange(Tn), 1.0 / 10000 ** (np.arange(0, Dh, 2) / Dh)).astype(np.float32)  # (T, D/2)
    cos, sin = np.cos(ang), np.sin(ang)
    composed = F.rotary_embedding(ember.tensor(x, dtype=dtype), ember.tensor(cos), ember.tensor(sin))  # cpu: no rope
    be = ember.device("cudaemu").backend
    n0 = len(be.launches)
    fused = F.rotary_embedding(ember.tensor(x, dtype=dtype, device="cudaemu"), ember.tensor(cos, device="cudaemu"),
                               ember.tensor(sin, device="cudaemu"))
    assert be.launches[n0:] == ["rope_" + {"float32": "f32", "bfloat16": "bf16"}[dtype]]
    assert fused.dtype == composed.dtype == D.get(dtype) and fused.shape == (B, Tn, H, Dh)
    tx = _ref(x, dtype)
    c2, s2 = (torch.tensor(np.concatenate([a, a], -1))[None, :, None] for a in (cos, sin))     # (1, T, 1, D)
    want = (tx * c2 + torch.cat([-tx[..., Dh // 2:], tx[..., : Dh // 2]], -1) * s2).numpy()  # HF rotate_half
    for got in (fused, composed):
        np.testing.assert_allclose(got.float().numpy(), want, atol=TOL[dtype] * 4, rtol=TOL[dtype])
    xg = ember.tensor(x, device="cudaemu", requires_grad=True)      # recording a gradient: composed, differentiable
    n0 = len(be.launches)
    F.rotary_embedding(xg, ember.tensor(cos, device="cudaemu"), ember.tensor(sin, device="cudaemu")).sum().backward()
    assert not any(k.startswith("rope_") for k in be.launches[n0:]) and xg.grad.shape == xg.shape
