"""Weight-name mapping between Hugging Face LlamaForCausalLM and ember's Llama (fused qkv_proj and
gate_up_proj), with shape checks that name the tensor. Every format reader (load.py's HF folders, gguf.py,
llama2c.py) produces HF names and builds its Llama here; the readers import this module, never load.py (which
dispatches to them)."""
from __future__ import annotations

import ember

from ...errors import FormatError
from .config import LlamaConfig
from .model import Llama


class LlamaWeightsError(FormatError):
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
    """Raise LlamaWeightsError naming each missing / mis-shaped / unexpected tensor (an lm_head beside a
    tied embedding and rotary inv_freq buffers are ignored). The check is nn's one strict check
    (check_state_dict, as load_state_dict runs it), on the HF names before they are fused."""
    from ember.nn.module import StateDictError, check_state_dict
    sd = {k: v for k, v in sd.items()
          if not k.endswith("rotary_emb.inv_freq") and not (k == "lm_head.weight" and c.tie_embeddings)}
    try:
        check_state_dict(hf_shapes(c), sd, strict=True, source=source, owner="Llama")
    except StateDictError as e:
        bad = [f"{k}: checkpoint {got} vs config {want}" for k, want, got in e.mismatched]
        parts = ([f"missing {e.missing[:8]}"] if e.missing else []) + ([f"mis-shaped {bad[:8]}"] if bad else []) + \
                ([f"unexpected {e.unexpected[:8]}"] if e.unexpected else [])
        raise LlamaWeightsError(f"ember: {source} does not match the llama config: " + "; ".join(parts)) from e


# ============================================================================ HF names <-> ember names

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


def from_hf_state_dict(sd: dict, config: LlamaConfig, source: str = "checkpoint") -> Llama:
    """A Llama holding HF-named weights (any float dtype is computed in float32)."""
    sd = {k: (v.float() if v.dtype is not ember.float32 else v) for k, v in sd.items()}
    model = Llama(config)
    model.load_state_dict(from_hf(sd, config, source), source=source)
    return model
