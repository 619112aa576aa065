"""llama2.c checkpoints (karpathy/llama2.c, export.py `legacy_export`, version 0; run.c `memory_map_weights`):
a header of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative = unshared
classifier), seq_len), then float32 weights in the order below, each tensor stacked over layers.

llama2.c rotates interleaved pairs (x0, x1), (x2, x3), ... while Hugging Face rotates halves; its q/k rows
are permuted into HF's layout on load (the permutation of transformers' convert_llama_weights_to_hf.py).
"""
from __future__ import annotations

import os
import struct

import numpy as np

import ember

from ..common.positions import to_half_layout, to_pair_layout
from .config import LlamaConfig
from .names import LlamaWeightsError, from_hf_state_dict

HEADER = struct.Struct("<7i")
MAGIC_V1 = 0x616B3432  # "ak42": export.py's version 1/2 files, which carry a different header


def layout(c: LlamaConfig, shared: bool) -> list[tuple[str, tuple]]:
    """(name, shape) of each tensor in file order, as run.c maps them."""
    L, d, hd, hid = c.n_layers, c.dim, c.head_dim, c.hidden_dim
    out = [("token_embedding_table", (c.vocab_size, d)),         # (vocab, dim)
           ("rms_att_weight", (L, d)),                           # (n_layers, dim)
           ("wq", (L, c.n_heads * hd, d)),                       # (n_layers, n_heads * head_size, dim)
           ("wk", (L, c.n_kv_heads * hd, d)),                    # (n_layers, n_kv_heads * head_size, dim)
           ("wv", (L, c.n_kv_heads * hd, d)),
           ("wo", (L, d, c.n_heads * hd)),                       # (n_layers, dim, n_heads * head_size)
           ("rms_ffn_weight", (L, d)),
           ("w1", (L, hid, d)),                                  # gate (n_layers, hidden_dim, dim)
           ("w2", (L, d, hid)),                                  # down (n_layers, dim, hidden_dim)
           ("w3", (L, hid, d)),                                  # up   (n_layers, hidden_dim, dim)
           ("rms_final_weight", (d,)),
           ("freq_cis_real", (c.max_seq_len, hd // 2)),         # unused by run.c, skipped
           ("freq_cis_imag", (c.max_seq_len, hd // 2))]
    if not shared:
        out.append(("wcls", (c.vocab_size, d)))                   # (vocab, dim)
    return out


def read_header(data: bytes, where: str) -> tuple[LlamaConfig, bool]:
    if len(data) < HEADER.size:
        raise LlamaWeightsError(f"ember: {where} is {len(data)} bytes, shorter than the llama2.c header "
                                f"({HEADER.size})")
    if struct.unpack_from("<I", data)[0] == MAGIC_V1:
        raise LlamaWeightsError(f"ember: {where} is a llama2.c version 1/2 export ('ak42' magic); ember reads the "
                                f"legacy version 0 layout (export.py --version 0)")
    dim, hidden, layers, heads, kv_heads, vocab, seq = HEADER.unpack_from(data)
    try:
        c = LlamaConfig(vocab_size=abs(vocab), dim=dim, hidden_dim=hidden, n_layers=layers, n_heads=heads,
                        n_kv_heads=kv_heads, max_seq_len=seq, norm_eps=1e-5, tie_embeddings=vocab > 0,
                        bos_token_id=1, eos_token_ids=[2])
    except ValueError as e:
        raise LlamaWeightsError(f"ember: {where} has an invalid llama2.c header {HEADER.unpack_from(data)}: "
                                f"{e}") from None
    if dim != heads * c.head_dim:
        raise LlamaWeightsError(f"ember: {where}: dim {dim} is not a multiple of n_heads {heads}")
    return c, vocab > 0


def read_llama2c(data: bytes, where: str = "llama2.c checkpoint") -> tuple[LlamaConfig, dict]:
    """bytes -> (config, {HF name: Tensor}) with q/k rows in rotate-half layout."""
    c, shared = read_header(data, where)
    raw, off = {}, HEADER.size
    for name, shape in layout(c, shared):
        n = int(np.prod(shape)) * 4
        if off + n > len(data):
            raise LlamaWeightsError(f"ember: {where} is truncated: tensor {name!r} {shape} needs bytes "
                                    f"[{off}, {off + n}) but the file has {len(data)}")
        raw[name] = np.frombuffer(data, np.float32, n // 4, off).reshape(shape)
        off += n
    if off != len(data):
        raise LlamaWeightsError(f"ember: {where} has {len(data) - off} bytes after the last tensor: the header "
                                f"{HEADER.unpack_from(data)} does not describe this file")
    sd = {"model.embed_tokens.weight": raw["token_embedding_table"], "model.norm.weight": raw["rms_final_weight"]}
    if not shared:
        sd["lm_head.weight"] = raw["wcls"]
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": raw["rms_att_weight"][i],
                   p + "post_attention_layernorm.weight": raw["rms_ffn_weight"][i],
                   p + "self_attn.q_proj.weight": to_half_layout(raw["wq"][i], c.n_heads),
                   p + "self_attn.k_proj.weight": to_half_layout(raw["wk"][i], c.n_kv_heads),
                   p + "self_attn.v_proj.weight": raw["wv"][i], p + "self_attn.o_proj.weight": raw["wo"][i],
                   p + "mlp.gate_proj.weight": raw["w1"][i], p + "mlp.down_proj.weight": raw["w2"][i],
                   p + "mlp.up_proj.weight": raw["w3"][i]})
    return c, {k: ember.tensor(np.ascontiguousarray(v)) for k, v in sd.items()}


def write_llama2c(path, c: LlamaConfig, sd: dict):
    """{HF name: array} -> a version-0 llama2.c file (the inverse of read_llama2c; for tests and export)."""
    a = {k: np.asarray(v, np.float32) for k, v in sd.items()}
    L = range(c.n_layers)
    lay = lambda n: np.stack([a[f"model.layers.{i}.{n}"] for i in L])
    freqs = np.arange(c.max_seq_len)[:, None] * c.inv_freq()[None, :]
    parts = [a["model.embed_tokens.weight"], lay("input_layernorm.weight"),
             np.stack([to_pair_layout(a[f"model.layers.{i}.self_attn.q_proj.weight"], c.n_heads) for i in L]),
             np.stack([to_pair_layout(a[f"model.layers.{i}.self_attn.k_proj.weight"], c.n_kv_heads) for i in L]),
             lay("self_attn.v_proj.weight"), lay("self_attn.o_proj.weight"), lay("post_attention_layernorm.weight"),
             lay("mlp.gate_proj.weight"), lay("mlp.down_proj.weight"), lay("mlp.up_proj.weight"),
             a["model.norm.weight"], np.cos(freqs), np.sin(freqs)]
    if not c.tie_embeddings:
        parts.append(a["lm_head.weight"])
    vocab = c.vocab_size if c.tie_embeddings else -c.vocab_size
    with open(path, "wb") as f:
        f.write(HEADER.pack(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.max_seq_len))
        for p in parts:
            f.write(np.ascontiguousarray(p, np.float32).tobytes())


def load_llama2c(path, tokenizer_path=None):
    """(Llama, TextTokenizer | None) from a .bin and, if given, llama2.c's tokenizer.bin."""
    from ..common.tokenizer import TextTokenizer
    with open(path, "rb") as f:
        data = f.read()
    c, sd = read_llama2c(data, os.fspath(path))
    model = from_hf_state_dict(sd, c, source=os.fspath(path))
    tok = None
    if tokenizer_path is not None:
        with open(tokenizer_path, "rb") as f:
            tok = TextTokenizer.from_llama2c(f.read(), c.vocab_size)
    return model, tok
