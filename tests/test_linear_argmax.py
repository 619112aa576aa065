"""Greedy decoding's pick from a float32 output layer (the kernel registry's linear_argmax): natively, a float16
screen of the weight bounds every output and only the outputs that can be the largest are computed from the
weight (cpu_kernels/argmax_f32.c). The pick must be exactly argmax of every output as the layer's product computes
them (numpy's argmax: the first of equal largest), never an approximation's: checked against that product at near
ties made on purpose (outputs closer than the screen can tell apart), exact ties, weights the screen cannot take
and inputs it cannot bound, on 1, 2 and 3 threads, and through greedy generation against the composed head."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import kernels
from ember.backends import cpu_argmax, cpu_matmul
from ember.nn import functional as F

if cpu_matmul.native_kernels() is None:  # no C compiler: the product's every output is computed
    pytest.skip(f"no compiled CPU kernels here ({cpu_matmul.native_kernels_status()})", allow_module_level=True)


@pytest.fixture(autouse=True)
def _room_for_screens(monkeypatch):
    """Every screen these tests ask for is made, whatever copies earlier tests' weights still hold against
    EMBER_BLOCKED_WEIGHT_BYTES (the screens are counted there too)."""
    monkeypatch.setenv("EMBER_BLOCKED_WEIGHT_BYTES", str(1 << 40))


def _weight(wt):
    """The (n, k) weight of a bias-free Linear loaded from wt.T, as the CPU backend stores it (wt C-contiguous),
    not recording gradients (as an inference model's)."""
    lin = ember.nn.Linear(wt.shape[0], wt.shape[1], bias=False)
    lin.load_state_dict({"weight": np.ascontiguousarray(wt.T)})
    return lin.requires_grad_(False).weight


def _layer(k, n, seed, scale=0.05):
    rng = np.random.default_rng(seed)
    return _weight(rng.normal(0, scale, (k, n)).astype(np.float32)), rng


def _near_ties(w, rng, pairs=40):
    """Columns made copies of others with each value moved by up to a float16 ulp: output pairs whose float32 sums
    differ by about as much as the screen's float16 rounding moves them, so the screen orders about half of them the
    wrong way round. Returns the weight and the first column of each pair."""
    wt = w._data.T.copy()  # (k, n)
    made = []
    for _ in range(pairs):
        a, b = (int(i) for i in rng.choice(wt.shape[1], 2, replace=False))
        wt[:, b] = wt[:, a] * (1 + rng.uniform(-2.0 ** -11, 2.0 ** -11, wt.shape[0])).astype(np.float32)
        made.append(a)
    return _weight(wt), made


def _reference(x, w):
    """argmax of the layer's outputs as F.linear computes them (decode.c's in-order product)."""
    return int(np.argmax(F.linear(x, w).numpy()))


def _screened(x, w):
    """F.linear_argmax(x, w) after the weight's screen exists (made at its second pick), asserting it ran."""
    F.linear_argmax(x, w)
    got = F.linear_argmax(x, w)
    assert cpu_matmul.derived(w._data.T, "f16 screen") is not None
    return got


def test_the_pick_is_the_products_argmax_at_near_ties():
    w, rng = _layer(288, 32000, 0)
    w, pairs = _near_ties(w, rng)
    data = w._data.T
    hits = 0
    for t in range(60):
        # inputs that put a nudged pair on top: x along the pair's first column (then noise)
        col = pairs[t % len(pairs)]
        x = (data[:, col] * 40 + rng.normal(0, 0.2, data.shape[0])).astype(np.float32)
        x = ember.tensor(x.reshape(1, 1, -1))
        want = _reference(x, w)
        assert _screened(x, w) == want, t
        y = F.linear(x, w).numpy().ravel()
        hits += int(np.sort(y)[-2] >= y.max() - 1e-4 * abs(y.max()))
    for t in range(60):
        x = ember.tensor(rng.normal(0, 1, (1, 1, data.shape[0])).astype(np.float32))
        assert _screened(x, w) == _reference(x, w), t
    assert hits >= 10  # (the near ties were reached: the best two within 1e-4 of each other)


def test_exact_ties_pick_the_first():
    w, rng = _layer(256, 4096, 1)
    wt = w._data.T.copy()
    wt[:, 3000] = wt[:, 17]
    wt[:, 900] = wt[:, 17]
    lin = _weight(wt)
    x = ember.tensor((wt[:, 17] * 50).reshape(1, 1, -1))
    assert _reference(x, lin) == 17
    assert _screened(x, lin) == 17


@pytest.mark.parametrize("case", ["zeros", "tiny", "huge", "nan", "inf"])
def test_inputs_the_screen_cannot_bound(case):
    w, rng = _layer(288, 2048, 2)
    x = rng.normal(0, 1, (1, 1, 288)).astype(np.float32)
    x = {"zeros": x * 0, "tiny": x * np.float32(1e-38), "huge": x * np.float32(1e30),
         "nan": np.where(np.arange(288) == 5, np.nan, x), "inf": np.where(np.arange(288) == 9, np.inf, x)}[case]
    x = ember.tensor(x.astype(np.float32))
    assert _screened(x, w) == _reference(x, w)


@pytest.mark.parametrize("value", [70000.0, np.inf, np.nan, 1e-30])
def test_weights_past_the_halves(value):
    w, rng = _layer(288, 2048, 3)
    wt = w._data.T.copy()
    wt[100, 1234] = value
    lin = _weight(wt)
    for _ in range(5):
        x = ember.tensor(rng.normal(0, 1, (1, 1, 288)).astype(np.float32))
        assert F.linear_argmax(x, lin) == _reference(x, lin)
    screened = cpu_matmul.derived(lin._data.T, "f16 screen") is not None
    assert screened == (value == 1e-30)  # (a value past the halves' range or not finite: no screen)


def test_a_weight_of_halves_screens_itself():
    rng = np.random.default_rng(4)
    wt = rng.normal(0, 0.05, (384, 5003)).astype(np.float16).astype(np.float32)  # a float16 checkpoint's head
    lin = _weight(wt)
    for _ in range(20):
        x = ember.tensor(rng.normal(0, 1, (1, 1, 384)).astype(np.float32))
        assert _screened(x, lin) == _reference(x, lin)
    halves, _ = cpu_matmul.derived(lin._data.T, "f16 screen")
    assert halves is cpu_matmul.half_copy(lin._data.T)  # (half_copy's own: no second copy)


def test_any_thread_count_and_the_kernel_against_every_output(monkeypatch):
    w, rng = _layer(512, 12000, 5)
    w, pairs = _near_ties(w, rng)
    nk = cpu_matmul.native_kernels()
    calls = []
    monkeypatch.setattr(nk, "matvec_f32_argmax", lambda *a, _f=nk.matvec_f32_argmax: calls.append(_f(*a)) or calls[-1])
    before = nk.threads
    try:
        for t in range(20):
            col = pairs[t]
            x = ember.tensor((w._data[col] * 30 + rng.normal(0, 0.3, 512)).astype(np.float32).reshape(1, 1, -1))
            want = _reference(x, w)
            for n in (1, 2, 3):
                nk.set_threads(n)
                assert _screened(x, w) == want
    finally:
        nk.set_threads(before)
    assert calls and all(c >= 0 for c in calls)  # (the screen decided each one)


def test_the_composed_and_kernel_paths_agree_and_shapes_are_checked():
    w, rng = _layer(288, 1000, 6)
    x = ember.tensor(rng.normal(0, 1, (1, 288)).astype(np.float32))
    with kernels.disabled("linear_argmax"):
        want = F.linear_argmax(x, w)
    assert F.linear_argmax(x, w) == F.linear_argmax(x, w) == want == _reference(x, w)
    with pytest.raises(ValueError, match="one row"):
        F.linear_argmax(ember.tensor(np.zeros((2, 288), np.float32)), w)
    with pytest.raises(ValueError, match="one row"):
        F.linear_argmax(ember.tensor(np.zeros((1, 100), np.float32)), w)


def test_greedy_generation_matches_the_composed_head():
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.model import Llama
    ember.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=4096, dim=128, hidden_dim=256, n_layers=2, n_heads=4, n_kv_heads=4,
                          max_seq_len=128)).eval()
    rng = np.random.default_rng(7)
    m.load_state_dict({n: rng.normal(0, 0.08 if p.ndim == 2 else 0.1, p.shape).astype(np.float32) + (p.ndim == 1)
                       for n, p in m.named_parameters()})
    m.requires_grad_(False)
    picks = []
    nk = cpu_matmul.native_kernels()
    real = nk.matvec_f32_argmax
    try:
        nk.matvec_f32_argmax = lambda *a: picks.append(real(*a)) or picks[-1]
        got = list(generate(m, [1, 2, 3], 40, SamplingParams(temperature=0)))
    finally:
        del nk.matvec_f32_argmax
    with kernels.disabled("linear_argmax"):
        want = list(generate(m, [1, 2, 3], 40, SamplingParams(temperature=0)))
    assert got == want
    assert sum(p >= 0 for p in picks) >= 30  # (the screen picked, from the weight's second token on)
    assert cpu_argmax.MAX_EXACT >= 1


