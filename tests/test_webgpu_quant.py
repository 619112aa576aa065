"""WebGPU quantized matmul (webgpu/quant.wgsl): GGML blocks decoded on the GPU against ember's host
dequantize-then-matmul, for every quant type, the decode (qmatvec) and prefill (dequantized slab +
tiled matmul) shapes and odd sizes; the weight is uploaded once; a quantized Llama, loaded from a
GGUF file, decodes the same greedy tokens on webgpu as on cpu."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
from ember.device import device_status
from ember.quant import QLinear, QTensor, load_quantized, quantize, quantized_state_dict

_OK, _WHY = device_status("webgpu")
if not _OK:  # under CI=true (webgpu pinned) this skip fails (tests/expected_skips.py)
    pytest.skip(f"webgpu unavailable: {_WHY}", allow_module_level=True)
BE = ember.device("webgpu").backend

# Q4_0/Q4_1/Q8_0/Q4_K/Q6_K decode in WGSL; Q5_K/Q5_1 take the host-dequantized float32 path
KERNEL_TYPES = ["q4_0", "q4_1", "q8_0", "q4_k", "q6_k"]


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check(q, x, lead=None):
    """q.matmul_t on webgpu vs x @ dequantize(q).T computed on the host (float64)."""
    want = x.astype(np.float64) @ q.numpy().astype(np.float64).T
    with ember.no_grad():
        got = q.matmul_t(ember.tensor(x, device="webgpu"))
    assert got.device.type == "webgpu" and got.shape == want.shape and got.dtype == ember.float32
    g = got.numpy()
    np.testing.assert_allclose(g, want, atol=2e-5 * max(1.0, np.abs(want).max()), rtol=1e-4)


@pytest.mark.parametrize("qtype", KERNEL_TYPES + ["q5_k", "q5_1"])
@pytest.mark.parametrize("m", [1, 3, 9, 40])  # 1 and 3: one qmatvec; 9: two; 40: the prefill path
def test_qmatmul_matches_host_dequantize(qtype, m):
    block = 256 if qtype.endswith("k") else 32
    k = 3 * block if block == 32 else 2 * block  # odd block counts per row: unaligned block starts
    for n in (7, 33):
        q = QTensor.quantize(_rnd(n, k, seed=n), qtype)
        _check(q, _rnd(m, k, seed=m))


@pytest.mark.parametrize("qtype", KERNEL_TYPES)
def test_qmatmul_batched_strided_and_single_block(qtype):
    block = 256 if qtype.endswith("k") else 32
    q = QTensor.quantize(_rnd(5, block, seed=1), qtype)           # one block per row
    _check(q, _rnd(2, 3, block, seed=2))                           # (2, 3, K): leading dims kept
    big = QTensor.quantize(_rnd(70000, block, seed=3) * 0.1, qtype)  # > 65535 columns: a 2-D grid
    _check(big, _rnd(1, block, seed=4))
    # a non-contiguous input (a transposed view) and a row slice starting mid-buffer
    xt = _rnd(block, 4, seed=5)
    with ember.no_grad():
        xv = ember.tensor(xt, device="webgpu").T                   # (4, K), strided
        got = q.matmul_t(xv).numpy()
        xs = ember.tensor(_rnd(6, block, seed=6), device="webgpu")[2:4]
        got_s = q.matmul_t(xs).numpy()
    np.testing.assert_allclose(got, xt.T @ q.numpy().T, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(got_s, _rnd(6, block, seed=6)[2:4] @ q.numpy().T, atol=1e-4, rtol=1e-4)


def test_qmatmul_extreme_scales_and_half_input():
    """Blocks holding zeros, tiny and large values (f16 scales near their range), and a float16 input."""
    w = _rnd(9, 64, seed=7)
    w[0] = 0.0
    w[1] *= 1e-4
    w[2] *= 3e3
    for qtype in ("q8_0", "q4_0"):
        q = QTensor.quantize(w, qtype)
        _check(q, _rnd(2, 64, seed=8))
        x16 = _rnd(1, 64, seed=9).astype(np.float16)
        with ember.no_grad():
            got = q.matmul_t(ember.tensor(x16, device="webgpu")).numpy()
        want = x16.astype(np.float64) @ q.numpy().T
        np.testing.assert_allclose(got, want, atol=1e-3 * np.abs(want).max(), rtol=1e-4)


def test_weight_uploaded_once_and_released():
    q = QTensor.quantize(_rnd(16, 64, seed=10), "q4_0")
    x = ember.tensor(_rnd(1, 64, seed=11), device="webgpu")
    with ember.no_grad():
        q.matmul_t(x)
        before = BE.counters()
        for _ in range(3):
            q.matmul_t(x)
        after = BE.counters()
    assert after["bytes_uploaded"] == before["bytes_uploaded"]   # blocks stay cached on the GPU
    assert after["readbacks"] == before["readbacks"]
    assert after["dispatches"] == before["dispatches"] + 3       # one qmatvec per decode call
    key = (id(q.data), False)
    assert key in BE._qweights
    del q
    gc.collect()
    assert key not in BE._qweights                              # dropped with its host weight


def test_qmatmul_rejects_mismatched_input():
    q = QTensor.quantize(_rnd(4, 64), "q8_0")
    with ember.no_grad(), pytest.raises(ValueError, match="last dim must be 64"):
        q.matmul_t(ember.tensor(_rnd(1, 32), device="webgpu"))


# ------------------------------------------------------------------ a quantized Llama, cpu vs webgpu

def _tiny_llama(seed=0):
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    c = LlamaConfig(vocab_size=320, dim=256, hidden_dim=512, n_layers=2, n_heads=4, n_kv_heads=2,
                    max_seq_len=64, tie_embeddings=False)
    ember.manual_seed(seed)
    model = Llama(c)
    rng = np.random.default_rng(seed)
    with ember.no_grad():  # weights wider than the default init so the logits carry signal
        for name, p in model.named_parameters():
            scale = 0.08 if p.ndim == 2 else 0.2
            p.copy_(ember.tensor(rng.standard_normal(p.shape).astype(np.float32) * scale + (p.ndim == 1)))
    return model.eval().requires_grad_(False)


def _greedy(model, prompt, n):
    from ember.models.common.generate import SamplingParams, generate
    return list(generate(model, prompt, n, SamplingParams(temperature=0.0)))


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k", "q6_k"])
def test_quantized_llama_from_gguf_same_greedy_tokens(tmp_path, qtype):
    """Write the quantized model as GGUF, load it into a fresh model (weights stay blocks), decode on both devices."""
    src = quantize(_tiny_llama(), qtype)
    path = tmp_path / f"tiny-{qtype}.gguf"
    ember.io.gguf.save(quantized_state_dict(src), str(path))
    prompt = [3, 17, 42, 5, 99]
    tokens = {}
    for dev in ("cpu", "webgpu"):
        m = _tiny_llama(seed=1)                     # different float weights: the file must overwrite them
        load_quantized(m, str(path))
        assert isinstance(m.lm_head, QLinear) and m.lm_head.weight.ggml_type == qtype
        tokens[dev] = _greedy(m.to(dev), prompt, 12)
    assert len(set(tokens["cpu"])) > 2, tokens      # a degenerate model would match trivially
    assert tokens["webgpu"] == tokens["cpu"]


def test_quantized_llama_decode_reads_back_only_logits():
    """After loading, generation on webgpu reads back one thing per token, the logits; nothing is
    uploaded per token but the token id and the position's rotation (no weight, no activation)."""
    from ember.models.common.generate import SamplingParams, generate
    model = quantize(_tiny_llama(), "q4_0").to("webgpu")
    vocab = model.config.vocab_size
    hd = model.config.head_dim
    _greedy(model, [1, 2], 2)                       # warm-up: weights uploaded, pipelines compiled
    c0 = BE.counters()
    toks = list(generate(model, [3, 17, 42], 6, SamplingParams(temperature=0.0)))
    c1 = BE.counters()
    d = {k: c1[k] - c0[k] for k in c0}
    assert len(toks) == 6
    assert d["readbacks"] == len(toks) and d["bytes_read"] == len(toks) * vocab * 4, d   # the logits, once per token
    assert d["host_uploads"] == 0, d
    # per token: its id and the (head_dim, head_dim) rotation; the prompt adds its ids and causal mask
    assert d["bytes_uploaded"] < len(toks) * (hd * hd * 4 + 1024), d
