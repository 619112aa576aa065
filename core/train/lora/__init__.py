"""ember.train.lora: low-rank adapters (LoRA) over a model's Linear and quantized (QLinear) layers, trained while
the base stays frozen; merged into or removed from the base; saved and loaded in PEFT's layout.

    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    add_adapters(model, cfg, seed=0)                     # Linear/QLinear -> LoraLinear; only A and B train
    opt = ember.optim.AdamW(lora_parameters(model), lr=1e-3)
    save_adapter(model, "adapter/")                      # adapter_config.json + adapter_model.safetensors
    load_adapter(other_model, "adapter/")                # also peft's save_pretrained folders
    merge(model); unmerge(model); merge_and_unload(model)
"""
from .layers import (AdapterError, LoraConfig, LoraLinear, add_adapters, lora_layers, lora_parameters, merge,
                     merge_and_unload, unload, unmerge)
from .peft_format import adapter_tensors, load_adapter, read_config, save_adapter

__all__ = ["AdapterError", "LoraConfig", "LoraLinear", "adapter_tensors", "add_adapters", "load_adapter",
           "lora_layers", "lora_parameters", "merge", "merge_and_unload", "read_config", "save_adapter", "unload",
           "unmerge"]
