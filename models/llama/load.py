"""Load a Llama and its tokenizer from a Hugging Face folder (config.json + safetensors, sharded with
model.safetensors.index.json too, + tokenizer.json), a llama2.c checkpoint (.bin + tokenizer.bin) or a
GGUF file — by local path, URL, or hub id (<endpoint>/<id>/resolve/main/<file>; ember.hub resolves the
source, downloads into its cache and picks the endpoint: $EMBER_HUB_ENDPOINT, else $HF_ENDPOINT).

    model, tok = load_llama("models/llama/demo")          # or "stories15M.bin", "x.gguf", "owner/name"

This module dispatches on the format; the format readers (gguf.py, llama2c.py, the HF folder reader
below) share names.py and never import this module.
"""
from __future__ import annotations

import json
import os

import ember

from . import names
from .config import LlamaConfig
from .model import Llama
from .names import from_hf_state_dict  # noqa: F401  (its home was here; kept importable)
from .tokenizer import LlamaTokenizer

DEMO_DIR = os.path.join(os.path.dirname(__file__), "demo")


# ============================================================================ sources: path, URL, hub id

def resolve(src: str):
    """src -> (an ember.hub.Source where its files are, the single file's name for .bin/.gguf sources, else
    None: a folder, or the folder of any other file named)."""
    from ember import hub
    source = hub.resolve(src)
    name = source.file if source.file is not None and source.file.endswith((".gguf", ".bin")) else None
    return source, name


# ============================================================================ loaders

def load_llama(src: str | None = None, device=None, tokenizer: str | None = None) -> tuple[Llama, LlamaTokenizer]:
    """(model in eval mode, tokenizer) from any supported source; None -> the shipped demo model."""
    source, name = resolve(src or DEMO_DIR)
    if name is not None and name.endswith(".gguf"):
        from .gguf import load_gguf
        model, tok = load_gguf(source.path(name))
    elif name is not None and name.endswith(".bin"):
        from .llama2c import load_llama2c
        tok_path = tokenizer or source.path("tokenizer.bin", required=False)
        model, tok = load_llama2c(source.path(name), tok_path)
    else:
        model, tok = load_hf(source, tokenizer)
    if device is not None:
        model = model.to(device)
    # inference: parameters that do not require grad let the functional layer take its fused paths
    return model.eval().requires_grad_(False), tok


def load_hf(source, tokenizer: str | None = None) -> tuple[Llama, LlamaTokenizer]:
    """A Hugging Face folder (an ember.hub.Source): config.json, model.safetensors or shards + index, tokenizer.json."""
    from ..auto import read_config, read_state_dict
    config = LlamaConfig.from_hf(read_config(source, require_type=False))
    model = build_from_hf(config, read_state_dict(source), str(source.base))
    tok_path = tokenizer or source.path("tokenizer.json", required=False)
    tok = None
    if tok_path is not None:
        with open(tok_path, encoding="utf-8") as f:
            tok = LlamaTokenizer.from_json(f.read(), config.bos_token_id, config.eos_token_ids)
    return model, tok


def build_from_hf(config, sd: dict, where: str) -> Llama:
    """A Llama from a config.json (dict or LlamaConfig) and its Hugging Face state dict (ember.models.auto's entry)."""
    config = config if isinstance(config, LlamaConfig) else LlamaConfig.from_hf(config)
    config.check_weights({k: v.shape for k, v in sd.items()}, where)
    return names.from_hf_state_dict(sd, config, source=f"{where} safetensors")


def save_pretrained(model: Llama, out_dir: str, tokenizer_json: str | None = None, dtype: str = "float32"):
    """Write config.json + model.safetensors (HF names, loadable by transformers) [+ tokenizer.json]."""
    os.makedirs(out_dir, exist_ok=True)
    c = model.config
    sd = names.to_hf({k: v.detach() for k, v in model.state_dict().items()}, c)
    sd = {k: v.to(dtype).contiguous() for k, v in sd.items()}
    ember.save(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**c.to_hf(), "torch_dtype": dtype}, f, indent=1)
    if tokenizer_json is not None:
        with open(tokenizer_json, encoding="utf-8") as src, \
                open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as dst:
            dst.write(src.read())
