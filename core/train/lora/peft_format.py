"""LoRA adapters in PEFT's layout: a folder with adapter_config.json and adapter_model.safetensors, tensors named
`base_model.model.<checkpoint module>.lora_A.weight` (r, in) and `.lora_B.weight` (out, r). peft's
PeftModel.from_pretrained loads what save_adapter writes; load_adapter reads what peft's save_pretrained writes."""
from __future__ import annotations

import json
import os

from ... import autograd
from ...io import safetensors
from ...nn.module import Module
from .layers import AdapterError, LoraConfig, add_adapters, checkpoint_names, lora_layers

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model."
MAX_CONFIG_BYTES = 1 << 20
# peft fields whose non-default values change the computation in ways ember does not implement
UNSUPPORTED = {"use_dora": (False, None), "bias": ("none", None), "modules_to_save": (None, []),
               "layers_to_transform": (None, []), "layers_pattern": (None, []), "rank_pattern": ({}, None),
               "alpha_pattern": ({}, None), "fan_in_fan_out": (False, None), "exclude_modules": (None, [], ""),
               "target_parameters": (None, []), "lora_bias": (False, None), "trainable_token_indices": (None,),
               "megatron_config": (None,), "layer_replication": (None, []), "use_qalora": (False, None),
               "alora_invocation_tokens": (None,), "velora_config": (None,), "monteclora_config": (None,),
               "use_bdlora": (None, False), "arrow_config": (None,), "kasa_config": (None,)}


def adapter_tensors(model: Module) -> dict:
    """{PEFT name: Parameter} of the model's adapters (the tensors adapter_model.safetensors holds)."""
    out = {}
    for qname, m in lora_layers(model):
        for part, full, _ in checkpoint_names(qname, m.base_layer):
            if part in m.lora_A._modules:
                out[f"{PREFIX}{full}.lora_A.weight"] = m.lora_A[part].weight
                out[f"{PREFIX}{full}.lora_B.weight"] = m.lora_B[part].weight
    return out


def config_dict(config: LoraConfig, base_model_name_or_path: str | None = None) -> dict:
    """adapter_config.json's fields, peft's names and defaults."""
    t = config.target_modules
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
            "r": config.r, "lora_alpha": config.lora_alpha, "lora_dropout": config.lora_dropout,
            "target_modules": t if isinstance(t, str) else list(t), "use_rslora": config.use_rslora,
            "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
            "modules_to_save": None, "use_dora": False, "layers_to_transform": None, "layers_pattern": None,
            "rank_pattern": {}, "alpha_pattern": {}, "revision": None}


def save_adapter(model: Module, folder, base_model_name_or_path: str | None = None):
    """Write the model's adapters (float32) and their config into `folder` (created if missing)."""
    config = getattr(model, "lora_config", None)
    if config is None:
        raise AdapterError(f"ember: {type(model).__name__} holds no LoRA adapters to save")
    os.makedirs(folder, exist_ok=True)
    tensors = {k: p.detach().float().to("cpu") for k, p in adapter_tensors(model).items()}
    safetensors.save(tensors, os.path.join(folder, WEIGHTS_FILE), metadata={"format": "pt"})
    with open(os.path.join(folder, CONFIG_FILE), "w") as f:
        json.dump(config_dict(config, base_model_name_or_path), f, indent=2)


def read_config(path) -> LoraConfig:
    """adapter_config.json -> LoraConfig; refuses another PEFT method and features ember does not implement."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise AdapterError(f"ember: cannot read the adapter config {path}: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise AdapterError(f"ember: {path}: over {MAX_CONFIG_BYTES} bytes, too large for an adapter config")
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise AdapterError(f"ember: {path}: not JSON ({e})") from None
    if not isinstance(d, dict):
        raise AdapterError(f"ember: {path}: expected a JSON object, got {type(d).__name__}")
    if d.get("peft_type") != "LORA":
        raise AdapterError(f"ember: {path}: peft_type is {d.get('peft_type')!r}; ember loads LORA adapters")
    for key, allowed in UNSUPPORTED.items():
        if key in d and d[key] not in allowed:
            raise AdapterError(f"ember: {path}: {key}={d[key]!r} is not supported (expected {allowed[0]!r})")
    fields = {k: d[k] for k in ("r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora") if k in d}
    if "target_modules" not in fields:
        raise AdapterError(f"ember: {path}: no target_modules")
    try:
        return LoraConfig(**fields)
    except AdapterError as e:
        raise AdapterError(str(e).replace("ember: ", f"ember: {path}: ", 1)) from None


def load_adapter(model: Module, folder) -> Module:
    """Load a PEFT-layout adapter folder into the model: adds adapters per its config when the model has none,
    then loads every tensor strictly (missing, unexpected or mis-shaped ones raise AdapterError). Returns the model."""
    config = read_config(os.path.join(folder, CONFIG_FILE))
    weights = os.path.join(folder, WEIGHTS_FILE)
    if not os.path.exists(weights):
        raise AdapterError(f"ember: {folder}: no {WEIGHTS_FILE}")
    if getattr(model, "lora_config", None) is None:
        add_adapters(model, config)
    elif model.lora_config.scaling != config.scaling:
        raise AdapterError(f"ember: {folder}: scaling {config.scaling:g} differs from the model's adapters' "
                           f"{model.lora_config.scaling:g}")
    mine = adapter_tensors(model)
    f = safetensors.safe_open(weights, mmap=False)
    try:
        names = list(f.keys())
        missing = sorted(set(mine) - set(names))
        unexpected = sorted(set(names) - set(mine))
        if missing or unexpected:
            raise AdapterError(f"ember: {weights} does not fit {type(model).__name__}'s adapters: missing "
                               f"{missing[:6]}{' ...' if len(missing) > 6 else ''}, unexpected {unexpected[:6]}"
                               f"{' ...' if len(unexpected) > 6 else ''}")
        with autograd.no_grad():
            for k in names:
                t, p = f.get_tensor(k), mine[k]
                if tuple(t.shape) != tuple(p.shape):
                    raise AdapterError(f"ember: {weights}: {k} has shape {tuple(t.shape)}, the model's adapter "
                                       f"{tuple(p.shape)}")
                p.copy_(t.float().to(p.device))
    finally:
        f.close()
    return model
