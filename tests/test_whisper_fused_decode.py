"""Whisper's fused decode step (cpu_kernels/decode_xattn.c through the registry's xattn_decoder_plan) against the
decoder's composed layers, computed here on the same random model:

- hidden states within float32 rounding of the composed path, step after step (the cache written by either);
- the same greedy tokens; threads give the same bits; the plan follows weight changes; what it does not cover
  (a batch of beams, a prompt of several tokens, gradients) runs composed;
- the page (the wasm build of the same C) gives native's hidden states bit for bit.
transformers' token-for-token checks of the whole search run through this path too (test_whisper_decode.py).
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import ember
from ember import kernels as K
from ember.backends import cpu_matmul
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401

BUILD = '''
import numpy as np
import ember
from ember.models.whisper.config import ModelDimensions
from ember.models.whisper.model import Whisper

def random_whisper(seed, d=64, heads=4, layers=2, vocab=300, ffn=128):
    dims = ModelDimensions(n_mels=16, n_audio_ctx=40, n_audio_state=d, n_audio_head=heads, n_audio_layer=1,
                           n_vocab=vocab, n_text_ctx=32, n_text_state=d, n_text_head=heads, n_text_layer=layers,
                           n_audio_ffn=ffn, n_text_ffn=ffn)
    model = Whisper(dims)
    rng = np.random.default_rng(seed)
    state = {}
    for name, p in model.state_dict().items():
        scale = 1.0 if name.endswith("layer_norm.weight") else 0.3
        base = 1.0 if name.endswith("layer_norm.weight") else 0.0
        state[name] = ember.tensor((base + scale * rng.standard_normal(tuple(p.shape))).astype(np.float32))
    model.load_state_dict(state)
    return model
'''


def _model(seed=0, **kw):
    ns = {}
    exec(BUILD, ns)
    return ns["random_whisper"](seed, **kw)


def _decode(model, steps=8, fused=True, prompt=(1, 2, 3)):
    """(hidden states of each single-token step, greedy tokens) after a prompt, fused or composed."""
    dec = model.decoder
    ctx = contextlib.nullcontext() if fused else K.disabled("xattn_decoder_plan")
    with ember.no_grad(), ctx:
        mel = ember.tensor(np.random.default_rng(9).standard_normal((1, 16, 80)).astype(np.float32))
        cross = dec.cross_kv(model.encoder(mel))
        h, cache = dec(ember.tensor([list(prompt)]), cross)
        tok = int(dec.logits(h[:, -1:]).numpy().argmax())
        states, tokens = [], []
        for _ in range(steps):
            h, cache = dec(ember.tensor([[tok]]), cross, cache)
            states.append(h.numpy().reshape(-1))
            tok = int(dec.logits(h).numpy().argmax())
            tokens.append(tok)
    return np.stack(states), tokens


# a random model's decoder stepped in the page (tests/test_pool_pyodide.py runs it too)
PAGE_RUN = '''
def run(model, keys, head_dim, middle=None):
    """Hidden states (hex) of fused steps after a one-token prompt, the plan's kind, and each step's logits (their
    sha256: the head's product, in the plan where it runs it); middle: a step given two tokens (composed)."""
    import hashlib
    dec = model.decoder
    states, tok, logits = [], 4, []
    rng = np.random.default_rng(11)
    with ember.no_grad():
        cross = [tuple(ember.tensor(rng.standard_normal((1, dec.n_head, keys, head_dim)).astype(np.float32))
                       for _ in range(2)) for _ in dec.layers]
        h, cache = dec(ember.tensor([[1]]), cross)
        for i in range(6 if middle is None else 9):
            if i == middle:  # two tokens: composed, into the same cache
                h, cache = dec(ember.tensor([[5, 6]]), cross, cache)
                h = h[:, -1:]
            else:
                h, cache = dec(ember.tensor([[tok]]), cross, cache)
            v = h.numpy().reshape(-1)
            states.append(v.tobytes().hex())
            logits.append(hashlib.sha256(dec.logits(h).numpy().tobytes()).hexdigest())
            tok = int(np.abs(v).argmax()) % 300
    return states, type(dec.fused._plan).__name__, logits
'''


@pytest.fixture(scope="module")
def kernels_here():
    from ember.backends.cpu_float_kernels import kernels
    if kernels() is None:
        pytest.skip("no compiled kernels here")


def test_fused_steps_equal_the_composed_layers(kernels_here):
    model = _model(1)
    fused, t_fused = _decode(model)
    assert model.decoder.fused._plan is not None
    composed, t_composed = _decode(model, fused=False)
    scale = np.abs(composed).max()
    np.testing.assert_allclose(fused, composed, atol=2e-5 * scale, rtol=0)
    assert t_fused == t_composed
    assert not np.array_equal(fused, composed)  # really two paths (float rounding differs somewhere)


def test_threads_give_the_same_bits(kernels_here):
    from ember.backends import cpu_matmul
    nk = cpu_matmul.native_kernels()
    if nk is None:
        pytest.skip("the native kernels run the threads")
    model = _model(2, d=256, heads=4, ffn=1024)  # matvecs past the threads' threshold
    before = nk.threads
    try:
        nk.set_threads(1)
        one, _ = _decode(model)
        nk.set_threads(3)
        assert np.array_equal(_decode(model)[0], one)
    finally:
        nk.set_threads(before)


def test_weights_of_halves_are_read_as_halves_with_the_same_bits(kernels_here, monkeypatch):
    """A float16 checkpoint's decoder (every weight a half): natively the plan reads its input-major weights as
    halves (type -2, half the bytes a token), with the bits of the float32 plan, on any thread count."""
    from ember.backends import cpu_decode_xattn
    nk = cpu_matmul.native_kernels()
    if nk is None:
        pytest.skip("the native kernels run the plan's halves")
    model = _model(5, d=256, heads=4, ffn=1024)
    model.load_state_dict({k: ember.tensor(v.numpy().astype(np.float16).astype(np.float32))
                           for k, v in model.state_dict().items()})
    before = nk.threads
    try:
        got = {}
        for halves, threads in ((False, 1), (True, 1), (True, 3)):
            monkeypatch.setattr(cpu_decode_xattn.XattnPlan, "halves", halves)
            nk.set_threads(threads)
            model.decoder.fused._unchanged = None  # (the plan is built again, as halves say)
            got[halves, threads] = _decode(model)
            assert (-2 in model.decoder.fused._plan._layers) == halves
    finally:
        nk.set_threads(before)
    assert np.array_equal(got[True, 1][0], got[False, 1][0]) and np.array_equal(got[True, 3][0], got[False, 1][0])
    assert got[True, 1][1] == got[False, 1][1]


def test_the_plan_follows_the_weights(kernels_here):
    model = _model(3)
    first, _ = _decode(model, steps=3)
    plan = model.decoder.fused._plan
    blk = model.decoder.layers[1]
    blk.fc2.bias = ember.nn.Parameter(blk.fc2.bias * 2)   # a new bias: the plan is rebuilt
    changed, _ = _decode(model, steps=3)
    assert model.decoder.fused._plan is not plan and not np.allclose(changed, first)
    composed, _ = _decode(model, steps=3, fused=False)
    np.testing.assert_allclose(changed, composed, atol=2e-5 * np.abs(composed).max(), rtol=0)


def test_what_the_plan_does_not_cover_runs_composed(kernels_here):
    model = _model(4)
    dec = model.decoder
    with ember.no_grad():
        cross = dec.cross_kv(model.encoder(ember.tensor(np.ones((2, 16, 80), np.float32))))
        h, cache = dec(ember.tensor([[1, 2], [1, 2]]), cross)        # a batch of two (beams): composed
        h, cache = dec(ember.tensor([[5], [6]]), cross, cache)
    assert dec.fused._plan is None
    assert ember.is_grad_enabled()  # outside no_grad: a step may record gradients, so it composes
    dec(ember.tensor([[7]]), [tuple(t.narrow(0, 0, 1) for t in kv) for kv in cross])
    assert dec.fused._plan is None


def test_fused_decode_in_pyodide(kernels_here, pyodide_session):
    """The page's decode steps (the wasm build of decode_xattn.c, on the page's kernel pool where the session has
    one) give native's hidden states bit for bit (the encoder's keys and values given, not computed: the encoder's
    matmuls are BLAS natively, the wasm GEMM there). test_pool_pyodide runs a larger model, which the pool splits,
    and a prompt composed between fused steps, on 1 and 3 threads."""
    code = BUILD + PAGE_RUN + '''
from ember.backends import cpu_matmul
result = {"small": run(random_whisper(5), 40, 16), "threads": cpu_matmul.pool_threads()[0]}
'''
    got = pyodide_session.run(code, timeout=300)["result"]
    ns = {}
    was = cpu_matmul.set_deterministic(True)  # the head's product natively in the page's GEMM (the plan's layers
    try:  # are decode_xattn.c in either mode)
        exec(code.replace("result = {", "_result = {"), ns)
    finally:
        cpu_matmul.set_deterministic(was)
    want_plan = "PoolXattnPlan" if got["threads"] > 1 else "XattnPlan"
    assert got["small"][1] == want_plan and ns["_result"]["small"][1] == "XattnPlan"
    assert got["small"][0] == ns["_result"]["small"][0]
    assert got["small"][2] == ns["_result"]["small"][2]  # the logits: the pool's head (or the page's matmul)
