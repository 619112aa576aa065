"""config.json's well-known fields checked for type and range when the file is read, naming the field: the keys
every family spells the same way (transformers' names), in one table, for every family at once.

Before, a string or {} for rms_norm_eps failed as a numpy ufunc error at the first forward, `true` for
max_position_embeddings as a raw ValueError, and NaN eps or rope_theta, or a llama3 rope_scaling factor of 0,
gave silent NaN logits. Sizes are also held to the resource budget (ember.limits.check_config). Sub-configs
(text_config, vision_config, ...) are checked the same way, named by their path.

    check_fields(config, "llama config.json")       # FormatError naming e.g. 'rms_norm_eps'
"""
from __future__ import annotations

import math

from ember.errors import FormatError
from ember.limits import check_config


class ConfigFieldError(FormatError):
    """A config.json field of the wrong type or out of range (names the file and the field)."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# field -> (kind, budget kind or None); kinds: "pos" int > 0, "nat" int >= 0, "int" any int (pad ids: -1 seen),
# "eps" real in (0, 1], "posreal" finite real > 0, "frac" real in (0, 1], "bool", "str", "ids" an int >= 0 or a
# list of them, "labels" {index string: label}. _NULLABLE: the fields that may also be null
_SIZES = {
    "context": ["max_position_embeddings", "n_positions", "n_ctx", "max_source_positions", "max_target_positions",
                "seq_length", "max_sequence_length", "original_max_position_embeddings"],
    "vocab": ["vocab_size"],
    "layers": ["num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers", "encoder_layers",
               "decoder_layers"],
    "width": ["hidden_size", "intermediate_size", "num_attention_heads", "head_dim", "n_embd", "n_head", "n_inner",
              "d_model", "d_ff", "d_kv", "num_heads", "dim", "hidden_dim", "n_heads", "encoder_attention_heads",
              "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "num_mel_bins", "ffn_hidden_size",
              "projection_dim", "patch_size", "num_channels", "image_size"],
}
_NULLABLE = {"n_inner", "head_dim", "intermediate_size", "ffn_hidden_size", "num_key_value_heads", "sliding_window",
             "max_window_layers", "original_max_position_embeddings"}
FIELDS: dict[str, tuple[str, str | None]] = {k: ("pos", kind) for kind, keys in _SIZES.items() for k in keys}
FIELDS.update({
    "num_key_value_heads": ("pos", "width"), "num_kv_heads": ("pos", "width"), "n_head_kv": ("pos", "width"),
    # 0: no window (transformers' Qwen2-MoE config saves sliding_window=0 when use_sliding_window is false)
    "sliding_window": ("nat", "context"), "max_window_layers": ("nat", "layers"), "type_vocab_size": ("nat", "vocab"),
    "relative_attention_num_buckets": ("pos", "width"), "relative_attention_max_distance": ("pos", "context"),
    "rms_norm_eps": ("eps", None), "layer_norm_eps": ("eps", None), "layer_norm_epsilon": ("eps", None),
    "norm_eps": ("eps", None), "norm_epsilon": ("eps", None),
    "rope_theta": ("posreal", None), "rotary_emb_base": ("posreal", None), "rope_local_base_freq": ("posreal", None),
    "query_pre_attn_scalar": ("posreal", None), "final_logit_softcapping": ("posreal", None),
    "attn_logit_softcapping": ("posreal", None), "num_ln_in_parallel_attn": ("pos", None),
    "partial_rotary_factor": ("frac", None), "rotary_pct": ("frac", None),
    "tie_word_embeddings": ("bool", None), "use_sliding_window": ("bool", None), "attention_bias": ("bool", None),
    "mlp_bias": ("bool", None), "scale_embedding": ("bool", None), "multi_query": ("bool", None),
    **{k: ("bool", None) for k in ("parallel_attn", "new_decoder_architecture", "alibi", "qk_layernorm", "qkv_bias",
                                  "use_bias", "bias", "scale_attn_weights", "scale_decoder_outputs",
                                  "use_qkv_bias")},
    "hidden_act": ("str", None), "hidden_activation": ("str", None), "activation_function": ("str", None),
    "model_type": ("str", None), "feed_forward_proj": ("str", None), "id2label": ("labels", None),
    "bos_token_id": ("ids", "vocab"), "eos_token_id": ("ids", "vocab"), "pad_token_id": ("int", None),
    "decoder_start_token_id": ("ids", "vocab"),
})
_NULLABLE |= {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "hidden_act",
              "hidden_activation", "rope_theta", "num_decoder_layers", "query_pre_attn_scalar",
              "final_logit_softcapping", "attn_logit_softcapping", "num_ln_in_parallel_attn", "id2label"}


def _problem(kind: str, v) -> str | None:
    """What is wrong with v for `kind`, or None."""
    if kind in ("pos", "nat", "int"):
        if not _is_int(v):
            return "must be an integer"
        if kind == "int":
            return None
        return None if v > 0 or (kind == "nat" and v == 0) else f"must be {'positive' if kind == 'pos' else '>= 0'}"
    if kind in ("eps", "posreal", "frac"):
        if not _is_real(v):
            return "must be a number"
        if not math.isfinite(v):
            return "must be finite"
        if kind == "eps" and not 0 < v <= 1:
            return "must be in (0, 1]"
        if kind == "frac" and not 0 < v <= 1:
            return "must be in (0, 1]"
        return None if v > 0 else "must be positive"
    if kind == "bool":
        return None if isinstance(v, bool) else "must be true or false"
    if kind == "str":
        return None if isinstance(v, str) else "must be a string"
    if kind == "ids":
        ids = v if isinstance(v, list) else [v]
        return None if ids and all(_is_int(i) and i >= 0 for i in ids) else "must be a token id or a list of them"
    if kind == "labels":  # {"0": "cat", ...}
        ok = isinstance(v, dict) and all(_is_int(k) or (isinstance(k, str) and k.lstrip("-").isdigit()
                                                        and len(k) < 12) for k in v)
        return None if ok else "must map class indices (as strings) to labels"
    return None


def rope_scaling_problem(rs, field: str = "rope_scaling") -> str | None:
    """What is wrong with a rope_scaling / rope_parameters value (the numbers each type divides or scales by),
    naming the field, or None."""
    if rs is None:
        return None
    if not isinstance(rs, dict):
        return f"field {field!r} must be an object or null, got {rs!r:.80}"
    for layer_kind in ("full_attention", "sliding_attention"):  # transformers >= 5: one dict per kind of layer
        if layer_kind in rs:
            why = rope_scaling_problem(rs[layer_kind], f"{field}.{layer_kind}")
            if why or rs[layer_kind] is None:
                return why or f"field '{field}.{layer_kind}' must be an object, got null"
    kind = rs.get("rope_type", rs.get("type", "default"))
    if not isinstance(kind, str):
        return f"field '{field}.rope_type' must be a string, got {kind!r:.80}"
    for key, rule in (("factor", "posreal"), ("low_freq_factor", "posreal"), ("high_freq_factor", "posreal"),
                      ("beta_fast", "posreal"), ("beta_slow", "posreal"), ("attention_factor", "posreal"),
                      ("mscale", "posreal"), ("mscale_all_dim", "posreal"), ("rope_theta", "posreal"),
                      ("partial_rotary_factor", "frac"), ("original_max_position_embeddings", "pos")):
        if key in rs and not (rs[key] is None and key != "factor"):
            why = _problem(rule, rs[key])
            if why:
                return f"field '{field}.{key}' {why}, got {rs[key]!r:.80}"
    if kind in ("linear", "llama3", "yarn", "dynamic") and "factor" not in rs:
        return f"field {field!r} of type {kind!r} lacks 'factor'"
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
            if rs.get(key) is None:
                return f"field {field!r} of type 'llama3' lacks {key!r}"
        if rs["high_freq_factor"] <= rs["low_freq_factor"]:
            return (f"field '{field}.high_freq_factor' ({rs['high_freq_factor']}) must be above 'low_freq_factor' "
                    f"({rs['low_freq_factor']})")
    return None


def check_fields(d: dict, where: str = "config.json", error=ConfigFieldError, prefix: str = "") -> dict:
    """Check d's well-known fields (FIELDS, rope_scaling, layer_types) and its sub-config dicts; returns d."""
    if not isinstance(d, dict):
        raise error(f"ember: {where}: expected a JSON object, got {type(d).__name__}")
    for key, v in d.items():
        if not isinstance(key, str):
            continue
        name = prefix + key
        rule = FIELDS.get(key)
        if rule is not None and not (v is None and key in _NULLABLE):
            why = _problem(rule[0], v)
            if why:
                raise error(f"ember: {where}: field {name!r} {why}, got {v!r:.80}")
            if rule[1] is not None:
                for x in (v if isinstance(v, list) else [v]):
                    check_config(where, rule[1], **{name: x})
        elif key in ("rope_scaling", "rope_parameters"):
            why = rope_scaling_problem(v, name)
            if why:
                raise error(f"ember: {where}: {why}")
        elif key == "layer_types" and v is not None and not (isinstance(v, list)
                                                             and all(isinstance(t, str) for t in v)):
            raise error(f"ember: {where}: field {name!r} must be a list of strings, got {v!r:.80}")
        elif isinstance(v, dict) and (key.endswith("_config") or key in ("encoder", "decoder")):
            check_fields(v, where, error, name + ".")
    return d
