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
import json
import os

from ember.errors import FormatError
from ember.io.formats import read_json_object

# model_type -> the module with build_from_hf(config, state_dict, where)
FAMILIES = {
    "llama": "ember.models.llama.load",
    "gemma3": "ember.models.gemma3.load", "gemma3_text": "ember.models.gemma3.load",
    "bert": "ember.models.bert.load", "roberta": "ember.models.bert.load", "distilbert": "ember.models.bert.load",
    "gpt2": "ember.models.gpt2.model",
    "gpt_bigcode": "ember.models.gpt2.model",
    "mistral": "ember.models.mistral.model", "qwen2": "ember.models.mistral.model",
    "qwen3": "ember.models.qwen3.model",
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


def read_config(source, require_type: bool = True) -> dict:
    """config.json of an ember.hub.Source as a dict (a clear error when it is not JSON or, with require_type,
    lacks model_type: a family's own loader may know its configs without one)."""
    path = source.path("config.json")
    config = read_json_object(path)  # bounded: malformed, non-UTF-8 or deeply nested JSON is a FormatError
    if require_type and not isinstance(config.get("model_type"), str):
        raise FormatError(f"ember: {path}: config.json has no 'model_type' string")
    return config


def read_state_dict(source) -> dict:
    """{name: Tensor} from model.safetensors, or every shard a model.safetensors.index.json names."""
    import ember
    index = source.path("model.safetensors.index.json", required=False)
    if index is None:
        return ember.load(source.path("model.safetensors"))
    with open(index, encoding="utf-8") as f:
        weight_map = json.load(f).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) and "/" not in v and v.endswith(".safetensors")
                                                   for v in weight_map.values()):
        raise FormatError(f"ember: {index}: 'weight_map' must map names to shard files beside it")
    sd = {}
    for shard in sorted(set(weight_map.values())):
        sd.update(ember.load(source.path(shard)))
    missing = sorted(set(weight_map) - set(sd))
    if missing:
        raise FormatError(f"ember: {index} lists tensors no shard holds: {missing[:5]}")
    return sd


def family(model_type: str, where: str = "config.json"):
    if model_type not in FAMILIES:
        raise UnsupportedModelError(f"ember: {where}: model_type {model_type!r} is not supported "
                                    f"({', '.join(sorted(FAMILIES))})")
    return importlib.import_module(FAMILIES[model_type])


def from_pretrained(source, device=None, dtype=None):
    """The model (eval mode, no grad) a Hugging Face folder / hub id / URL holds, on `device` in `dtype`."""
    from ember import hub
    src = hub.resolve(source)
    config = read_config(src)
    mod = family(config["model_type"], os.fspath(src.path("config.json")))
    model = mod.build_from_hf(config, read_state_dict(src), str(src.base))
    if device is not None or dtype is not None:
        model = model.to(*([device] if device is not None else []), **({"dtype": dtype} if dtype is not None else {}))
    return model.eval().requires_grad_(False)


def load_tokenizer(source):
    """An ember.tokenizers.Tokenizer from the source's tokenizer.json, or None when it has none."""
    from ember import hub
    from ember.tokenizers import Tokenizer
    src = hub.resolve(source)
    path = src.path("tokenizer.json", required=False)
    return None if path is None else Tokenizer.from_file(path)


def load_causal_lm(source, device=None, dtype=None):
    """(causal LM, tokenizer for ember.models.common.generate | None) from any Hugging Face folder / hub id /
    URL whose model_type ember has. The tokenizer adds what tokenizer.json's post-processor adds in front
    (Llama's and Mistral's <s>; nothing for GPT-2 or Qwen2); eos ids come from config.json."""
    from ember import hub
    from ember.models.llama.tokenizer import LlamaTokenizer
    src = hub.resolve(source)
    config = read_config(src)
    model = from_pretrained(source, device=device, dtype=dtype)
    tok = load_tokenizer(source)
    if tok is None:
        return model, None
    eos = config.get("eos_token_id")
    eos = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    front = tok.encode("", add_special_tokens=True).ids
    return model, LlamaTokenizer(tok, front[0] if front else None, eos, "json")
