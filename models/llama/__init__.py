"""Llama 2 / Llama 3 text generation (ember.models.llama).

    from ember.models.llama import load_llama, stream
    model, tok = load_llama()                 # the shipped demo model; or a folder, .bin, .gguf, URL, hub id
    for piece in stream(model, tok, "The for statement", max_new_tokens=64, temperature=0.8, seed=0):
        print(piece, end="")

config.py (LlamaConfig), model.py (Llama, KVCache), names.py (HF <-> ember weight names), load.py (sources,
HF folders, save_pretrained), llama2c.py, gguf.py, tokenizer.py, generate.py (sampling, streaming),
chat.py (Llama-2 chat format), train.py (training), corpus.py (the demo model's data recipe), cli.py.
"""
from .config import LlamaConfig
from .generate import SamplingParams, generate, stream
from .load import load_llama, save_pretrained
from .model import KVCache, Llama

__all__ = ["KVCache", "Llama", "LlamaConfig", "SamplingParams", "generate", "load_llama", "save_pretrained", "stream"]
