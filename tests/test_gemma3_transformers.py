"""The real Gemma 3 270M against transformers: `Gemma3ForCausalLM` on the weights of the same GGUF dequantized by
gguf-py (llama.cpp's own Python package, independent of ember.quant), against ember running the GGUF with its
weights kept quantized (QLinear, the Q8_0 embedding read by row and multiplied for the tied output). Loaded with
activations="float32", ember's quantized matmul is dequantize-then-multiply in float32, so the two agree to
float32 rounding: the logits of every prompt position within 1e-4 of the logit range. (The default, llama.cpp's
8-bit activations, is tested against llama.cpp in test_gemma3_gguf.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from gemma3_assets import gemma3_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:"]
TOL = 1e-4


@pytest.fixture(scope="module")
def path():
    return gemma3_gguf()


def _hf_config(c):
    from ember.models.gemma3.config import GLOBAL, SLIDING
    return transformers.Gemma3TextConfig(
        vocab_size=c.vocab_size, hidden_size=c.dim, intermediate_size=c.hidden_dim, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, head_dim=c.head_dim,
        query_pre_attn_scalar=int(c.query_pre_attn_scalar or c.head_dim), sliding_window=c.sliding_window, layer_types=c.layer_types,
        max_position_embeddings=c.max_seq_len, rms_norm_eps=c.norm_eps, final_logit_softcapping=c.final_logit_softcap,
        rope_parameters={GLOBAL: {"rope_type": "default", "rope_theta": c.rope_theta},
                         SLIDING: {"rope_type": "default", "rope_theta": c.rope_local_theta}},
        attn_implementation="eager", tie_word_embeddings=True)


@pytest.fixture(scope="module")
def models(path):
    from ember.models.gemma3.load import hf_names_from_gguf, load_gguf
    model, tok = load_gguf(path, activations="float32")
    reader = gguf.GGUFReader(str(path))
    raw = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32) for t in reader.tensors}
    sd = hf_names_from_gguf(raw, str(path))
    # GGUF stores Gemma's norms as 1 + w (convert_hf_to_gguf adds the 1); transformers wants w
    sd = {k: v - np.float32(1) if k.endswith("norm.weight") else v for k, v in sd.items()}
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    hf = transformers.Gemma3ForCausalLM(_hf_config(model.config))
    hf.load_state_dict({k: torch.from_numpy(v.reshape(hf.state_dict()[k].shape)) for k, v in sd.items()},
                       strict=True)
    return model, tok, hf.eval()


def test_quantized_gguf_logits_match_transformers_on_dequantized_weights(models):
    model, tok, hf = models
    for text in PROMPTS:
        ids = tok.encode(text)
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0].float().numpy()              # (T, vocab)
        with ember.no_grad():
            got = model(ember.tensor([ids])).numpy()[0]
        gap = np.abs(got - ref).max(1) / (ref.max(1) - ref.min(1))
        assert gap.max() < TOL, (text, gap.max())
        assert (got.argmax(1) == ref.argmax(1)).all()


def test_on_each_device_logits_match_transformers_and_greedy_tokens_match_cpu(models, device):
    # the real 270M with its quantized weights on the device (on webgpu the 178 MB tied Q8_0 table goes up as
    # row slices, under WebGPU's 128 MiB binding limit); one short prompt, then one decode step from its cache,
    # greedy: lavapipe is slow
    if device == "cpu":
        pytest.skip("cpu is the reference here")
    from ember.models.common.generate import SamplingParams, generate
    model, tok, hf = models
    ids = tok.encode(PROMPTS[0], bos=True)
    with ember.no_grad():
        want = list(generate(model, ids, 2, SamplingParams(temperature=0)))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float().numpy()                  # (T, vocab)
    try:
        model.to(device)
        cache = model.new_cache(64)
        with ember.no_grad():
            got = model(ember.tensor([ids]), cache).numpy()[0]                   # (T, vocab)
            tokens = [int(got[-1].argmax())]
            tokens.append(int(model(ember.tensor([tokens[-1:]]), cache).numpy()[0, -1].argmax()))
    finally:
        model.to("cpu")
    gap = np.abs(got - ref).max(1) / (ref.max(1) - ref.min(1))
    assert gap.max() < TOL, (device, gap.max())
    assert tokens == want, (device, tokens, want)
