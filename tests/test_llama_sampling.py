"""Llama sampling filters vs transformers' logits processors, seeded determinism, streaming, chat format."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.llama.chat import chat_prompt_ids, format_chat
from ember.models.llama.config import LlamaConfig
from ember.models.common.generate import (
    Sampler,
    SamplingParams,
    apply_repetition_penalty,
    generate,
    nucleus,
    pick,
    stream,
    top_k_filter,
    top_k_positions,
    top_p_filter,
)
from ember.models.llama.model import Llama

torch = pytest.importorskip("torch")
lp = pytest.importorskip("transformers.generation.logits_process")


@pytest.fixture
def logits(rng):
    x = rng.normal(0, 2, 200).astype(np.float32)
    x[[3, 4]] = x[5]  # ties at the boundary cases
    return x


@pytest.mark.parametrize("k", [1, 5, 50])
def test_top_k_matches_transformers(logits, k):
    ref = lp.TopKLogitsWarper(k)(None, torch.tensor(logits[None])).numpy()[0]
    np.testing.assert_array_equal(top_k_filter(logits, k), ref)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.99])
def test_top_p_matches_transformers(logits, p):
    ref = lp.TopPLogitsWarper(p)(None, torch.tensor(logits[None])).numpy()[0]
    np.testing.assert_array_equal(np.isneginf(top_p_filter(logits, p)), np.isneginf(ref))
    kept = ~np.isneginf(ref)
    np.testing.assert_array_equal(top_p_filter(logits, p)[kept], ref[kept])


def _vocabulary_logits(rng, n, spread):
    """An LM head's logits: a broad bulk, a tail, a few dozen likely tokens, ties among them."""
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    top = rng.choice(n, 60, replace=False)
    x[top] += rng.uniform(0, spread, 60).astype(np.float32)
    x[top[1]] = x[top[2]]
    return x


@pytest.mark.parametrize("p", [0.3, 0.9, 0.99])
@pytest.mark.parametrize("spread", [3.0, 25.0])
def test_top_p_on_a_vocabulary_equals_transformers_and_a_full_sort(rng, p, spread):
    """The nucleus is found among the tokens above a threshold (no sort of the vocabulary): the same tokens as
    transformers' TopPLogitsWarper and as sorting all of them (ascending, stable, float64 cumulative sums)."""
    x = _vocabulary_logits(rng, 262144 if spread > 5 else 32000, spread)
    s = x.astype(np.float64)
    order = np.argsort(x, kind="stable")
    probs = np.exp(s[order] - s.max())
    drop = np.cumsum(probs / probs.sum()) <= 1 - p
    drop[-1] = False
    want = np.sort(order[~drop])
    np.testing.assert_array_equal(nucleus(x, np.exp(s - s.max()), p), want)
    np.testing.assert_array_equal(np.flatnonzero(top_p_filter(x, p) > -np.inf), want)
    ref = lp.TopPLogitsWarper(p)(None, torch.tensor(x[None])).numpy()[0]
    np.testing.assert_array_equal(np.flatnonzero(~np.isneginf(ref)), want)
    # float32 weights (a sampler's softmax) and a factor: the same tokens
    w = np.exp(x - x.max()) * np.float32(3.0)
    np.testing.assert_array_equal(nucleus(x, w, p), want)


@pytest.mark.parametrize("k", [1, 40, 5000])
def test_top_k_on_a_vocabulary_equals_a_partition(rng, k):
    """top_k_positions (the k-th largest among the tokens above a threshold) keeps top_k_filter's tokens, ties
    with the k-th included."""
    x = _vocabulary_logits(rng, 262144, 25.0)
    kth = np.partition(x, -k)[-k]
    x[rng.choice(262144, 3)] = kth  # ties with the k-th
    np.testing.assert_array_equal(top_k_positions(x, k), np.flatnonzero(top_k_filter(x, k) > -np.inf))


