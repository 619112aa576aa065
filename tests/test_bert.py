"""BERT family against transformers: random-weight BERT / RoBERTa / DistilBERT configs built here (hidden
states within 1e-4, padded batches included), the real all-MiniLM-L6-v2 against sentence-transformers
(cosine within 1e-5 on a few hundred sentences of CPython's docs), `ember embed`, loader strictness."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ember.models.auto import from_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _save(tmp_path, model):
    model.save_pretrained(tmp_path, safe_serialization=True)
    return tmp_path


CONFIGS = {
    "bert": lambda: transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=37, max_position_embeddings=64),
    "roberta": lambda: transformers.RobertaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=4, intermediate_size=37,
                                                  max_position_embeddings=70, pad_token_id=1),
    "distilbert": lambda: transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                                                        max_position_embeddings=64),
}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_random_encoder_matches_transformers(tmp_path, kind, device):
    torch.manual_seed(0)
    ref = transformers.AutoModel.from_config(CONFIGS[kind]()).eval()
    model = from_pretrained(_save(tmp_path, ref), device=device)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 99, (3, 9))
    mask = np.ones_like(ids)
    mask[1, 6:] = 0          # padded rows, as a tokenizer pads a batch
    mask[2, 3:] = 0
    ids[mask == 0] = ref.config.pad_token_id
    with torch.no_grad():
        want = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    got = model(ids, attention_mask=mask).last_hidden_state.numpy()
    real = mask.astype(bool)  # padding rows' outputs are nobody's
    np.testing.assert_allclose(got[real], want[real], rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_loader_is_strict_and_names_the_tensor(tmp_path):
    from ember.nn.module import StateDictError
    ref = transformers.BertModel(CONFIGS["bert"]()).eval()
    sd = {k: v for k, v in ref.state_dict().items() if "layer.1.output.dense.bias" not in k}
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(ref.config.to_dict()))
    with pytest.raises(StateDictError, match="encoder.layer.1.output.dense.bias"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**ref.config.to_dict(), "model_type": "nonesuch"}))
    with pytest.raises(ValueError, match="model_type 'nonesuch' is not supported"):
        from_pretrained(tmp_path)


# ------------------------------------------------------------------ real weights: all-MiniLM-L6-v2

@pytest.fixture(scope="module")
def minilm():
    from ember.models.bert.fetch import fetch_minilm
    return fetch_minilm()


def _sentences(n):
    import pydoc_data.topics as topics
    text = " ".join(topics.topics[k] for k in sorted(topics.topics))
    s = [" ".join(x.split()) for x in re.split(r"(?<=[.!?])\s+", text)]
    return [x for x in s if 20 < len(x) < 400][:n]


def test_minilm_matches_sentence_transformers(minilm, device):
    st = pytest.importorskip("sentence_transformers")
    from ember.models.bert.sentence import SentenceEncoder
    # a few hundred on cpu (plus a text truncated at 256 tokens), a handful on webgpu (lavapipe is slow)
    texts = _sentences(300 if device == "cpu" else 6) + ["", "ünïcödé 🙂 text"] + (["word " * 400] if device == "cpu" else [])
    ref = st.SentenceTransformer(str(minilm), device="cpu").encode(texts, batch_size=32)
    got = SentenceEncoder(minilm, device=device).encode(texts)
    assert got.shape == ref.shape == (len(texts), 384)
    cos = (got * ref).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() > 1 - 1e-5, (cos.argmin(), cos.min())
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1, atol=1e-5)


def test_ember_embed_cli_prints_one_vector_per_text(minilm, capsys):
    from ember.cli import main
    from ember.models.bert.sentence import SentenceEncoder
    assert main(["embed", "first text", "second one", "--model", str(minilm), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["text"] for o in out] == ["first text", "second one"]
    want = SentenceEncoder(minilm).encode(["first text", "second one"])
    np.testing.assert_allclose(np.array([o["embedding"] for o in out]), want, atol=1e-6)
