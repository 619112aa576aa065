"""load_text_model: (model, tokenizer) for every causal LM ember runs — `ember generate`, the page and
ember.ray's Generator all load through it. The source is resolved once (ember.hub: a path, URL or hub id):

- a .gguf file is read once (models/common/gguf.py: metadata and tensors from one parse) and its
  `general.architecture` picks the GGUFArchitecture (GGUF_ARCHITECTURES: the module holding its `GGUF`);
- a llama2.c .bin loads as Llama;
- a Hugging Face folder's config.json `model_type` picks the family: Gemma 3 and Llama (and a folder without a
  model_type) through their own loaders (their tokenizers take bos/eos from config.json), every other
  ember.models.auto family through auto.load_causal_lm.

Adding a GGUF architecture is one entry here and, in its family, one GGUFArchitecture: its spec mapping
(DecoderSpec.from_gguf with its defaults) and its name table.
"""
from __future__ import annotations

import importlib

from ember.errors import FormatError

# general.architecture -> the module whose `GGUF` (a models.common.gguf.GGUFArchitecture) reads it
# ("module:NAME": that module's NAME); llama.cpp writes Mixtral as `llama` with experts (gguf_key)
GGUF_ARCHITECTURES = {"llama": "ember.models.llama.gguf", "gemma3": "ember.models.gemma3.load",
                      "llama+experts": "ember.models.mixtral.gguf",
                      "qwen2moe": "ember.models.qwen_moe.gguf:QWEN2MOE", "qwen3moe": "ember.models.qwen_moe.gguf:QWEN3MOE"}


class UnsupportedArchitectureError(FormatError):
    """A GGUF file of an architecture ember has no name table for."""


def _source(src):
    from ember import hub
    return src if isinstance(src, hub.Source) else hub.resolve(src)


def gguf_architecture(name, where: str):
    """The GGUFArchitecture for a file's `general.architecture` (a clear error naming the supported ones)."""
    if name not in GGUF_ARCHITECTURES:
        raise UnsupportedArchitectureError(f"ember: {where}: GGUF architecture {name!r} is not supported "
                                           f"({', '.join(sorted(GGUF_ARCHITECTURES))})")
    module, _, attr = GGUF_ARCHITECTURES[name].partition(":")
    return getattr(importlib.import_module(module), attr or "GGUF")


def gguf_key(md: dict):
    """The GGUF_ARCHITECTURES key of a file's metadata: its general.architecture, "llama+experts" for a llama
    with experts (Mixtral)."""
    arch = md.get("general.architecture")
    return "llama+experts" if arch == "llama" and md.get("llama.expert_count") else arch


def _folder_family(source) -> str:
    """'gemma3', 'llama' or 'auto' for a Hugging Face folder, by its config.json's model_type."""
    from ember.models.auto import FAMILIES

    from ..common.hf_folder import read_config
    if source.path("config.json", required=False) is None:
        return "llama"
    model_type = read_config(source, require_type=False).get("model_type", "")
    if isinstance(model_type, str) and model_type.startswith("gemma3"):
        return "gemma3"
    return "auto" if model_type in FAMILIES and model_type != "llama" else "llama"


def family_of(src) -> str:
    """The family a source loads as: a GGUF's architecture ('gemma3', 'llama', ...), 'llama' for a llama2.c
    .bin, else the folder's ('gemma3', 'llama', or 'auto': another ember.models.auto family)."""
    source = _source(src)
    file = source.file or ""
    if file.endswith(".gguf"):
        from ember.io.gguf import metadata
        return str(metadata(source.path(file)).get("general.architecture"))
    return "llama" if file.endswith(".bin") else _folder_family(source)


def load_text_model(src, device=None, tokenizer: str | None = None, activations: str | None = None):
    """(model in eval mode on `device`, tokenizer | None) from any source a causal LM comes in (see above);
    src: a path, URL, hub id or ember.hub.Source. tokenizer: a tokenizer file to use instead of the one beside
    a Llama model (tokenizer.json / llama2.c's tokenizer.bin). activations: how quantized weights multiply
    ("q8": llama.cpp's 8-bit activations, "float32": transformers' arithmetic; None: the architecture's default,
    see ember.quant.set_activations). The tokenizer carries the model's chat template as `.chat_template`
    (None for a base model)."""
    source = _source(src)
    file = source.file or ""
    if file.endswith(".gguf"):
        from ..common.gguf import load_gguf, read_gguf
        path = source.path(file)
        gguf = read_gguf(path)
        model, tok = load_gguf(path, gguf_architecture(gguf_key(gguf[0]), str(path)), gguf=gguf,
                               activations=activations)
    else:
        family = "llama" if file.endswith(".bin") else _folder_family(source)
        if family == "gemma3":
            from ember.models.gemma3.load import load_hf
            model, tok = load_hf(source)
        elif family == "auto":
            from ember.models.auto import load_causal_lm
            model, tok = load_causal_lm(source)
        else:
            from ember.models.llama.load import load_source
            model, tok = load_source(source, tokenizer)
        if tok is not None and getattr(tok, "chat_template", None) is None and not file:
            from ..common.chat_template import from_hf_folder
            tok.chat_template = from_hf_folder(source)  # tokenizer_config.json / chat_template.jinja, if any
    if activations is not None and not file.endswith(".gguf"):
        from ember.quant import set_activations
        set_activations(model, activations)
    if device is not None:
        model = model.to(device)
    return model.eval().requires_grad_(False), tok
