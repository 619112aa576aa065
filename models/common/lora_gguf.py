"""LoRA adapters as llama.cpp's GGUF adapter files (what its convert_lora_to_gguf.py writes and `--lora` /
llama-cpp-python's `lora_path=` load): metadata general.type = "adapter", adapter.type = "lora",
adapter.lora.alpha; tensors blk.N.<llama.cpp name>.weight.lora_a (r, in) and .lora_b (out, r), float32. An
architecture whose GGUF stores q/k rows in llama.cpp's interleaved-pair rotary layout (rotary_pairs) gets lora_b's
q/k rows in that layout too, as the base weights they add to are. `load_gguf_adapter` reads such a file back."""
from __future__ import annotations

import re

import numpy as np

from ember.train import lora

from .gguf import GGUFArchitecture
from .positions import to_half_layout, to_pair_layout

_PEFT = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")
_GGUF = re.compile(r"^blk\.(\d+)\.(\w+)\.weight\.lora_([ab])$")


def _heads(hf: str, config):
    return config.n_heads if hf == "self_attn.q_proj" else config.n_kv_heads


def gguf_adapter_tensors(model, arch: GGUFArchitecture) -> dict:
    """{llama.cpp name: float32 array} of the model's adapters."""
    to_gguf = {hf: g for g, hf in arch.layer_names.items()}
    out = {}
    for name, p in lora.adapter_tensors(model).items():
        m = _PEFT.match(name)
        if m is None or m.group(2) not in to_gguf:
            raise lora.AdapterError(f"ember: adapter tensor {name!r} has no {arch.name} GGUF name")
        layer, hf, ab = m.groups()
        a = np.ascontiguousarray(p.detach().float().numpy(), np.float32)
        if ab == "B" and arch.rotary_pairs and hf in ("self_attn.q_proj", "self_attn.k_proj"):
            a = np.ascontiguousarray(to_pair_layout(a, _heads(hf, model.config)))
        out[f"blk.{layer}.{to_gguf[hf]}.weight.lora_{ab.lower()}"] = a
    return out


def save_gguf_adapter(model, path, arch: GGUFArchitecture):
    """Write the model's adapters as a llama.cpp GGUF LoRA adapter for architecture `arch` (the base GGUF's)."""
    from ember.io import gguf
    config = getattr(model, "lora_config", None)
    if config is None:
        raise lora.AdapterError(f"ember: {type(model).__name__} holds no LoRA adapters to save")
    if config.use_rslora:
        raise lora.AdapterError("ember: llama.cpp scales adapters by alpha / r; an rsLoRA adapter does not fit")
    meta = {"general.architecture": arch.name, "general.type": "adapter", "adapter.type": "lora",
            "adapter.lora.alpha": np.float32(config.lora_alpha)}
    gguf.save(gguf_adapter_tensors(model, arch), path, metadata=meta)


def load_gguf_adapter(model, path, arch: GGUFArchitecture):
    """Load a llama.cpp GGUF LoRA adapter into the model (adapters added on the projections it names)."""
    from .gguf import read_gguf
    meta, tensors = read_gguf(path)
    where = str(path)
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise lora.AdapterError(f"ember: {where}: not a LoRA adapter (general.type={meta.get('general.type')!r}, "
                                f"adapter.type={meta.get('adapter.type')!r})")
    if meta.get("general.architecture") != arch.name:
        raise lora.AdapterError(f"ember: {where}: an adapter for {meta.get('general.architecture')!r}, the model is "
                                f"{arch.name!r}")
    peft, targets, ranks = {}, set(), set()
    for name, t in tensors.items():
        m = _GGUF.match(name)
        if m is None or m.group(2) not in arch.layer_names:
            raise lora.AdapterError(f"ember: {where}: unexpected tensor {name!r}")
        layer, g, ab = m.groups()
        hf = arch.layer_names[g]
        a = np.asarray(t.numpy() if hasattr(t, "numpy") else t, np.float32)
        if a.ndim != 2:
            raise lora.AdapterError(f"ember: {where}: {name} has shape {a.shape}, expected 2-d")
        if ab == "b" and arch.rotary_pairs and hf in ("self_attn.q_proj", "self_attn.k_proj"):
            a = to_half_layout(a, _heads(hf, model.config))
        ranks.add(a.shape[0] if ab == "a" else a.shape[1])
        targets.add(hf.rsplit(".", 1)[-1])
        peft[f"base_model.model.model.layers.{layer}.{hf}.lora_{ab.upper()}.weight"] = a
    if len(ranks) != 1:
        raise lora.AdapterError(f"ember: {where}: adapters of ranks {sorted(ranks)}; ember loads one rank per file")
    r = ranks.pop()
    alpha = float(meta.get("adapter.lora.alpha") or r)  # llama.cpp: no alpha means a scale of 1
    lora.add_adapters(model, lora.LoraConfig(r=r, lora_alpha=alpha, target_modules=sorted(targets)))
    mine = lora.adapter_tensors(model)
    missing, unexpected = sorted(set(mine) - set(peft)), sorted(set(peft) - set(mine))
    if missing or unexpected:
        lora.unload(model)
        raise lora.AdapterError(f"ember: {where} does not fit the model: missing {missing[:6]}, unexpected "
                                f"{unexpected[:6]}")
    import ember
    with ember.no_grad():
        for k, p in mine.items():
            if tuple(peft[k].shape) != tuple(p.shape):
                lora.unload(model)
                raise lora.AdapterError(f"ember: {where}: {k} has shape {peft[k].shape}, the model's {tuple(p.shape)}")
            p.copy_(peft[k])
    return model
