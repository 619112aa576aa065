"""T5 against transformers on random-weight configs built here: T5 (ReLU, tied output, scaled) and T5 v1.1 /
Flan (gated GELU, separate lm_head): teacher-forced logits within 1e-4 relative with a padded encoder batch,
and greedy generation (ember's decoder KV cache + cross-attention) equal to transformers' generate."""
from __future__ import annotations

import numpy as np
import pytest

from ember.models.auto import from_pretrained
from zoo_reference import saved_reference

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = {
    "t5": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "t5-v1_1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    cfg = transformers.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3,
                                num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                                decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, **CONFIGS[request.param])
    return saved_reference(lambda: transformers.T5ForConditionalGeneration(cfg), tmp_path_factory.mktemp(request.param))


def test_t5_logits_match_transformers(pair, device):
    ref, folder = pair
    model = from_pretrained(folder, device=device)
    rng = np.random.default_rng(0)
    ids, dec = rng.integers(2, 99, (2, 11)), rng.integers(2, 99, (2, 6))
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    ids[mask == 0] = 0
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), decoder_input_ids=torch.tensor(dec))
    got = model(input_ids=ids, decoder_input_ids=dec, attention_mask=mask)      # transformers' field names
    for field, rows in (("logits", ...), ("encoder_last_hidden_state", mask == 1)):  # padding rows: nobody's
        w = getattr(want, field).numpy()[rows]
        np.testing.assert_allclose(getattr(got, field).numpy()[rows], w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


def test_t5_greedy_generation_matches_transformers(pair):
    ref, folder = pair
    model = from_pretrained(folder)
    ids = np.random.default_rng(1).integers(2, 99, (2, 9))
    with torch.no_grad():
        out = ref.generate(torch.tensor(ids), max_new_tokens=10, do_sample=False, use_cache=False).numpy()  # its cache assumes num_layers decoder layers
    want = [[t for t in row[1:].tolist()] for row in out]
    want = [row[:row.index(1)] if 1 in row else row for row in want]  # up to eos (then transformers pads)
    assert model.generate(ids, 10) == want
