"""GPT-2 and GPTBigCode / StarCoder 1 (after transformers' modeling_gpt2.py and modeling_gpt_bigcode.py,
v5.x): learned positions, pre-LayerNorm blocks with one fused c_attn [q | k | v] (GPTBigCode: multi-query,
one kv head), a GELU MLP, the output tied to wte. GPT-2 stores its projections as Conv1D (in, out): they are
transposed once at load; names stay the checkpoint's (`transformer.h.N.attn.c_attn`, ...).
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.limits import check_config

from ..common.attention import Attention
from ..common.spec import DecoderConfigError
from ..common.decoder import CausalLM, DecoderBlock
from ..common.mlp import MLP


class GPT2Config:
    def __init__(self, d: dict):
        mt = d.get("model_type", "gpt2")
        try:
            self.vocab_size, self.dim, self.n_layers = int(d["vocab_size"]), int(d["n_embd"]), int(d["n_layer"])
            self.n_heads, self.max_seq_len = int(d["n_head"]), int(d["n_positions"])
        except (KeyError, TypeError, ValueError) as e:
            raise DecoderConfigError(f"ember: {mt} config.json: bad or missing field {e}") from None
        self.hidden_dim = int(d.get("n_inner") or 4 * self.dim)
        self.eps, self.act = float(d.get("layer_norm_epsilon", 1e-5)), d.get("activation_function", "gelu_new")
        self.multi_query = mt == "gpt_bigcode" and d.get("multi_query", True)
        self.n_kv_heads = 1 if self.multi_query else self.n_heads
        self.model_type = mt
        where = f"{mt} config.json"
        check_config(where, "vocab", vocab_size=self.vocab_size)
        check_config(where, "width", n_embd=self.dim, n_inner=self.hidden_dim, n_head=self.n_heads)
        check_config(where, "layers", n_layer=self.n_layers)
        check_config(where, "context", n_positions=self.max_seq_len)
        if self.dim <= 0 or self.n_heads <= 0 or self.dim % self.n_heads:
            raise DecoderConfigError(f"ember: {where}: n_embd {self.dim} is not a multiple of n_head {self.n_heads}")
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            if d.get(flag):
                raise DecoderConfigError(f"ember: {where}: {flag}=true is not supported")
        if d.get("scale_attn_weights", True) is False:
            raise DecoderConfigError(f"ember: {where}: scale_attn_weights=false is not supported")
        self.head_dim = self.dim // self.n_heads


def Block(c: GPT2Config) -> DecoderBlock:
    attn = Attention(c.dim, c.n_heads, c.n_kv_heads, bias=True, fused="c_attn", names=(None, None, None, "c_proj"))
    return DecoderBlock(attn, MLP(c.dim, c.hidden_dim, c.act, names=("c_fc", "c_proj")),
                        nn.LayerNorm(c.dim, eps=c.eps), nn.LayerNorm(c.dim, eps=c.eps),
                        names=("attn", "mlp", "ln_1", "ln_2"))


class Transformer(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.dim)                            # (vocab, dim)
        self.wpe = nn.Embedding(c.max_seq_len, c.dim)                           # (n_positions, dim)
        self.h = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.ln_f = nn.LayerNorm(c.dim, eps=c.eps)                              # (dim,)


class GPT2(CausalLM):
    tie_embeddings = True

    def __init__(self, config: GPT2Config):
        super().__init__()
        self.config = c = config
        self.transformer = Transformer(c)
        self.setup(n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                   max_seq_len=c.max_seq_len)

    def blocks(self):
        return self.transformer.h

    def final_norm(self, x):
        return self.transformer.ln_f(x)

    def output_embedding(self):
        return self.transformer.wte.weight

    def embed(self, tokens, positions):
        pos = ember.tensor(np.ascontiguousarray(np.broadcast_to(positions, tokens.shape)), device=tokens.device)
        return self.transformer.wte(tokens) + self.transformer.wpe(pos)         # (B, T, dim)


CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers old GPT-2 checkpoints saved


def _per_head_to_stacked(w, c: GPT2Config):
    """Non-MQA GPTBigCode's c_attn rows are per head [q_h | k_h | v_h]: reorder to [q | k | v]."""
    a = w.numpy()
    return ember.tensor(np.ascontiguousarray(a.reshape(c.n_heads, 3, c.head_dim, *a.shape[1:]).swapaxes(0, 1)
                                             .reshape(a.shape)))


def build_from_hf(config: dict, sd: dict, where: str) -> GPT2:
    c = GPT2Config(config)
    out = {}
    for k, v in sd.items():
        if k == "lm_head.weight" or k.endswith(BUFFERS):
            continue  # tied to wte; the mask buffers are not weights
        k = k if k.startswith("transformer.") else "transformer." + k  # a GPT2Model checkpoint has no prefix
        if c.model_type == "gpt2" and k.endswith(CONV1D):
            v = v.transpose(0, 1).contiguous()                                  # Conv1D (in, out) -> (out, in)
        if c.model_type == "gpt_bigcode" and not c.multi_query and k.endswith(("attn.c_attn.weight", "attn.c_attn.bias")):
            v = _per_head_to_stacked(v, c)
        out[k] = v
    model = GPT2(c)
    model.load_state_dict(out, strict=True, source=where)
    return model
