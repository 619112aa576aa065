"""Mixture-of-experts decoders from GGUF files (llama.cpp's `llama` with experts for Mixtral, `qwen2moe`,
`qwen3moe`): the llama name table plus llama.cpp's expert tensors, the spec from `{arch}.*` metadata and the
MoE settings (`expert_count`, `expert_used_count`, `expert_feed_forward_length`, ...) as the config.json keys the
families read. llama.cpp stores each layer's experts stacked: ffn_gate_exps / ffn_up_exps (E, F, H),
ffn_down_exps (E, H, F). Quantized experts stay quantized (QExperts: one QLinear per expert and matrix, their
rows sliced out of the stacked blocks without dequantizing); quantized attention matrices become QLinear
layers (ember.quant.load_quantized); the rest is float32."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import ember
from ember import nn
from ember.nn import init
from ember.nn.moe import Experts
from ember.quant import QLinear, QTensor, load_quantized

from .gguf import LLAMA_LAYER_NAMES, cat_rows
from .spec import DecoderSpec

MOE_LAYER_NAMES = {**LLAMA_LAYER_NAMES,
                   "ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.gate_proj",
                   "ffn_up_exps": "mlp.experts.up_proj", "ffn_down_exps": "mlp.experts.down_proj",
                   "ffn_gate_inp_shexp": "mlp.shared_expert_gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
                   "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
                   "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}


@dataclass
class MoESpec(DecoderSpec):
    moe: dict = field(default_factory=dict)  # the config.json keys a family reads (num_experts, ...)


def moe_spec(md: dict, where: str, arch: str, norm_topk_prob: bool, **kw) -> MoESpec:
    """The spec of a GGUF MoE decoder; norm_topk_prob: what the architecture does without
    `{arch}.expert_weights_norm` (llama.cpp hard-codes it per architecture)."""
    g = lambda k, d=None: md.get(f"{arch}.{k}", d)  # noqa: E731 (arch_fields checked the architecture)
    spec = MoESpec.from_gguf(md, where, arch, **kw)
    n = g("expert_count", 0)
    spec.moe = {"num_experts": n, "num_local_experts": n, "num_experts_per_tok": g("expert_used_count", 2),
                "moe_intermediate_size": g("expert_feed_forward_length", spec.hidden_dim),
                "shared_expert_intermediate_size": g("expert_shared_feed_forward_length", 0),
                "norm_topk_prob": bool(g("expert_weights_norm", norm_topk_prob))}
    return spec


class QExperts(Experts):
    """ember.nn.moe.Experts whose matrices stay quantized: gate_up[e] (2F, H) and down[e] (H, F) QLinear layers."""

    def __init__(self, gate: QTensor, up: QTensor, down: QTensor, activation: str):
        nn.Module.__init__(self)
        E, F_, H = gate.shape
        self.num_experts, self.act = E, {"silu": nn.functional.silu, "gelu": nn.functional.gelu,
                                         "relu": nn.functional.relu}[activation]
        rows = lambda t, e, n: QTensor(t.data[e * n:(e + 1) * n], t.ggml_type, (n, t.shape[2]))  # noqa: E731
        self.gate_up = nn.ModuleList([QLinear(cat_rows([rows(gate, e, F_), rows(up, e, F_)])) for e in range(E)])
        self.down = nn.ModuleList([QLinear(rows(down, e, H)) for e in range(E)])

    def expert(self, e, xs):
        gate, up = self.gate_up[e](xs).chunk(2, -1)                     # (n, F) each
        return self.down[e](self.act(gate) * up)                        # (n, H)


def _float(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t, np.float32)


def build_moe(cls, spec: MoESpec, sd: dict, where: str):
    """A cls (a LlamaLayout MoE family) from {HF name: Tensor | QTensor} as hf_names maps a GGUF file: expert
    stacks become the nn.MoE weights (QExperts when all three are quantized alike), layers without a router are
    dense (mlp_only_layers), a file without output.weight ties the embedding."""
    layers = range(spec.n_layers)
    moe = dict(spec.moe, mlp_only_layers=[i for i in layers if f"model.layers.{i}.mlp.gate.weight" not in sd],
               qkv_bias="model.layers.0.self_attn.q_proj.bias" in sd)
    if "lm_head.weight" not in sd:
        spec.tie_embeddings = True
    with init.skipped():  # every weight is loaded next
        model = cls(spec, moe)
    out = {}
    for k, v in sd.items():
        if ".mlp.experts." in k:
            continue
        if k.endswith("mlp.shared_expert_gate.weight") and len(v.shape) == 1:
            v = _float(v).reshape(1, -1)                                 # llama.cpp keeps it as (H,)
        out[k] = v if isinstance(v, QTensor) and v.ndim == 2 else ember.tensor(_float(v))
    for i in layers:
        names = [f"model.layers.{i}.mlp.experts.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
        if names[0] not in sd:
            continue
        lack = [n for n in names if n not in sd]
        if lack:
            raise spec.error(f"ember: {where}: layer {i} has a router but lacks {lack}")
        gate, up, down = (sd[n] for n in names)
        mlp = model.model.layers[i].mlp
        if all(isinstance(t, QTensor) for t in (gate, up, down)) and len({gate.ggml_type, up.ggml_type}) == 1:
            mlp.experts = QExperts(gate, up, down, spec.act)
            continue
        out[f"model.layers.{i}.mlp.experts.gate_up_proj"] = ember.tensor(np.concatenate([_float(gate), _float(up)], 1))
        out[f"model.layers.{i}.mlp.experts.down_proj"] = ember.tensor(_float(down))
    load_quantized(model, out)
    return model
