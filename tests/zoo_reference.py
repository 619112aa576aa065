"""A random-weight transformers model saved as a Hugging Face folder: the reference the zoo's parity tests
load with ember.models.auto.from_pretrained (offline, seconds)."""
from __future__ import annotations


def saved_reference(make, folder):
    """(make() in eval mode, folder): a transformers model with fresh weights drawn under seed 0, saved there
    as safetensors."""
    import torch
    torch.manual_seed(0)
    ref = make().eval()
    ref.save_pretrained(folder, safe_serialization=True)
    return ref, folder


def causal_lm(config):
    """A transformers causal LM for config, attending by the plain softmax (tight logits)."""
    import transformers
    config._attn_implementation = "eager"
    return transformers.AutoModelForCausalLM.from_config(config)
