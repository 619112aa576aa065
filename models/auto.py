"""ember.models.auto: one loader for Hugging Face model folders, dispatching on config.json's `model_type`.

    model = from_pretrained("sentence-transformers/all-MiniLM-L6-v2", device="webgpu", dtype="float16")
    tok = load_tokenizer("path/to/folder")          # tokenizer.json, or None

A source is a folder, a hub id or a URL in the hub layout (ember.hub.resolve): config.json + model.safetensors
or a sharded model.safetensors.index.json + tokenizer.json. Each family module named in FAMILIES has
`build_from_hf(config: dict, state_dict: dict, where: str) -> model`: it builds the model from the config and loads
the weights strictly (names as in the checkpoint; missing, unexpected or misshapen tensors are one error).
"""
from __future__ import annotations

import importlib
import os

from ember.errors import FormatError

from .common.hf_folder import read_config, read_state_dict

# model_type -> the module with build_from_hf(config, state_dict, where)
FAMILIES = {
    "llama": "ember.models.llama.load",
    "gemma3": "ember.models.gemma3.load", "gemma3_text": "ember.models.gemma3.load",
    "bert": "ember.models.bert.load", "roberta": "ember.models.bert.load", "distilbert": "ember.models.bert.load",
    "gpt2": "ember.models.gpt2.model",
    "gpt_bigcode": "ember.models.gpt2.model",
    "mistral": "ember.models.mistral.model", "qwen2": "ember.models.mistral.model",
    "qwen3": "ember.models.qwen3.model",
    "mixtral": "ember.models.mixtral.model",
    "qwen2_moe": "ember.models.qwen_moe.model", "qwen3_moe": "ember.models.qwen_moe.model",
    "starcoder2": "ember.models.starcoder2.model",
    "phi3": "ember.models.phi.phi3", "phi": "ember.models.phi.phi2",
    "gemma": "ember.models.gemma.model",
    "glm": "ember.models.glm.model", "glm4": "ember.models.glm.model",
    "falcon": "ember.models.falcon.model",
    "vit": "ember.models.vit.model",
    "clip": "ember.models.clip.model",
    "t5": "ember.models.t5.model",
    "sam": "ember.models.sam.model",
}


class UnsupportedModelError(FormatError):
    """config.json names a model_type ember has no family for."""


def family(model_type: str, where: str = "config.json"):
    if model_type not in FAMILIES:
        raise UnsupportedModelError(f"ember: {where}: model_type {model_type!r} is not supported "
                                    f"({', '.join(sorted(FAMILIES))})")
    return importlib.import_module(FAMILIES[model_type])


def _resolved(source):
    """An ember.hub.Source for a path / hub id / URL, or the Source itself (resolved once by the caller)."""
    from ember import hub
    return source if isinstance(source, hub.Source) else hub.resolve(source)


def from_pretrained(source, device=None, dtype=None):
    """The model (eval mode, no grad) a Hugging Face folder / hub id / URL (or ember.hub.Source) holds, on
    `device` in `dtype`."""
    src = _resolved(source)
    config = read_config(src)
    mod = family(config["model_type"], os.fspath(src.path("config.json")))
    model = mod.build_from_hf(config, read_state_dict(src), str(src.base))
    if device is not None or dtype is not None:
        model = model.to(*([device] if device is not None else []), **({"dtype": dtype} if dtype is not None else {}))
    return model.eval().requires_grad_(False)


def load_tokenizer(source):
    """An ember.tokenizers.Tokenizer from the source's tokenizer.json, or None when it has none."""
    from ember.tokenizers import Tokenizer
    src = _resolved(source)
    path = src.path("tokenizer.json", required=False)
    return None if path is None else Tokenizer.from_file(path)


def load_causal_lm(source, device=None, dtype=None):
    """(causal LM, tokenizer for ember.models.common.generate | None) from any Hugging Face folder / hub id /
    URL whose model_type ember has. The tokenizer adds what tokenizer.json's post-processor adds in front
    (Llama's and Mistral's <s>; nothing for GPT-2 or Qwen2); eos ids come from config.json."""
    from .common.tokenizer import TextTokenizer
    src = _resolved(source)
    config = read_config(src)
    model = from_pretrained(src, device=device, dtype=dtype)
    tok = load_tokenizer(src)
    if tok is None:
        return model, None
    eos = config.get("eos_token_id")
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    front = tok.encode("", add_special_tokens=True).ids
    return model, TextTokenizer(tok, front[0] if front else None, eos, "json")
