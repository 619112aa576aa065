"""The native kernels' threads (cpu_kernels/parallel.h on threads.c): the fused decode step's matvecs (float32 rows,
float32 input-major and llama.cpp-style quantized) and its attention split between threads give the same bits on
1, 2 and 3 threads; the thread count is validated where it is set (EMBER_NUM_THREADS, set_threads) and `ember info`
prints it. (Bits against the composed path: tests/test_fused_decode.py; the page's pool: tests/test_pool_pyodide.py.)"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember.backends import cpu_decode, cpu_matmul
from ember.errors import EmberError
from ember.models.common import fused_decode as FD
from test_fused_decode import random_llama_weights

if cpu_decode.kernels() is None:  # no C compiler: the composed path serves, nothing is threaded
    pytest.skip(f"no compiled CPU kernels here ({cpu_matmul.native_kernels_status()})", allow_module_level=True)


def _llama(quantized: bool):
    """models/llama's Llama at a width whose matvecs split (512 x 1536 > parallel.h's PARALLEL_MIN_WORK): float32
    weights stored input-major (the CPU backend's layout for a float nn.Linear), or Q4_K / Q8_0 with 8-bit
    activations; 8 heads, so attention past 256 cached rows splits by heads too."""
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    from ember.quant import quantize, set_activations
    model = Llama(LlamaConfig(vocab_size=300, dim=512, hidden_dim=1536, n_layers=2, n_heads=8, n_kv_heads=2,
                              max_seq_len=512))
    random_llama_weights(model, seed=5)
    if quantized:
        quantize(model, "q4_k", include=lambda name, m: "mlp" in name)
        quantize(model, "q8_0", include=lambda name, m: "attn" in name)
        set_activations(model, "q8")
    return model.eval().requires_grad_(False)


def _steps(model, threads: int, steps: int = 300) -> list[bytes]:
    """The final norm's output of `steps` fused decode steps from a one-token prompt (every step fused)."""
    k = cpu_matmul.native_kernels()
    old = k.threads
    k.set_threads(threads)
    try:
        model.head = lambda x: x
        model.__dict__["_fused_decoder"] = FD.FusedDecoder(model)
        cache, h, out = model.new_cache(512), None, []
        with ember.no_grad():
            for i in range(steps):
                token = 3 if h is None else int(np.abs(h).argmax()) % 300
                h = model(ember.tensor([[token]]), cache).numpy().reshape(-1)
                if i % 25 == 0 or i == steps - 1:
                    out.append(h.tobytes())
        assert model._fused_decoder._plan is not None
        return out
    finally:
        k.set_threads(old)


@pytest.mark.parametrize("quantized", [False, True], ids=["float32", "q8"])
def test_the_decode_step_gives_the_same_bits_on_any_thread_count(quantized):
    model = _llama(quantized)
    one = _steps(model, 1)
    for n in (2, 3):
        assert _steps(model, n) == one, n


def test_thread_counts_are_validated():
    k = cpu_matmul.native_kernels()
    for bad in (0, -1, 10 ** 6, "2", 2.5, True):
        with pytest.raises(EmberError, match="threads must be a whole number from 1 to 64"):
            k.set_threads(bad)
    code = "from ember.backends import cpu_matmul; cpu_matmul.native_kernels()"
    for bad in ("0", "-3", "1000000", "many"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "EMBER_NUM_THREADS": bad})
        assert r.returncode != 0 and f"SettingError: ember: $EMBER_NUM_THREADS={bad!r} is not an integer from 1 to " \
                                     "64" in r.stderr, r.stderr


def test_ember_info_prints_the_kernels_thread_count():
    r = subprocess.run([sys.executable, "-m", "ember", "info"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "EMBER_NUM_THREADS": "3"})
    assert "cpu kernel threads: 3 " in r.stdout, r.stdout
