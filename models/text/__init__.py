"""Text generation with any causal LM ember has (ember.models.text): one loader for every source.

    from ember.models.common.generate import stream
    from ember.models.text import load_text_model
    model, tok = load_text_model("gemma-3-270m-q4_k_m.gguf")   # or a llama2.c .bin, a folder, a URL, a hub id
    for piece in stream(model, tok, "The capital of France is", max_new_tokens=16, temperature=0):
        print(piece, end="")

load.py (load_text_model, family_of: the source's format and architecture pick the family), cli.py (`ember
generate`, and the printing `ember llama` shares).
"""
from .load import family_of, load_text_model

__all__ = ["family_of", "load_text_model"]
