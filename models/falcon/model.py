"""Falcon (after transformers' models/falcon/modeling_falcon.py, v5.x): one fused query_key_value projection
(multi-query in the 7B layout, grouped [q_1..q_G | k | v] per kv head in the new decoder architecture, per
head [q | k | v] otherwise: reordered to the toolkit's [q | k | v] at load), rotary embeddings, attention
and a GELU MLP in parallel on one LayerNorm (or two: ln_attn / ln_mlp), the output tied to the embedding.
ALiBi checkpoints (falcon-rw) scale the bias with the scores and are refused by name."""
from __future__ import annotations

import numpy as np

import ember
from ember import nn

from ..common.attention import Attention
from ..common.spec import DecoderConfigError, DecoderSpec
from ..common.decoder import CausalLM, DecoderBlock
from ..common.mlp import MLP


class Transformer(nn.Module):
    def __init__(self, s: DecoderSpec, block):
        super().__init__()
        self.word_embeddings = nn.Embedding(s.vocab_size, s.dim)                # (vocab, dim)
        self.h = nn.ModuleList([block() for _ in range(s.n_layers)])
        self.ln_f = nn.LayerNorm(s.dim, eps=s.norm_eps)                         # (dim,)


class Falcon(CausalLM):
    def __init__(self, s: DecoderSpec, d: dict):
        super().__init__()
        self.spec, self.tie_embeddings = s, s.tie_embeddings
        bias, new = bool(d.get("bias", False)), bool(d.get("new_decoder_architecture", False))
        two = new and d.get("num_ln_in_parallel_attn", 2) == 2
        parallel = new or d.get("parallel_attn", True)
        names = ("self_attention", "mlp", "ln_attn", "ln_mlp") if two else \
            ("self_attention", "mlp", "input_layernorm", None if parallel else "post_attention_layernorm")

        def block():
            attn = Attention(s.dim, s.n_heads, s.n_kv_heads, s.head_dim, bias=bias, fused="query_key_value",
                             names=(None, None, None, "dense"))
            mlp = MLP(s.dim, s.hidden_dim, s.act, bias=bias, names=("dense_h_to_4h", "dense_4h_to_h"))
            ln = lambda: nn.LayerNorm(s.dim, eps=s.norm_eps)                    # (dim,) + (dim,)
            return DecoderBlock(attn, mlp, ln(), ln() if names[3] else None, parallel=parallel, names=names)

        self.transformer = Transformer(s, block)
        if not s.tie_embeddings:
            self.lm_head = nn.Linear(s.dim, s.vocab_size, bias=False)           # (vocab, dim)
        self.setup(rope=s.rotary(), **s.setup_args())

    @property
    def config(self):
        return self.spec

    def blocks(self):
        return self.transformer.h

    def final_norm(self, x):
        return self.transformer.ln_f(x)

    def output_embedding(self):
        return self.transformer.word_embeddings.weight

    def embed(self, tokens, positions):
        return self.transformer.word_embeddings(tokens)                         # (B, T, dim)


def _reorder_qkv(w, s: DecoderSpec, grouped: bool):
    """Rows per kv head [q_1..q_G, k, v] (grouped) or per head [q, k, v] -> [all q | all k | all v]."""
    a = w.numpy()
    K, G, hd = s.n_kv_heads, s.n_heads // s.n_kv_heads, s.head_dim
    r = a.reshape(K, G + 2, hd, *a.shape[1:]) if grouped else a.reshape(s.n_heads, 3, hd, *a.shape[1:])
    if grouped:
        parts = [r[:, :G].reshape(K * G * hd, *a.shape[1:]), r[:, G].reshape(K * hd, *a.shape[1:]),
                 r[:, G + 1].reshape(K * hd, *a.shape[1:])]
    else:
        parts = [r[:, i].reshape(s.n_heads * hd, *a.shape[1:]) for i in range(3)]
    return ember.tensor(np.ascontiguousarray(np.concatenate(parts, 0)))


def build_from_hf(d: dict, sd: dict, where: str) -> Falcon:
    if d.get("alibi"):
        raise DecoderConfigError(f"ember: {where}: Falcon with alibi=true (falcon-rw) is not supported")
    new = bool(d.get("new_decoder_architecture", False))
    if new and not d.get("parallel_attn", True):
        raise DecoderConfigError(f"ember: {where}: new_decoder_architecture with parallel_attn=false is not supported")
    heads = d.get("num_attention_heads")
    kv = d.get("num_kv_heads") if new else (1 if d.get("multi_query", True) else heads)
    s = DecoderSpec.from_hf({**d, "num_key_value_heads": kv, "intermediate_size": d.get("ffn_hidden_size")},
                            eps_field="layer_norm_epsilon", tie_default=True, act_field="activation", act_default="gelu")
    reorder = new or not d.get("multi_query", True)
    out = {}
    for k, v in sd.items():
        if k == "lm_head.weight" and s.tie_embeddings:
            continue
        if reorder and k.endswith(("query_key_value.weight", "query_key_value.bias")):
            v = _reorder_qkv(v, s, grouped=new)
        out[k] = v
    model = Falcon(s, d)
    model.load_state_dict(out, strict=True, source=where)
    return model