def test_every_build_rounds_the_screen_alike_and_picks_the_products_argmax(tmp_path_factory):
    from native_builds import build_variants
    rng = np.random.default_rng(8)
    wt = rng.normal(0, 0.05, (96, 3001)).astype(np.float32)
    wt[0, :8] = [65504.0, -65504.0, 6.1e-5, 3e-8, -2.9e-8, 1e-30, 65500.0, 0.0]  # (the halves' range and edges)
    for a in rng.choice(3000, 40, replace=False):  # near ties, as _near_ties makes them
        wt[:, a + 1] = wt[:, a] * (1 + rng.uniform(-2.0 ** -11, 2.0 ** -11, 96)).astype(np.float32)
    want_halves = wt.astype(np.float16)
    exact_norms = np.sqrt((want_halves.astype(np.float64) ** 2).sum(0))
    for tag, kern in build_variants(tmp_path_factory).items():
        kern.set_threads(2)
        halves = np.empty(wt.shape, np.float16)
        norms = kern.f16_screen_copy(wt, halves)
        assert np.array_equal(halves.view(np.uint16), want_halves.view(np.uint16)), tag
        assert (norms >= exact_norms).all() and (norms <= exact_norms * (1 + 1e-5) + 1e-30).all(), tag
        for t in range(30):
            a = int(rng.integers(3000))
            x = (wt[:, a] * 30 + rng.normal(0, 0.3, 96)).astype(np.float32)
            if t == 0:
                x[0] = 0.0  # (the huge weights out of it)
            y = kern.matvec_f32(x, wt)
            got = kern.matvec_f32_argmax(x, wt, halves, norms, 64)
            assert got == int(np.argmax(y)) or got < 0 and t == 0, (tag, t)
        bad = wt.copy()
        bad[5, 5] = 65520.0  # (rounds to inf as a half)
        assert kern.f16_screen_copy(bad, np.empty(wt.shape, np.float16)) is None, tag
        bad[5, 5] = np.nan
        assert kern.f16_screen_copy(bad, np.empty(wt.shape, np.float16)) is None, tag


