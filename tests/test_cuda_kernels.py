"""The CUDA kernel sources compile (nvcc for sm_80/sm_90, and NVRTC with the options CuPy uses), and
their GGML block decoders, built for the host by nvcc, reproduce ember.quant's dequantization bit for bit.
These run without a GPU; each skips with the missing tool named."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from ember.backends import cuda_kernels as K
from ember.quant import QTensor
from ember.ggml import types as T
from ember.ggml.codec import dequantize_rows

NVCC = shutil.which("nvcc")
need_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: CUDA sources not compiled by nvcc here")


@need_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("src", K.SOURCES)
def test_nvcc_compiles_kernel(src, arch, tmp_path):
    out = tmp_path / (src + ".ptx")
    r = subprocess.run([NVCC, "-ptx", f"-arch={arch}", "-std=c++14", "-Werror", "all-warnings",
                        "-I", K.KERNEL_DIR, os.path.join(K.KERNEL_DIR, src), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    entries = {line.split()[2].split("(")[0] for line in ptx.splitlines() if line.startswith(".visible .entry")}
    # every kernel the backend launches exists under its extern "C" name
    want = {"rows.cu": {f"{k}_{s}" for k in ("softmax", "log_softmax", "layer_norm", "rms_norm", "rope")
                        for s in ("f32", "f16", "bf16")},
            "attention.cu": {f"attention_{s}" for s in ("f32", "f16", "bf16")},
            "quant.cu": {f"{k}_{q}" for k in ("qmatvec", "dequant") for q in ("q4_0", "q8_0", "q4_k", "q6_k")}}[src]
    assert want <= entries, f"missing kernels: {sorted(want - entries)}"


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        return nvrtc
    except Exception as e:  # no CuPy, or no libnvrtc (pip install nvidia-cuda-nvrtc-cu12)
        pytest.skip(f"NVRTC unavailable ({type(e).__name__}: {e}); install cupy-cuda12x and nvidia-cuda-nvrtc-cu12")


@pytest.mark.parametrize("src", K.SOURCES)
def test_nvrtc_compiles_kernel_as_cupy_would(src):
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(K.source(src), src, (), ())
    try:
        nvrtc.compileProgram(prog, ("-std=c++14", f"-I{K.KERNEL_DIR}", "-arch=compute_80"))
    except Exception as e:
        pytest.fail(f"{src}: {e}\n{nvrtc.getProgramLog(prog)}")
    ptx = nvrtc.getPTX(prog)
    assert ".visible .entry" in (ptx.decode() if isinstance(ptx, bytes) else ptx)


# ------------------------------------------------------------------ block decoders on the host

_HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "quant.cuh"
// usage: decode TYPE_ID N_ROWS K IN OUT  (raw rows of blocks in, float32 values out)
template <int TY> void run(const std::vector<u8>& raw, float* out, long rows, int k, long row_bytes) {
    for (long r = 0; r < rows; ++r)
        for (int c = 0; c < k; ++c) out[r * k + c] = q_at<TY>(raw.data(), r, c, row_bytes);
}
int main(int argc, char** argv) {
    int ty = atoi(argv[1]); long rows = atol(argv[2]); int k = atoi(argv[3]);
    FILE* f = fopen(argv[4], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    std::vector<u8> raw(n); if (fread(raw.data(), 1, n, f) != (size_t)n) return 2; fclose(f);
    std::vector<float> out(rows * k); long rb = n / rows;
    if (ty == 2) run<2>(raw, out.data(), rows, k, rb);
    else if (ty == 8) run<8>(raw, out.data(), rows, k, rb);
    else if (ty == 12) run<12>(raw, out.data(), rows, k, rb);
    else if (ty == 14) run<14>(raw, out.data(), rows, k, rb);
    else return 3;
    FILE* o = fopen(argv[5], "wb"); fwrite(out.data(), 4, out.size(), o); fclose(o);
    return 0;
}
"""


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found: the host build of the block decoders needs it")
    d = tmp_path_factory.mktemp("qdec")
    (d / "decode.cu").write_text(_HARNESS)
    exe = d / "decode"
    r = subprocess.run([NVCC, "-O1", "-std=c++14", "-I", K.KERNEL_DIR, str(d / "decode.cu"), "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "cannot find" in r.stderr:  # host toolchain without CUDA runtime libs
        pytest.skip(f"nvcc cannot link a host program here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    return d, exe


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", "q4_k", "q6_k"])
def test_kernel_block_decoders_match_ember_quant(decoder, qtype):
    d, exe = decoder
    t = T.get(qtype)
    rng = np.random.default_rng(t.id)
    k = 2 * t.block_size
    w = rng.standard_normal((6, k)).astype(np.float32) * np.float32(3)
    w[1] *= 1e-3  # tiny scales (subnormal f16 territory for the K-quants' mins)
    raw = QTensor.quantize(w, qtype).data  # (6, row_bytes) uint8
    # plus rows of random bytes: every code path of the bit layout, with finite f16 scales
    junk = rng.integers(0, 256, size=(3, raw.shape[1]), dtype=np.uint8)
    for off in {"q4_0": (0,), "q8_0": (0,), "q4_k": (0, 2), "q6_k": (208,)}[qtype]:
        for b in range(0, raw.shape[1], t.type_size):
            junk[:, b + off + 1] &= 0x3B  # f16 high byte: exponent < 31 (no inf/NaN), |scale| < 1
    raw = np.concatenate([raw, junk])
    (d / "in.bin").write_bytes(raw.tobytes())
    r = subprocess.run([str(exe), str(t.id), str(raw.shape[0]), str(k), str(d / "in.bin"), str(d / "out.bin")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(d / "out.bin", np.float32).reshape(raw.shape[0], k)
    want = dequantize_rows(raw, t).reshape(raw.shape[0], k)
    np.testing.assert_array_equal(got, want)
