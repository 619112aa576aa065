"""The zoo's causal LMs against transformers on random-weight configs built here (offline, seconds): logits
within 1e-4 relative, greedy tokens equal to transformers' generate (which decodes with its own KV cache, so
ember's cache, sliding windows and rotary steps are checked too), a left-padded batch equal to each prompt
alone, and `ember generate --model DIR`."""
from __future__ import annotations

import json

import pytest

from ember.models.auto import from_pretrained
from ember.models.common.generate import SamplingParams, generate, generate_batch
from zoo_reference import check_logits, random_ids, reference_greedy, saved_fixture

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 101
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)


def _configs():
    t = transformers
    return {
        "mistral": lambda: t.MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=6),
        "qwen2": lambda: t.Qwen2Config(**SMALL, num_key_value_heads=2, use_sliding_window=True, sliding_window=6,
                                       max_window_layers=1, tie_word_embeddings=True),
        "qwen3": lambda: t.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8, use_sliding_window=True,
                                       sliding_window=6, max_window_layers=1, tie_word_embeddings=True),
        "gpt2": lambda: t.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64),
        "gpt_bigcode": lambda: t.GPTBigCodeConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64),
        "phi3": lambda: t.Phi3Config(**SMALL, num_key_value_heads=2, pad_token_id=0, partial_rotary_factor=0.5),
        "phi2": lambda: t.PhiConfig(**{**SMALL, "hidden_size": 64}, partial_rotary_factor=0.4, pad_token_id=0),
        "gemma": lambda: t.GemmaConfig(**SMALL, num_key_value_heads=1, head_dim=16),
        "glm": lambda: t.GlmConfig(**SMALL, num_key_value_heads=2, head_dim=8, pad_token_id=0),
        "glm4": lambda: t.Glm4Config(**SMALL, num_key_value_heads=2, head_dim=8, pad_token_id=0),
        "starcoder2": lambda: t.Starcoder2Config(**SMALL, num_key_value_heads=2, sliding_window=6),
        "falcon": lambda: t.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
        "falcon_new": lambda: t.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             new_decoder_architecture=True, num_kv_heads=2, bias=True),
        "llama3": lambda: t.LlamaConfig(**SMALL, num_key_value_heads=2, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}),
        "qwen2_yarn": lambda: t.Qwen2Config(**SMALL, num_key_value_heads=2, rope_scaling={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}),
    }


CONFIGS = _configs()


saved = saved_fixture(CONFIGS)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_logits_match_transformers(saved, kind, device):
    ref, folder = saved(kind)
    model = from_pretrained(folder, device=device)
    first, rest = check_logits(model, ref, random_ids(13, V, rows=2))
    assert rest.past_key_values is first.past_key_values and rest.past_key_values.pos == 13


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_greedy_tokens_match_transformers(saved, kind, device):
    ref, folder = saved(kind)
    model = from_pretrained(folder, device=device)
    prompt = random_ids(5, V, seed=1)
    n = 12 if device == "cpu" else 6   # past the sliding window (6) on cpu
    want = reference_greedy(ref, prompt[0].tolist(), n)
    got = list(generate(model, prompt[0].tolist(), n, SamplingParams(temperature=0)))
    assert got == want


@pytest.mark.parametrize("kind", ["mistral", "gpt2"])
def test_left_padded_batch_equals_each_prompt_alone(saved, kind):
    _, folder = saved(kind)
    model = from_pretrained(folder)
    prompts = [random_ids(n, V, seed=seed)[0].tolist() for n, seed in ((7, 2), (3, 3), (5, 4))]
    greedy = SamplingParams(temperature=0)
    alone = [list(generate(model, p, 6, greedy)) for p in prompts]
    streamed = []
    batch = generate_batch(model, prompts, 6, greedy, on_token=lambda r, t: streamed.append((r, t)))
    assert batch == alone
    assert sorted(streamed) == sorted((r, t) for r, toks in enumerate(alone) for t in toks)


def test_ember_generate_cli_takes_any_causal_lm_folder(saved, tmp_path, capsys):
    """A folder with a tokenizer.json: `ember generate --model DIR --json` prints transformers' greedy ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    ref, folder = saved("gpt2")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    from ember.cli import main
    assert main(["generate", "w5 w17 w33", "--model", str(folder), "-n", "6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == reference_greedy(ref, [5, 17, 33], 6)