def test_a_trained_models_head_is_decided_by_the_screen(monkeypatch):
    """SmolLM2-135M-Instruct's tied head (its GGUF's, as float32) at the hidden states of a real greedy run: the
    screen leaves a few outputs to compute (not the random weights' doing), and the pick is every output's argmax."""
    from smollm2_assets import smollm2_gguf
    from ember.models.text.load import load_text_model
    model, tok = load_text_model(str(smollm2_gguf()))
    states = []
    pick = model.greedy_head
    model.greedy_head = lambda x: states.append(x.numpy().copy()) or pick(x)
    from ember.models.common.generate import SamplingParams, generate
    list(generate(model, tok.encode("The capital of France is Paris. Three facts about the Eiffel tower:"), 12,
                  SamplingParams(temperature=0)))
    w = _weight(np.ascontiguousarray(model.model.embed_tokens.weight.numpy().T))  # (vocab, dim) float32
    nk = cpu_matmul.native_kernels()
    decided = []
    monkeypatch.setattr(nk, "matvec_f32_argmax",
                        lambda *a, _f=nk.matvec_f32_argmax: decided.append(_f(*a)) or decided[-1])
    for x in states:
        x = ember.tensor(x)
        assert _screened(x, w) == _reference(x, w)
    assert len(states) == 12 and all(d >= 0 for d in decided[-12:])  # (at most MAX_EXACT outputs left each time)
