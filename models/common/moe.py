"""Sparse mixture-of-experts decoders on the llama layout (Mixtral, Qwen2-MoE, Qwen3-MoE): an `nn.MoE` in a
block's `mlp` slot, with transformers 5.x's names (`mlp.gate.weight`, `mlp.experts.gate_up_proj` (E, 2F, H),
`mlp.experts.down_proj` (E, H, F), `mlp.shared_expert.*`, `mlp.shared_expert_gate.weight`). Hub checkpoints store
one matrix per expert (`experts.N.{gate,up,down}_proj.weight`, Mixtral's `block_sparse_moe.experts.N.{w1,w3,w2}`);
stack_experts turns those into the stacked weights on load, as transformers' own loader does, and names what is
missing or misshapen."""
from __future__ import annotations

import re

import numpy as np

import ember
from ember import nn
from ember.errors import FormatError

from .spec import DecoderSpec


class MoEWeightsError(FormatError):
    """A MoE checkpoint whose per-expert matrices do not make whole stacked weights."""


def moe_block(s: DecoderSpec, *, num_experts: int, top_k: int, hidden: int, norm_topk_prob: bool,
              shared_hidden: int = 0, where: str = "config.json"):
    """An nn.MoE for the spec's width (a config error names `where` when the counts are not usable)."""
    for name, v in (("num_experts", num_experts), ("num_experts_per_tok", top_k), ("moe_intermediate_size", hidden)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise s.error(f"ember: {where}: field {name!r} must be a positive int, got {v!r}")
    if top_k > num_experts:
        raise s.error(f"ember: {where}: num_experts_per_tok={top_k} exceeds the {num_experts} experts")
    return nn.MoE(s.dim, hidden, num_experts, top_k, norm_topk_prob, shared_hidden, activation=s.act)


def _array(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t, np.float32)


def stack_experts(sd: dict, where: str, block: str = "mlp", names=("gate_proj", "up_proj", "down_proj")) -> dict:
    """{checkpoint name: tensor} with per-expert matrices `model.layers.L.<block>.experts.E.<gate|up|down>.weight`
    replaced by `model.layers.L.mlp.experts.gate_up_proj` / `down_proj`, and `<block>.gate.weight` renamed
    `mlp.gate.weight`; a checkpoint already stacked passes through. An expert missing one of its matrices (or
    a gap in the expert ids) is a MoEWeightsError naming it."""
    pat = re.compile(rf"^model\.layers\.(\d+)\.{re.escape(block)}\.experts\.(\d+)\.(\w+)\.weight$")
    per_layer: dict[int, dict[int, dict[str, object]]] = {}
    out = {}
    for k, v in sd.items():
        m = pat.match(k)
        if m and m.group(3) in names:
            per_layer.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
        elif block != "mlp" and k.startswith("model.layers.") and f".{block}." in k:
            out[k.replace(f".{block}.", ".mlp.", 1)] = v
        else:
            out[k] = v
    g, u, d = names
    for layer, experts in sorted(per_layer.items()):
        ids = sorted(experts)
        if ids != list(range(len(ids))):
            raise MoEWeightsError(f"ember: {where}: layer {layer} has experts {ids[:8]}..., not 0..{len(ids) - 1}")
        gate_up, down = [], []
        for e in ids:
            lack = [n for n in names if n not in experts[e]]
            if lack:
                raise MoEWeightsError(f"ember: {where}: model.layers.{layer}.{block}.experts.{e} lacks {lack}")
            gate_up.append(np.concatenate([_array(experts[e][g]), _array(experts[e][u])]))
            down.append(_array(experts[e][d]))
        try:
            out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = ember.tensor(np.stack(gate_up))  # (E, 2F, H)
            out[f"model.layers.{layer}.mlp.experts.down_proj"] = ember.tensor(np.stack(down))         # (E, H, F)
        except ValueError as e:
            raise MoEWeightsError(f"ember: {where}: layer {layer}'s experts differ in shape ({e})") from None
    return out
