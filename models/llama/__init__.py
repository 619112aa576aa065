"""Llama 2 / Llama 3 text generation (ember.models.llama).

    from ember.models.llama import load_llama, stream
    model, tok = load_llama()                 # the shipped demo model; or a folder, .bin, .gguf, URL, hub id
    for piece in stream(model, tok, "The for statement", max_new_tokens=64, temperature=0.8, seed=0):
        print(piece, end="")

config.py (LlamaConfig), model.py (Llama: the llama layout with fused projections), names.py (HF <-> ember
weight names), load.py (sources, HF folders, save_pretrained), llama2c.py, gguf.py (the GGUF name table),
chat.py (Llama-2 chat format), train.py (training), corpus.py (the demo model's data recipe), cli.py.
The toolkit (ember.models.common) holds the rest: the KV cache, the tokenizer interface, generation (sampling,
streaming), which this package's namespace offers beside Llama's own names.
"""
from ..common.cache import KVCache
from ..common.generate import SamplingParams, generate, stream
from .config import LlamaConfig
from .load import load_llama, save_pretrained
from .model import Llama

__all__ = ["KVCache", "Llama", "LlamaConfig", "SamplingParams", "generate", "load_llama", "save_pretrained", "stream"]
