"""A tiny random-weight chat model as a Hugging Face folder (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json with a ChatML template), made with transformers and tokenizers: what the hostile `ember api`
tests and the api fuzzer serve (a forward is ~1 ms, so a request's reply costs next to nothing)."""
from __future__ import annotations

import json
from pathlib import Path

TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
            "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
            "{% endif %}")
TEXT = ["Hello world, it's a chat. The capital of France is Paris. naïve café 日本語 👍 {\"a\": 1, \"b\": [2, 3]}"] * 20


def build(folder) -> str:
    """The folder (made once; seed 0)."""
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return str(folder)
    import tokenizers
    import torch
    import transformers
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                      show_progress=False))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": TEMPLATE, "bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
        "tokenizer_class": "PreTrainedTokenizerFast"}))
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=256, eos_token_id=2, bos_token_id=0)
    torch.manual_seed(0)
    cfg._attn_implementation = "eager"
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder, safe_serialization=True)
    return str(folder)
