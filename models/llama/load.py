"""Load a Llama and its tokenizer from a Hugging Face folder (config.json + safetensors, sharded with
model.safetensors.index.json too, + tokenizer.json), a llama2.c checkpoint (.bin + tokenizer.bin) or a
GGUF file — by local path, URL, or hub id (<endpoint>/<id>/resolve/main/<file>; ember.hub resolves the
source, downloads into its cache and picks the endpoint: $EMBER_HUB_ENDPOINT, else $HF_ENDPOINT).

    model, tok = load_llama("models/llama/demo")          # or "stories15M.bin", "x.gguf", "owner/name"

This module dispatches on the format; the format readers (gguf.py through models/common/gguf.py, llama2c.py,
the HF folder reader below) share names.py and never import this module. ember.models.text.load_text_model
loads these sources too, beside every other causal LM.
"""
from __future__ import annotations

import json
import os

import ember

from ..common.hf_folder import read_config, read_state_dict
from ..common.tokenizer import TextTokenizer
from . import names
from .config import LlamaConfig
from .model import Llama

DEMO_DIR = os.path.join(os.path.dirname(__file__), "demo")


def single_file(source) -> str | None:
    """The .gguf / .bin file an ember.hub.Source names, else None (a folder, or the folder of any other file)."""
    return source.file if source.file is not None and source.file.endswith((".gguf", ".bin")) else None


# ============================================================================ loaders

def load_llama(src: str | None = None, device=None, tokenizer: str | None = None) -> tuple[Llama, TextTokenizer]:
    """(model in eval mode, tokenizer) from any supported source; None -> the shipped demo model."""
    from ember import hub
    model, tok = load_source(hub.resolve(src or DEMO_DIR), tokenizer)
    if device is not None:
        model = model.to(device)
    # inference: parameters that do not require grad let the functional layer take its fused paths
    return model.eval().requires_grad_(False), tok


def load_source(source, tokenizer: str | None = None) -> tuple[Llama, TextTokenizer]:
    """(model, tokenizer) from an ember.hub.Source, by its format; tokenizer: a tokenizer file to use instead
    of the one beside the model."""
    name = single_file(source)
    if name is not None and name.endswith(".gguf"):
        from ..common.gguf import load_gguf
        from .gguf import GGUF
        return load_gguf(source.path(name), GGUF)
    if name is not None:
        from .llama2c import load_llama2c
        return load_llama2c(source.path(name), tokenizer or source.path("tokenizer.bin", required=False))
    return load_hf(source, tokenizer)


def load_hf(source, tokenizer: str | None = None) -> tuple[Llama, TextTokenizer]:
    """A Hugging Face folder (an ember.hub.Source): config.json, model.safetensors or shards + index, tokenizer.json."""
    config = LlamaConfig.from_hf(read_config(source, require_type=False))
    model = build_from_hf(config, read_state_dict(source), str(source.base))
    tok_path = tokenizer or source.path("tokenizer.json", required=False)
    tok = None
    if tok_path is not None:
        with open(tok_path, encoding="utf-8") as f:
            tok = TextTokenizer.from_json(f.read(), config.bos_token_id, config.eos_token_ids)
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
