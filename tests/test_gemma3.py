"""Gemma 3 (text) against transformers' Gemma3ForCausalLM on a random-weight config built offline: the sliding
window (4) is shorter than the prompts, so sliding and global layers, their two rope bases, q/k norms, the
(1 + w) norms, GeGLU and the tied, sqrt(d)-scaled embedding all matter. Also the KV cache (sliding layers keep
only window - 1 tokens) against the full forward, and hostile GGUF metadata."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.models.gemma3.config import GLOBAL, SLIDING, Gemma3Config, Gemma3ConfigError
from ember.models.gemma3.load import from_hf_state_dict

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WINDOW = 4


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    layer_types = [SLIDING, SLIDING, GLOBAL, SLIDING, GLOBAL]
    hc = transformers.Gemma3TextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=layer_types, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters={GLOBAL: {"rope_type": "default", "rope_theta": 1_000_000.0},
                         SLIDING: {"rope_type": "default", "rope_theta": 10_000.0}},
        attn_implementation="eager", tie_word_embeddings=True)
    hf = transformers.Gemma3ForCausalLM(hc).eval()
    with torch.no_grad():  # larger weights than the 0.02 init so every part carries signal
        for name, p in hf.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) if "norm" in name else 4.0 * p)
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    model = from_hf_state_dict(sd, Gemma3Config.from_hf(hc.to_dict()), "random gemma3")
    return hf, model


def _ref(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].numpy()                        # (T, vocab)


def test_config_from_hf_reads_both_rope_bases_and_layer_kinds(pair):
    _, model = pair
    c = model.config
    assert (c.rope_theta, c.rope_local_theta, c.sliding_window) == (1_000_000.0, 10_000.0, WINDOW)
    assert c.layer_types == [SLIDING, SLIDING, GLOBAL, SLIDING, GLOBAL]
    assert c.query_pre_attn_scalar == 24


def test_logits_match_transformers(pair):
    hf, model = pair
    ids = list(np.random.default_rng(1).integers(0, 97, 13))                   # 13 > window 4
    ref = _ref(hf, ids)
    with ember.no_grad():
        got = model(ember.tensor([ids])).numpy()[0]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), np.abs(got - ref).max()


def test_logits_match_transformers_on_every_device(pair, device):
    # the same weights on each device: the quantized-free float path through the device's attention/rope/norms
    hf, _ = pair
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    model = from_hf_state_dict(sd, Gemma3Config.from_hf(hf.config.to_dict()), "random gemma3").to(device)
    ids = list(np.random.default_rng(4).integers(0, 97, 9))                    # 9 > window 4
    ref = _ref(hf, ids)
    cache = model.new_cache()
    with ember.no_grad():
        got = model(ember.tensor([ids], device=device)).numpy()[0]
        step = np.concatenate([model(ember.tensor([ids[:5]], device=device), cache).numpy()[0]] +
                              [model(ember.tensor([[t]], device=device), cache).numpy()[0] for t in ids[5:]])
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), (device, np.abs(got - ref).max())
    assert np.abs(step - ref).max() <= 1e-4 * np.abs(ref).max(), (device, np.abs(step - ref).max())


def test_kv_cache_decoding_matches_full_forward(pair):
    hf, model = pair
    ids = list(np.random.default_rng(2).integers(0, 97, 15))
    ref = _ref(hf, ids)
    cache = model.new_cache()
    rows = []
    with ember.no_grad():
        rows.append(model(ember.tensor([ids[:6]]), cache).numpy()[0])           # prefill 6, then 1 + 3 + 5
        for a, b in ((6, 7), (7, 10), (10, 15)):
            rows.append(model(ember.tensor([ids[a:b]]), cache).numpy()[0])
    got = np.concatenate(rows)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    # a sliding layer holds window - 1 tokens, a global layer every token
    assert cache.kept(0) == WINDOW - 1 and cache.kept(2) == 15


def test_gguf_config_errors_name_the_field():
    md = {"general.architecture": "gemma3", "gemma3.embedding_length": 64, "gemma3.block_count": 2,
          "gemma3.feed_forward_length": 96}
    with pytest.raises(Gemma3ConfigError, match="gemma3.attention.head_count"):
        Gemma3Config.from_gguf(md, "x.gguf")
    with pytest.raises(Gemma3ConfigError, match="'llama'"):
        Gemma3Config.from_gguf({"general.architecture": "llama"}, "x.gguf")
    with pytest.raises(Gemma3ConfigError, match="n_kv_heads"):
        Gemma3Config.from_gguf({**md, "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 3}, "x.gguf")


def test_gguf_tokenizer_rejects_inconsistent_metadata():
    from ember.tokenizers.errors import TokenizerError
    from ember.tokenizers.gguf_spm import SpmTokenizer
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<pad>", "a", "b", "ab"],
          "tokenizer.ggml.scores": [0.0, -1.0, -1.0, -0.5], "tokenizer.ggml.token_type": [3, 1, 1, 1]}
    with pytest.raises(TokenizerError, match="token_type"):
        SpmTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.token_type": [1]}, "x.gguf")
    with pytest.raises(TokenizerError, match="bos_token_id 9"):
        SpmTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.bos_token_id": 9}, "x.gguf")
    with pytest.raises(TokenizerError, match="'gpt2'"):
        SpmTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.model": "gpt2"}, "x.gguf")
    tok = SpmTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.add_space_prefix": False}, "x.gguf")
    assert tok.encode("abab", bos=False) == [3, 3]
    with pytest.raises(TokenizerError, match="no byte token"):  # 'c' is neither a piece nor a <0x63> byte token
        tok.encode("c", bos=False)


def test_loads_a_hugging_face_folder(pair, tmp_path):
    # what save_pretrained writes (config.json + model.safetensors, Gemma3ForCausalLM names, norms stored as w),
    # through the same entry point as `ember generate --model FOLDER`
    from ember.models.gemma3.load import load_gemma3
    from ember.models.text import family_of
    hf, _ = pair
    hf.save_pretrained(tmp_path, safe_serialization=True)
    assert family_of(str(tmp_path)) == "gemma3"
    model, tok = load_gemma3(str(tmp_path))
    _assert_logits_match(hf, model, seed=3, n=11)
    assert tok is None  # no tokenizer.json in the folder


def _assert_logits_match(hf, model, seed, n):
    ids = list(np.random.default_rng(seed).integers(0, 97, n))
    ref = _ref(hf, ids)
    with ember.no_grad():
        got = model(ember.tensor([ids])).numpy()[0]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_loads_a_sharded_hugging_face_folder(pair, tmp_path):
    # save_pretrained with a small shard size: model-0000k-of-0000n.safetensors + model.safetensors.index.json
    from ember.models.gemma3.load import load_gemma3
    hf, _ = pair
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    model, _ = load_gemma3(str(tmp_path))
    _assert_logits_match(hf, model, seed=4, n=9)


def test_kv_cache_bytes_the_page_reports(pair):
    # wasm/tools/llama.kv_cache_bytes (the page's memory figure) is what the cache holds after that many tokens
    from ember.wasm.tools.llama import kv_cache_bytes
    _, model = pair
    cache = model.new_cache()
    with ember.no_grad():
        model(ember.tensor([list(range(12))]), cache)
    assert cache.nbytes() == kv_cache_bytes(model.config, 12)
    assert kv_cache_bytes(model.config, 12) < kv_cache_bytes(model.config.replace(sliding_window=64), 12)


def test_a_gguf_loads_through_load_text_model_resolving_it_once_and_parsing_its_header_once(tmp_path, monkeypatch):
    # `ember generate`'s path (ember.models.text.load_text_model) for a GGUF written by gguf-py from transformers'
    # weights, named by gguf-py's own Gemma 3 table: the source is resolved once and the header parsed once (a
    # Gemma GGUF used to be resolved twice and parsed three times), and the model gives transformers' logits
    gguf = pytest.importorskip("gguf")
    from ember import hub
    from ember.io.gguf import GGUFReader
    from ember.models.text import load_text_model
    torch.manual_seed(1)
    # what GGUF leaves to llama.cpp's conventions: every 6th layer global, rope bases 1e6 / 1e4, 1/sqrt(head_dim)
    hc = transformers.Gemma3TextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32, sliding_window=WINDOW,
        layer_types=[SLIDING] * 5 + [GLOBAL], max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters={GLOBAL: {"rope_type": "default", "rope_theta": 1_000_000.0},
                         SLIDING: {"rope_type": "default", "rope_theta": 10_000.0}},
        attn_implementation="eager", tie_word_embeddings=True)
    hf = transformers.Gemma3ForCausalLM(hc).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) if "norm" in name else 4.0 * p)
    path = tmp_path / "tiny-gemma3.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    for add, v in ((w.add_context_length, 64), (w.add_embedding_length, 64), (w.add_block_count, 6),
                   (w.add_feed_forward_length, 96), (w.add_head_count, 4), (w.add_head_count_kv, 2),
                   (w.add_key_length, 32), (w.add_value_length, 32), (w.add_layer_norm_rms_eps, 1e-6),
                   (w.add_rope_freq_base, 1_000_000.0), (w.add_sliding_window, WINDOW)):
        add(v)
    tokens = ["<pad>", "<eos>", "<bos>"] + [f"t{i}" for i in range(94)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([3, 3, 3] + [1] * 94)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, 6)
    for k, v in hf.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied: llama.cpp's converter writes token_embd only
        a = v.detach().numpy().astype(np.float32)
        w.add_tensor(names.get_name(k, try_suffixes=(".weight",)), a + 1 if k.endswith("norm.weight") else a)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()

    counts = {"resolve": 0, "parse": 0}
    resolve, parse = hub.resolve, GGUFReader._parse

    def counted(key, fn):
        def call(*a, **k):
            counts[key] += 1
            return fn(*a, **k)
        return call
    monkeypatch.setattr(hub, "resolve", counted("resolve", resolve))
    monkeypatch.setattr(GGUFReader, "_parse", counted("parse", parse))
    model, tok = load_text_model(str(path))
    assert counts == {"resolve": 1, "parse": 1}
    assert (tok.bos_id, tok.eos_ids) == (2, [1])
    _assert_logits_match(hf, model, seed=5, n=11)  # 11 > window 4: sliding and global layers both matter
