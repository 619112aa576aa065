"""GGUF files written here with gguf-py the way llama.cpp's convert_hf_to_gguf.py lays them out, from a
transformers model: the pieces the Llama and MoE GGUF tests share (a BPE tokenizer trained on a text, the q/k row
permutation, the header's dimensions and vocabulary), and the tiny random Llama the llama.cpp tests run."""
from __future__ import annotations

import json


def bpe_tokenizer(text):
    """A byte-level BPE tokenizer (300 ids, <s> = 0 and </s> = 1) trained on text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                         show_progress=False))
    return tok


def llamacpp_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_dims(w, c):
    """The header's sizes from a transformers config c (GGUFWriter w)."""
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)


def add_bpe_vocab(w, tok):
    """tok's vocabulary and merges as a GGUF "gpt2" tokenizer, <s>/</s> control tokens and bos/eos ids."""
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(tok.to_str())["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in ("<s>", "</s>") else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)


def finish(w):
    """Write the header, the key-values and the tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_llama(vocab_size, **config):
    """A random transformers Llama (2 layers, width 64, 4 heads over 2 KV heads) drawn under seed 0, its weights
    larger than the 0.02 init so the logits carry signal."""
    import torch
    import transformers
    torch.manual_seed(0)
    hc = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False, **config)
    hf = transformers.LlamaForCausalLM(hc).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(4.0) if p.ndim == 2 else p.copy_(1 + 0.2 * torch.randn_like(p))
    return hf
