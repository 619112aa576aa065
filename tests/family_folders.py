"""One tiny random-weight Hugging Face folder per model family ember loads from config.json (transformers saves
each: config.json + model.safetensors), and how each is loaded and run: what the hostile-config tests and the
config fuzzer (tests/fuzz/configs.py) push mutated config.json files through."""
from __future__ import annotations

V = 101
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)


def configs() -> dict:
    """family -> (transformers model class name, config); the kind of loading is in configs.LOADERS."""
    import transformers as t
    return {
        "llama": ("LlamaForCausalLM", t.LlamaConfig(**SMALL, num_key_value_heads=2)),
        "llama3": ("LlamaForCausalLM", t.LlamaConfig(**SMALL, num_key_value_heads=2, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16})),
        "gemma3": ("Gemma3ForCausalLM", t.Gemma3TextConfig(**SMALL, num_key_value_heads=2, head_dim=8,
                                                           sliding_window=6)),
        "mistral": ("MistralForCausalLM", t.MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=6)),
        "qwen2": ("Qwen2ForCausalLM", t.Qwen2Config(**SMALL, num_key_value_heads=2, rope_scaling={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})),
        "qwen3": ("Qwen3ForCausalLM", t.Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8)),
        "gpt2": ("GPT2LMHeadModel", t.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
        "gpt_bigcode": ("GPTBigCodeForCausalLM", t.GPTBigCodeConfig(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                                                                    n_positions=64)),
        "phi3": ("Phi3ForCausalLM", t.Phi3Config(**SMALL, num_key_value_heads=2, pad_token_id=0,
                                                 partial_rotary_factor=0.5)),
        "phi": ("PhiForCausalLM", t.PhiConfig(**{**SMALL, "hidden_size": 64}, partial_rotary_factor=0.4,
                                              pad_token_id=0)),
        "gemma": ("GemmaForCausalLM", t.GemmaConfig(**SMALL, num_key_value_heads=1, head_dim=16)),
        "glm": ("GlmForCausalLM", t.GlmConfig(**SMALL, num_key_value_heads=2, head_dim=8, pad_token_id=0)),
        "starcoder2": ("Starcoder2ForCausalLM", t.Starcoder2Config(**SMALL, num_key_value_heads=2, sliding_window=6)),
        "falcon": ("FalconForCausalLM", t.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                       num_attention_heads=4)),
        "bert": ("BertModel", t.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=37, max_position_embeddings=64)),
        "distilbert": ("DistilBertModel", t.DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4,
                                                             hidden_dim=37, max_position_embeddings=64)),
        "t5": ("T5ForConditionalGeneration", t.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                                                        num_heads=4, relative_attention_num_buckets=8,
                                                        decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)),
        "vit": ("ViTForImageClassification", t.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                         intermediate_size=37, image_size=32, patch_size=8,
                                                         num_labels=5)),
        "clip": ("CLIPModel", t.CLIPConfig(
            text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=16, eos_token_id=98),
            vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                               image_size=32, patch_size=8), projection_dim=24)),
        "whisper": ("WhisperForConditionalGeneration", t.WhisperConfig(
            vocab_size=99, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_source_positions=16,
            max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3)),
    }


def build(root) -> dict:
    """family -> folder under root, each saved once (seed 0)."""
    import torch
    import transformers
    from pathlib import Path
    out = {}
    for family, (cls, cfg) in configs().items():
        folder = Path(root) / family
        if not (folder / "config.json").is_file():
            torch.manual_seed(0)
            cfg._attn_implementation = "eager"
            getattr(transformers, cls)(cfg).eval().save_pretrained(folder, safe_serialization=True)
        out[family] = str(folder)
    return out
