"""Load Gemma 3 (text) and its tokenizer from a GGUF file (llama.cpp's `gemma3` layout: GGUF below, read by
models/common/gguf.py) or a Hugging Face folder (Gemma3ForCausalLM names: config.json, model.safetensors or the
shards model.safetensors.index.json names, tokenizer.json), by path, URL or hub id.

    model, tok = load_gemma3("gemma-3-270m-q4_k_m.gguf")     # or a folder, "owner/name", a URL

From GGUF every quantized matrix stays quantized (QLinear), the embedding too (read by row, multiplied quantized
for the tied output); norms are F32. A GGUF model multiplies its quantized weights as llama.cpp does on a CPU,
activations quantized to 8 bits per block (ember.quant.set_activations "q8"): llama.cpp's numbers, and its
speed. Gemma's RMSNorm multiplies by (1 + w): GGUF already stores 1 + w (convert_hf_to_gguf adds it), a Hugging
Face checkpoint stores w, so 1 is added here for that source.
"""
from __future__ import annotations

import numpy as np

import ember
from ember.errors import FormatError
from ember.quant import QTensor, load_quantized

from ..common.gguf import LLAMA_LAYER_NAMES, GGUFArchitecture, hf_names, load_gguf as load_any_gguf
from ..common.hf_folder import read_config, read_state_dict
from .config import Gemma3Config
from .model import Gemma3

EMBED = "model.embed_tokens.weight"


class Gemma3WeightsError(FormatError):
    """Weights that do not describe the configured Gemma 3 model (names the file and the tensor)."""


def build(config: Gemma3Config, sd: dict, where: str) -> Gemma3:
    """A Gemma3 from {HF name: Tensor | QTensor | ndarray} with effective (1 + w) norm weights."""
    if EMBED not in sd:
        raise Gemma3WeightsError(f"ember: {where} has no token embedding ({EMBED!r} / 'token_embd.weight')")
    with ember.nn.init.skipped():  # every weight comes from the file
        model = Gemma3(config)
    sd = dict(sd)
    emb = sd[EMBED]
    try:
        model.model.embed_tokens.load_table(emb)
    except ValueError as e:
        raise Gemma3WeightsError(f"ember: {where}: {e}") from None
    if isinstance(emb, QTensor):
        del sd[EMBED]  # kept quantized, outside the state dict (as QLinear weights are)
    load_quantized(model, {k: v if isinstance(v, (QTensor, ember.Tensor)) else ember.tensor(v) for k, v in sd.items()})
    return model.eval().requires_grad_(False)


# ============================================================================ GGUF: the name table

GGUF = GGUFArchitecture(
    "gemma3", {**LLAMA_LAYER_NAMES, "post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"},
    {"token_embd.weight": EMBED, "output_norm.weight": "model.norm.weight"}, Gemma3Config.from_gguf, build,
    error=Gemma3WeightsError, refused={"output.weight": "an untied output: Gemma 3 ties its output to token_embd"},
    activations="q8")


def hf_names_from_gguf(tensors: dict, where: str) -> dict:
    """{GGUF name: Tensor | QTensor | ndarray} -> {HF name: the same}; quantized matrices untouched."""
    return hf_names(tensors, GGUF, None, where)


def load_gguf(path, tokenizer: bool = True, activations: str = "q8"):
    """(Gemma3, GGUF tokenizer | None) from a .gguf file; activations: see ember.quant.set_activations."""
    return load_any_gguf(path, GGUF, tokenizer=tokenizer, activations=activations)


# ============================================================================ Hugging Face folders

def from_hf_state_dict(sd: dict, config: Gemma3Config, where: str) -> Gemma3:
    """Gemma3ForCausalLM names (optionally under 'model.language_model.'), norms stored as w: 1 is added."""
    out = {}
    for k, v in sd.items():
        k = k.replace("model.language_model.", "model.")
        if k == "lm_head.weight":
            continue  # tied to the embedding
        if k.endswith("norm.weight"):
            v = np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float32) + np.float32(1.0)
        out[k] = v
    return build(config, out, where)


def load_hf(source, tokenizer: bool = True):
    """(Gemma3, TextTokenizer | None) from a Hugging Face folder (an ember.hub.Source)."""
    from ..common.tokenizer import TextTokenizer
    config = Gemma3Config.from_hf(read_config(source, require_type=False), str(source.path("config.json")))
    model = from_hf_state_dict(read_state_dict(source), config, str(source.base))
    tok_path = source.path("tokenizer.json", required=False) if tokenizer else None
    tok = None
    if tok_path is not None:
        with open(tok_path, encoding="utf-8") as f:
            tok = TextTokenizer.from_json(f.read(), config.bos_token_id, config.eos_token_ids)
    return model, tok


def load_gemma3(src: str, device=None):
    """(model in eval mode, tokenizer) from a .gguf path/URL/hub file or a Hugging Face folder/hub id."""
    from ember import hub
    source = hub.resolve(src)
    if source.file is not None and source.file.endswith(".gguf"):
        model, tok = load_gguf(source.path(source.file))
    else:
        model, tok = load_hf(source)
    if device is not None:
        model = model.to(device)
    return model, tok


def build_from_hf(config: dict, sd: dict, where: str) -> Gemma3:
    """ember.models.auto's entry: a Gemma3 from config.json (as a dict) and its Hugging Face state dict."""
    return from_hf_state_dict(sd, Gemma3Config.from_hf(config, where), where)
