"""Sliding-window KV caches as in-place rings: Mistral, Qwen2 and Gemma 3 random configs whose window (4) is
shorter than the generation decode token by token with ember's cache and give transformers' greedy tokens
and, at every step, its logits; each sliding layer's buffer keeps `window` slots, the same buffer throughout."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.auto import from_pretrained
from zoo_reference import causal_lm, saved_reference

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, WINDOW, PROMPT, NEW = 97, 4, 6, 10
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, sliding_window=WINDOW)
CONFIGS = {
    "mistral": lambda: transformers.MistralConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL, use_sliding_window=True, max_window_layers=1),
    "gemma3": lambda: transformers.Gemma3TextConfig(**SMALL, head_dim=8, query_pre_attn_scalar=8,
                                                    layer_types=["sliding_attention", "full_attention"]),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    return saved_reference(lambda: causal_lm(CONFIGS[request.param]()), tmp_path_factory.mktemp(request.param))


def test_ring_cache_decode_matches_transformers_past_the_window(pair, device):
    ref, folder = pair
    model = from_pretrained(folder, device=device)
    prompt = np.random.default_rng(0).integers(1, V, (1, PROMPT))
    with torch.no_grad():
        seq = ref.generate(torch.tensor(prompt), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                           pad_token_id=0)                                     # (1, PROMPT + NEW)
        want = ref(seq).logits[0, PROMPT - 1:-1].numpy()                       # (NEW, V): each step's logits
    sliding = [i for i, w in enumerate(model.windows) if w]
    assert sliding, "the config has sliding layers"
    cache = model.new_cache()
    rows, tokens, buffers = [], [], None
    with ember.no_grad():
        out = model(ember.tensor(prompt), cache, last_only=True)
        for step in range(NEW):
            rows.append(out.logits.numpy()[0, -1])
            tokens.append(int(rows[-1].argmax()))
            if buffers is None:
                buffers = [cache.k[i] for i in sliding]
            out = model(ember.tensor([[tokens[-1]]]), cache)
    assert tokens == seq[0, PROMPT:].tolist()
    got = np.stack(rows)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert cache.pos == PROMPT + NEW > 2 * WINDOW
    assert all(cache.capacity(i) == WINDOW and cache.k[i] is b for i, b in zip(sliding, buffers))
