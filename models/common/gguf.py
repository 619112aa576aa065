"""Decoders from GGUF files (llama.cpp's layout), for every architecture alike: the file parsed once (metadata and
tensors from one GGUFReader), its tensors renamed to the checkpoint's Hugging Face names by the architecture's
table, the model built and loaded strictly by the architecture, the tokenizer from `tokenizer.ggml.*`.

An architecture is one GGUFArchitecture: its `general.architecture`, its name table (llama.cpp's per-layer
`blk.N.<name>` -> the HF name under `model.layers.N.`, and the whole-model tensors), its spec mapping (metadata ->
config) and its builder (config + HF-named tensors -> model). Quantized matrices stay quantized (QTensor, in
QLinear layers); what stays float is the builder's choice.

    GGUF = GGUFArchitecture("gemma3", LAYER_NAMES, TOP_NAMES, Gemma3Config.from_gguf, build, ...)
    model, tok = load_gguf("gemma-3-270m-q4_k_m.gguf", GGUF)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ember.errors import FormatError
from ember.quant import QTensor

from .positions import to_half_layout
from .tokenizer import tokenizer_from_gguf

# llama.cpp's names of one layer's tensors (its LLM_TENSOR_* names) for the llama layout: an architecture's
# table starts from it and changes what its HF names differ in
LLAMA_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                     "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                     "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                     "ffn_down": "mlp.down_proj"}
LLAMA_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                   "output.weight": "lm_head.weight"}


@dataclass(frozen=True)
class GGUFArchitecture:
    name: str                     # general.architecture
    layer_names: dict             # blk.N.<name>.{weight,bias} -> model.layers.N.<HF name>.{weight,bias}
    top_names: dict               # whole-model tensors: GGUF name -> HF name
    config: Callable              # (metadata, where) -> the model's config
    build: Callable               # (config, {HF name: Tensor | QTensor}, where) -> the model, loaded strictly
    error: type = FormatError     # what a tensor the table does not name raises
    refused: dict = field(default_factory=dict)  # GGUF name -> why ember does not load a file holding it
    rotary_pairs: bool = False    # q/k rows stored in llama.cpp's interleaved-pair layout (its LlamaModel.permute)
    activations: str | None = None  # ember.quant.set_activations mode after loading (None: as loaded, float32)
    spm: str = "llama.cpp"        # how a SentencePiece vocabulary tokenizes (tokenizer.tokenizer_from_gguf)


def read_gguf(path) -> tuple[dict, dict]:
    """(metadata, {name: Tensor | QTensor} in file order) from one parse of the file's header."""
    from ember.io.gguf import GGUFReader
    with GGUFReader(path) as f:
        return f.metadata(), {k: f.get_tensor(k) for k in f.keys()}


def permute_rows(t, n_heads: int):
    """Interleaved-pair rows -> rotate-half rows; a QTensor's rows are whole quantized blocks, so its raw
    rows are reordered without dequantizing."""
    perm = to_half_layout(np.arange(t.shape[0])[:, None], n_heads)[:, 0]
    if isinstance(t, QTensor):
        return QTensor(t.data[perm], t.ggml_type, t.shape, t.name)
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)[perm]


def cat_rows(ts):
    """Stack projections along the output axis ([q | k | v], [gate | up]): raw block rows when all share one
    quant type, else float32 numpy."""
    if all(isinstance(t, QTensor) for t in ts) and len({t.ggml_type for t in ts}) == 1:
        shape = (sum(t.shape[0] for t in ts), ts[0].shape[1])
        return QTensor(np.concatenate([t.data for t in ts]), ts[0].ggml_type, shape)
    return np.concatenate([t.numpy() if isinstance(t, QTensor) else t for t in ts])


def hf_names(tensors: dict, arch: GGUFArchitecture, config, where: str) -> dict:
    """{GGUF name: Tensor | QTensor} -> {HF name: the same tensor} by the architecture's table (q/k rows back in
    rotate-half order for `rotary_pairs`); a tensor the table does not name is an error naming it."""
    sd = {}
    for name, t in tensors.items():
        if name in arch.refused:
            raise arch.error(f"ember: {where}: {name!r} {tuple(t.shape)}: {arch.refused[name]}")
        if name in arch.top_names:
            sd[arch.top_names[name]] = t
            continue
        parts = name.split(".")
        if not (len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in arch.layer_names
                and parts[3] in ("weight", "bias")):
            raise arch.error(f"ember: {where}: unexpected tensor {name!r} {tuple(t.shape)}")
        hf = arch.layer_names[parts[2]]
        if arch.rotary_pairs and parts[3] == "weight" and hf in ("self_attn.q_proj", "self_attn.k_proj"):
            t = permute_rows(t, config.n_heads if hf == "self_attn.q_proj" else config.n_kv_heads)
        sd[f"model.layers.{parts[1]}.{hf}.{parts[3]}"] = t
    return sd


def load_gguf(path, arch: GGUFArchitecture, tokenizer: bool = True, activations: str | None = None,
              gguf: tuple[dict, dict] | None = None):
    """(model in eval mode, tokenizer | None) from a .gguf file of architecture `arch`; gguf: read_gguf(path)
    when the caller has read it already (to tell the architecture). activations: see ember.quant.set_activations
    (default: the architecture's)."""
    where = os.fspath(path)
    md, tensors = gguf if gguf is not None else read_gguf(path)
    config = arch.config(md, where)
    model = arch.build(config, hf_names(tensors, arch, config, where), where)
    mode = activations or arch.activations
    if mode is not None:
        from ember.quant import set_activations
        set_activations(model, mode)
    tok = tokenizer_from_gguf(md, where, arch.spm) if tokenizer else None
    return model.eval().requires_grad_(False), tok
