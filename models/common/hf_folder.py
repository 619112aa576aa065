"""A Hugging Face model folder's files (an ember.hub.Source: a folder, hub id or URL in the hub layout):
config.json as a dict, and the weights of model.safetensors or of every shard model.safetensors.index.json
names."""
from __future__ import annotations

import json

from ember.errors import FormatError
from ember.io.formats import read_json_object

from .config_check import check_fields


def read_config(source, require_type: bool = True) -> dict:
    """config.json of an ember.hub.Source as a dict (a clear error when it is not JSON or, with require_type,
    lacks model_type: a family's own loader may know its configs without one). Its well-known fields are
    checked for type and range here, for every family (config_check.py)."""
    path = source.path("config.json")
    config = read_json_object(path)  # bounded: malformed, non-UTF-8 or deeply nested JSON is a FormatError
    if require_type and not isinstance(config.get("model_type"), str):
        raise FormatError(f"ember: {path}: config.json has no 'model_type' string")
    return check_fields(config, str(path))


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