@pytest.mark.parametrize("n", [5, 3000, 262144])
def test_pick_draws_what_generator_choice_draws(rng, n):
    """pick(weights, one uniform) is the token numpy's Generator.choice(p=weights / sum) draws with the same
    seed (its one uniform, its cumulative sums), zero-weight tokens never."""
    w = rng.random(n).astype(np.float32) ** 8
    w[rng.choice(n, n // 5, replace=False)] = 0.0
    p = w.astype(np.float64) / w.sum(dtype=np.float64)
    for seed in range(40):
        want = np.random.default_rng(seed).choice(n, p=p)
        got = pick(w, np.random.default_rng(seed).random())
        assert got == want and w[got] > 0, (n, seed, got, want)
    assert pick(w, 0.0) == np.flatnonzero(w)[0] and pick(w, np.nextafter(1.0, 0.0)) == np.flatnonzero(w)[-1]


def test_sampling_a_vocabulary_follows_softmax_with_top_p(rng):
    """Draws over a 262k vocabulary with temperature and top-p land in the nucleus with softmax's frequencies."""
    x = _vocabulary_logits(rng, 262144, 25.0)
    s = Sampler(SamplingParams(temperature=0.8, top_p=0.9, seed=3))
    draws = np.array([s(x, []) for _ in range(2000)])
    z = x.astype(np.float64) / 0.8
    kept = nucleus(z, np.exp(z - z.max()), 0.9)
    assert np.isin(draws, kept).all()
    q = np.exp(z[kept] - z.max())
    q /= q.sum()
    freq = np.array([(draws == t).mean() for t in kept])
    np.testing.assert_allclose(freq, q, atol=0.035)


@pytest.mark.parametrize("bad", ["nan", "inf", "all_suppressed", "few_finite"])
def test_logits_without_a_distribution_are_refused_and_few_finite_ones_drawn(rng, bad):
    from ember.errors import EmberError
    x = _vocabulary_logits(rng, 262144, 25.0)
    if bad == "nan":
        x[7] = np.nan
    elif bad == "inf":
        x[7] = np.inf
    else:
        x[:] = -np.inf
        if bad == "few_finite":  # fewer finite tokens than top-k asks for, one of them 2000 below the others
            x[[3, 9, 11]] = [1.0, 2.0, -2000.0]
    s = Sampler(SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=0))
    if bad == "few_finite":
        assert {s(x, []) for _ in range(20)} <= {3, 9}
        return
    with pytest.raises(EmberError, match="largest logit"):
        s(x, [])


def test_repetition_penalty_matches_transformers(logits):
    seen = [3, 7, 7, 150, 0]
    ref = lp.RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([seen]), torch.tensor(logits[None])).numpy()[0]
    np.testing.assert_allclose(apply_repetition_penalty(logits, seen, 1.3), ref, rtol=1e-6)


def test_sampler_seeded_and_distributed(logits):
    a = [Sampler(SamplingParams(temperature=0.7, seed=11))(logits, []) for _ in range(3)]
    s1, s2 = Sampler(SamplingParams(temperature=0.7, seed=11)), Sampler(SamplingParams(temperature=0.7, seed=11))
    seq1 = [s1(logits, []) for _ in range(50)]
    assert seq1 == [s2(logits, []) for _ in range(50)]
    assert a == [seq1[0]] * 3
    # empirical frequencies follow softmax(logits / T) after top-k
    s = Sampler(SamplingParams(temperature=0.7, top_k=3, seed=0))
    draws = np.bincount([s(logits, []) for _ in range(3000)], minlength=len(logits))
    top = np.argsort(logits)[-3:]
    p = np.exp(logits[top] / 0.7 - (logits[top] / 0.7).max())
    p /= p.sum()
    assert draws.sum() == draws[top].sum()
    np.testing.assert_allclose(draws[top] / 3000, p, atol=0.03)


class _ByteTok:
    """A byte tokenizer (id = byte + 2) whose stream decoder must hold back partial UTF-8."""
    eos_ids, bos_id = [1], 0

    def encode(self, text, bos=True):
        return ([0] if bos else []) + [b + 2 for b in text.encode()]

    def decode_stream(self):
        class D:
            buf = b""

            def step(self, t):
                self.buf += bytes([t - 2])
                try:
                    s, self.buf = self.buf.decode(), b""
                    return s
                except UnicodeDecodeError:
                    return None
        return D()


def test_stream_seeded_utf8_and_abort():
    ember.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=258, dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=1, max_seq_len=64))
    tok = _ByteTok()
    a = stream(m, tok, "héllo", max_new_tokens=12, temperature=1.0, top_p=0.95, seed=3)
    pieces = list(a)
    b = stream(m, tok, "héllo", max_new_tokens=12, temperature=1.0, top_p=0.95, seed=3)
    assert list(b) == pieces and a.stats.tokens == b.stats.tokens
    assert all("\ufffd" not in p for p in pieces)
    gen = generate(m, tok.encode("abc"), 50, SamplingParams(temperature=1.0, seed=1))
    got = []
    for t in gen:
        got.append(t)
        if len(got) == 4:
            gen.abort()
    assert len(got) == 4 and gen.stats.stopped == "abort"


def test_stop_token_ends_generation():
    ember.manual_seed(0)
    m = Llama(LlamaConfig(vocab_size=50, dim=32, hidden_dim=64, n_layers=1, n_heads=2, n_kv_heads=2, max_seq_len=64))
    free = list(generate(m, [1, 2, 3], 10, SamplingParams(temperature=0)))
    stop = free[4]
    cut = generate(m, [1, 2, 3], 10, SamplingParams(temperature=0), stop_ids=[stop])
    out = list(cut)
    assert out == free[:free.index(stop)] and cut.stats.stopped == "eos"


def test_llama2_chat_format():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": " Bye "}]
    # Meta's llama/generation.py chat_completion, spelled out
    want = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]"
    assert format_chat(msgs) == want
    tok = _ByteTok()
    ids = chat_prompt_ids(tok, msgs)
    assert ids.count(0) == 2 and ids.count(1) == 1
    with pytest.raises(ValueError, match="alternate"):
        format_chat([{"role": "assistant", "content": "x"}])
