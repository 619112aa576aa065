"""Mistral (sliding-window attention) and Qwen2 (q/k/v biases, sliding window on the layers from
max_window_layers on), after transformers' modeling_mistral.py / modeling_qwen2.py (v5.x): the llama layout
(models/common/layout.py) as it is, and with biases."""
from __future__ import annotations

from ..common.layout import LlamaLayout, build


class Mistral(LlamaLayout):
    pass


class Qwen2(LlamaLayout):
    attn_bias = True


def build_from_hf(config: dict, sd: dict, where: str):
    return build(Qwen2 if config.get("model_type") == "qwen2" else Mistral, config, sd, where)
