"""Llama from a GGUF file (llama.cpp's convert_hf_to_gguf.py layout): config from `llama.*` metadata,
tensors from `token_embd` / `blk.N.*` / `output*` (F32, F16, BF16 or any GGML quant type; quantized matrices
stay quantized, in QLinear layers), and the tokenizer from `tokenizer.ggml.*` (SentencePiece-style "llama"
vocabularies through llama2.c's tokenizer, byte-level "gpt2" BPE through a tokenizer.json built here).

llama.cpp stores q/k rows in the interleaved-pair rotary layout (it permutes HF's on conversion); they are
permuted back to HF's rotate-half layout here.
"""
from __future__ import annotations

import json
import os

import numpy as np

import ember
from ember.quant import QTensor
from ember.io.gguf import arch_fields

from . import names
from .config import LlamaConfig
from .model import Llama
from .names import LlamaWeightsError, to_half_layout
from .tokenizer import LlamaTokenizer

_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
          "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}


def config_from_metadata(md: dict, where: str) -> LlamaConfig:
    g = arch_fields(md, "llama", where, error=LlamaWeightsError)
    heads = int(g("attention.head_count"))
    scaling = None
    if g("rope.scaling.type") == "linear":
        scaling = {"rope_type": "linear", "factor": float(g("rope.scaling.factor"))}
    eos = md.get("tokenizer.ggml.eos_token_id")
    return LlamaConfig(vocab_size=int(g("vocab_size", len(md.get("tokenizer.ggml.tokens", [])))),
                       dim=int(g("embedding_length")), hidden_dim=int(g("feed_forward_length")),
                       n_layers=int(g("block_count")), n_heads=heads,
                       n_kv_heads=int(g("attention.head_count_kv", heads)), max_seq_len=int(g("context_length", 2048)),
                       norm_eps=float(g("attention.layer_norm_rms_epsilon", 1e-5)),
                       rope_theta=float(g("rope.freq_base", 10000.0)), rope_scaling=scaling,
                       head_dim=g("attention.key_length"), tie_embeddings=False,
                       bos_token_id=md.get("tokenizer.ggml.bos_token_id", 1),
                       eos_token_ids=[] if eos is None else [eos])


def _permute_rows(t, n_heads):
    """Interleaved-pair rows -> rotate-half rows; a QTensor's rows are whole quantized blocks, so its raw
    rows are reordered without dequantizing."""
    perm = to_half_layout(np.arange(t.shape[0])[:, None], n_heads)[:, 0]
    if isinstance(t, QTensor):
        return QTensor(t.data[perm], t.ggml_type, t.shape, t.name)
    return t[perm]


def _cat_rows(ts):
    """Fuse q/k/v or gate/up: raw block rows when all share one quant type, else float32 numpy."""
    if all(isinstance(t, QTensor) for t in ts) and len({t.ggml_type for t in ts}) == 1:
        shape = (sum(t.shape[0] for t in ts), ts[0].shape[1])
        return QTensor(np.concatenate([t.data for t in ts]), ts[0].ggml_type, shape)
    return np.concatenate([t.numpy() if isinstance(t, QTensor) else t for t in ts])


def state_dict_from_gguf(tensors: dict, c: LlamaConfig, where: str) -> tuple[dict, LlamaConfig]:
    """{GGUF name: Tensor | QTensor} -> ({HF name: numpy float32 | QTensor (2-d quantized)}, config with
    tie_embeddings settled)."""
    if "rope_freqs.weight" in tensors:
        raise LlamaWeightsError(f"ember: {where} carries Llama 3 'rope_freqs.weight' rope factors, which ember's "
                                f"GGUF loader does not apply yet")
    sd = {}
    for name, t in tensors.items():
        a = t if isinstance(t, QTensor) and t.ndim == 2 else np.asarray(t.numpy(), np.float32)
        if name in _TOP:
            sd[_TOP[name]] = a
            continue
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER and parts[3] == "weight":
            hf = _LAYER[parts[2]]
            if hf == "self_attn.q_proj":
                a = _permute_rows(a, c.n_heads)
            elif hf == "self_attn.k_proj":
                a = _permute_rows(a, c.n_kv_heads)
            sd[f"model.layers.{parts[1]}.{hf}.weight"] = a
        else:
            raise LlamaWeightsError(f"ember: {where}: unexpected tensor {name!r} {tuple(t.shape)}")
    if "lm_head.weight" not in sd:
        c = c.replace(tie_embeddings=True)  # llama.cpp omits output.weight when the embedding is tied
    return sd, c


def tokenizer_from_metadata(md: dict, vocab_size: int):
    kind = md.get("tokenizer.ggml.model")
    tokens = md.get("tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        return None
    bos, eos = md.get("tokenizer.ggml.bos_token_id"), md.get("tokenizer.ggml.eos_token_id")
    if kind == "llama":
        from ember.tokenizers.llama2c import Llama2cTokenizer
        pieces = [t.replace("\u2581", " ").encode("utf-8") for t in tokens]
        scores = [float(s) for s in md.get("tokenizer.ggml.scores", [0.0] * len(tokens))]
        impl = Llama2cTokenizer(pieces, scores, max(len(p) for p in pieces))
        return LlamaTokenizer(impl, 1 if bos is None else bos, [2 if eos is None else eos], "llama2c")
    if kind == "gpt2":
        types = md.get("tokenizer.ggml.token_type", [1] * len(tokens))
        special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
        bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        merges = [m.split(" ", 1) for m in md.get("tokenizer.ggml.merges", [])]
        j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
             "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
             "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                       "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
        return LlamaTokenizer.from_json(json.dumps(j), bos, [] if eos is None else [eos])
    raise LlamaWeightsError(f"ember: GGUF tokenizer model {kind!r} is not supported (llama, gpt2)")


def load_gguf(path):
    """(Llama, LlamaTokenizer | None) from a .gguf file. Quantized matrices stay quantized (QLinear layers
    computing with ember.quant's matmul); embeddings, norms and F16/BF16 weights become float32."""
    from ember.io import metadata  # (ember.io via the lazy attribute recurses: reported to the lead)
    from ember.quant import load_quantized
    where = os.fspath(path)
    md = metadata(path)
    c = config_from_metadata(md, where)
    sd, c = state_dict_from_gguf(ember.load(path), c, where)
    sd = names.from_hf(sd, c, where, cat_rows=_cat_rows)
    model = Llama(c)
    load_quantized(model, {k: v if isinstance(v, QTensor) else ember.tensor(v) for k, v in sd.items()})
    return model, tokenizer_from_metadata(md, c.vocab_size)
