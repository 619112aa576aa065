"""Weight-name mapping between Hugging Face LlamaForCausalLM and ember's Llama (fused qkv_proj and
gate_up_proj), with shape checks that name the tensor."""
from __future__ import annotations

import ember

from .config import LlamaConfig


class LlamaWeightsError(ValueError):
    """Checkpoint tensors that do not fit the config: missing, unexpected or mis-shaped (named)."""


def hf_shapes(c: LlamaConfig) -> dict:
    """{HF name: shape} of every tensor a LlamaForCausalLM checkpoint holds for config c."""
    hd, d = c.head_dim, c.dim
    s = {"model.embed_tokens.weight": (c.vocab_size, d), "model.norm.weight": (d,)}
    if not c.tie_embeddings:
        s["lm_head.weight"] = (c.vocab_size, d)
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (c.n_heads * hd, d),
                  p + "self_attn.k_proj.weight": (c.n_kv_heads * hd, d),
                  p + "self_attn.v_proj.weight": (c.n_kv_heads * hd, d),
                  p + "self_attn.o_proj.weight": (d, c.n_heads * hd),
                  p + "mlp.gate_proj.weight": (c.hidden_dim, d), p + "mlp.up_proj.weight": (c.hidden_dim, d),
                  p + "mlp.down_proj.weight": (d, c.hidden_dim),
                  p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)})
    return s


def check_hf(sd: dict, c: LlamaConfig, source: str = "checkpoint"):
    """Raise LlamaWeightsError naming each missing / mis-shaped tensor (an lm_head equal to a tied
    embedding is tolerated; rotary inv_freq buffers are ignored)."""
    want = hf_shapes(c)
    missing = [k for k in want if k not in sd]
    bad = [f"{k}: checkpoint {tuple(sd[k].shape)} vs config {want[k]}" for k in want
           if k in sd and tuple(sd[k].shape) != want[k]]
    extra = [k for k in sd if k not in want and not k.endswith("rotary_emb.inv_freq") and
             not (k == "lm_head.weight" and c.tie_embeddings)]
    if missing or bad or extra:
        parts = ([f"missing {missing[:8]}"] if missing else []) + ([f"mis-shaped {bad[:8]}"] if bad else []) + \
                ([f"unexpected {extra[:8]}"] if extra else [])
        raise LlamaWeightsError(f"ember: {source} does not match the llama config: " + "; ".join(parts))


def _cat_rows(ts):
    return ember.cat(ts, 0)


def from_hf(sd: dict, c: LlamaConfig, source: str = "checkpoint", cat_rows=_cat_rows) -> dict:
    """HF names -> ember Llama names (q/k/v and gate/up concatenated along the output axis by `cat_rows`,
    which GGUF loading replaces to keep quantized weights quantized)."""
    check_hf(sd, c, source)
    out = {"model.embed_tokens.weight": sd["model.embed_tokens.weight"], "model.norm.weight": sd["model.norm.weight"]}
    if not c.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[a + "qkv_proj.weight"] = cat_rows([sd[a + n + "_proj.weight"] for n in "qkv"])
        out[a + "o_proj.weight"] = sd[a + "o_proj.weight"]
        out[m + "gate_up_proj.weight"] = cat_rows([sd[m + "gate_proj.weight"], sd[m + "up_proj.weight"]])
        out[m + "down_proj.weight"] = sd[m + "down_proj.weight"]
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = sd[p + n]
    return out


def to_hf(sd: dict, c: LlamaConfig) -> dict:
    """ember Llama names -> HF names (splits the fused projections); tensors keep their device and dtype."""
    hd = c.head_dim
    nq, nk = c.n_heads * hd, c.n_kv_heads * hd
    out = {}
    for k, t in sd.items():
        if k.endswith("qkv_proj.weight"):
            p = k[: -len("qkv_proj.weight")]
            out[p + "q_proj.weight"], out[p + "k_proj.weight"] = t[:nq], t[nq:nq + nk]
            out[p + "v_proj.weight"] = t[nq + nk:]
        elif k.endswith("gate_up_proj.weight"):
            p = k[: -len("gate_up_proj.weight")]
            out[p + "gate_proj.weight"], out[p + "up_proj.weight"] = t[:c.hidden_dim], t[c.hidden_dim:]
        else:
            out[k] = t
    return out
