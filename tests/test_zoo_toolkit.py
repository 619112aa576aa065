"""The zoo's toolkit (ember.models.common) piece by piece against references computed here: rotary frequency
scalings vs transformers' ROPE_INIT_FUNCTIONS, the rotate-half / interleaved / partial rope paths vs a
numpy spelling, ALiBi vs BLOOM's build_alibi_tensor, masks, the sliding KV cache, stop strings."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.common.cache import KVCache
from ember.models.common.masks import attention_mask
from ember.models.common.positions import (PositionConfigError, RotaryEmbedding, alibi_bias, alibi_slopes,
                                           rope_inv_freq, sinusoidal_table)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128, "beta_fast": 16, "beta_slow": 2,
     "mscale": 1.0, "mscale_all_dim": 0.5},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: f"{s['rope_type']}-{s['factor']}")
def test_rope_scalings_match_transformers(scaling):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=512,
                                   rope_scaling=dict(scaling), rope_theta=50000.0)
    want, factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")
    got, got_factor = rope_inv_freq(32, 50000.0, scaling)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert got_factor == pytest.approx(factor, rel=1e-6)


def test_unknown_rope_scaling_is_named():
    with pytest.raises(PositionConfigError, match="'longrope'"):
        rope_inv_freq(32, 10000.0, {"rope_type": "longrope", "factor": 2.0})


def _numpy_rope(x, pos, inv, layout, rd):
    """x (B, T, H, D) rotated on its first rd dims (pairs: halves or (2i, 2i + 1))."""
    ang = pos[..., None] * inv                                               # (B | 1, T, rd / 2)
    c, s = np.cos(ang)[:, :, None], np.sin(ang)[:, :, None]
    out = x.copy()
    h = rd // 2
    a, b = (x[..., :h], x[..., h:rd]) if layout == "half" else (x[..., 0:rd:2], x[..., 1:rd:2])
    ra, rb = a * c - b * s, b * c + a * s
    if layout == "half":
        out[..., :h], out[..., h:rd] = ra, rb
    else:
        out[..., 0:rd:2], out[..., 1:rd:2] = ra, rb
    return out


@pytest.mark.parametrize("layout,rd", [("half", 16), ("half", 8), ("interleaved", 16), ("interleaved", 12)])
@pytest.mark.parametrize("T,rows", [(5, "shared"), (1, "shared"), (3, "per-row")])
def test_rope_paths_match_numpy(layout, rd, T, rows, device, rng):
    x = rng.normal(size=(2, T, 3, 16)).astype(np.float32)
    pos = np.arange(4, 4 + T)[None] if rows == "shared" else np.array([[0, 1, 2], [5, 6, 7]])
    inv, _ = rope_inv_freq(rd, 10000.0)
    rope = RotaryEmbedding(16, inv, layout=layout).at(pos, ember.float32, device)
    got = rope(ember.tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, _numpy_rope(x, pos, inv, layout, rd), rtol=1e-5, atol=1e-5)


def test_alibi_matches_bloom():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    for heads in (4, 6, 12):
        want = build_alibi_tensor(torch.ones(1, 9), heads, torch.float32).numpy()  # (heads, 1, 9)
        np.testing.assert_allclose(alibi_bias(heads, np.arange(9)), want, rtol=1e-6)
    assert alibi_slopes(8)[0] == pytest.approx(0.5)


def test_sinusoids_match_whisper_formula():
    t = sinusoidal_table(10, 8)
    inv = np.exp(-np.log(10000) / 3 * np.arange(4))
    np.testing.assert_allclose(t, np.concatenate([np.sin(np.arange(10)[:, None] * inv),
                                                  np.cos(np.arange(10)[:, None] * inv)], 1), rtol=1e-5, atol=1e-6)


def test_mask_causal_window_padding_and_group():
    m = attention_mask(np.arange(3, 5), np.arange(0, 5), window=3, group=2).numpy()   # (2 * 2, 5)
    allowed = m == 0
    want = np.array([[False, True, True, True, False], [False, False, True, True, True]])
    np.testing.assert_array_equal(allowed, np.tile(want, (2, 1)))
    pad = attention_mask(np.arange(3), np.arange(3), key_valid=[[False, True, True], [True, True, True]]).numpy()
    assert pad.shape == (2, 1, 3, 3)
    np.testing.assert_array_equal(pad[0, 0] == 0, [[True, False, False], [False, True, False], [False, True, True]])
    assert attention_mask(np.arange(4, 5), np.arange(0, 5)) is None            # one token sees everything


def test_sliding_cache_is_a_ring_written_in_place(device):
    """A window-3 layer: a 4-token prompt then decoded tokens land in a 3-slot ring (position p in slot
    p % 3) that is never reallocated; update returns what the new tokens attend to, in key_positions order."""
    cache = KVCache(2, 1, 4, 32, windows=[3, None])

    def step(values):
        k = ember.tensor(np.asarray(values, np.float32)[None, None, :, None].repeat(4, -1), device=device)
        want = [cache.key_positions(layer, len(values)).tolist() for layer in range(2)]
        got = [cache.update(layer, k, k)[0].numpy()[0, 0, :, 0].tolist() for layer in range(2)]
        cache.pos += len(values)
        return want, got

    want, got = step([0, 1, 2, 3])                            # a prompt longer than the ring
    assert want == got == [[0, 1, 2, 3], [0, 1, 2, 3]]
    ring = cache.k[0]
    assert cache.capacity(0) == 3 and ring.numpy()[0, 0, :, 0].tolist() == [3, 1, 2]
    for p in range(4, 12):
        (want_ring, _), (got_ring, got_global) = step([p])
        assert got_ring == want_ring and sorted(want_ring) == [p - 2, p - 1, p]  # itself and the window - 1 before
        assert got_global == list(range(p + 1))
    assert cache.k[0] is ring and cache.capacity(0) == 3       # bounded: the same 3-slot buffer throughout
    assert cache.kept(0) == 2 and cache.kept(1) == 12
    (want, _), (got, _) = step([12, 13])                       # several tokens again: the ring, then themselves
    assert want == got == [9, 10, 11, 12, 13]
    fresh = KVCache(1, 1, 4, 32, windows=[3])                   # one token at a time into a ring not yet full:
    for p in range(4):                                          # the written slots only, then the whole ring
        k = ember.tensor(np.full((1, 1, 1, 4), p, np.float32), device=device)
        want = fresh.key_positions(0, 1).tolist()
        got = fresh.update(0, k, k)[0].numpy()[0, 0, :, 0].tolist()
        fresh.pos += 1
        assert want == got == [[0], [0, 1], [0, 1, 2], [3, 1, 2]][p]
    several = KVCache(1, 1, 4, 32, windows=[3])
    several.update(0, *(ember.tensor(np.zeros((1, 1, 1, 4), np.float32), device=device),) * 2)
    several.pos = 1
    assert several.key_positions(0, 2).tolist() == [0, -1, -1, 1, 2]   # (a prompt after one token) unwritten: -1


def test_stop_strings_end_the_stream():
    from ember.models.common.generate import SamplingParams, TextStream, generate

    class Echo:  # a "model" whose next token is always (last + 1) % 5
        def new_cache(self):
            return type("C", (), {"max_len": 100, "pos": 0, "nbytes": lambda self: 0})()

        def __call__(self, tokens, cache, last_only=False):
            t = tokens.numpy()[0, -1]
            cache.pos += tokens.shape[1]
            out = np.full((1, 1, 5), -10.0, np.float32)
            out[0, 0, (t + 1) % 5] = 10.0
            return ember.tensor(out)

    class Tok:
        def decode_stream(self):
            return type("D", (), {"step": lambda self, t: "abcde"[t]})()

    seen = []
    text = TextStream(generate(Echo(), [0], 20, SamplingParams(temperature=0), on_token=seen.append), Tok(), stop=["xyz", "eab"])
    assert "".join(text) == "bcd"
    assert text.stats.stopped == "stop" and seen[:3] == [1, 2, 3]
