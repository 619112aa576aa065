"""A sparse mixture-of-experts block (Mixtral, Qwen2-MoE, Qwen3-MoE): a linear router, top-k gating (renormalised
or not), SwiGLU experts stored as transformers stores them (experts.gate_up_proj (E, 2F, H), experts.down_proj
(E, H, F)), and an optional sigmoid-gated shared expert (Qwen2-MoE). Each expert runs only on the tokens routed to
it (gathered, computed, scattered back with index_add): no dense all-experts product."""
from __future__ import annotations

import math

import numpy as np

from . import functional as F
from . import init
from .errors import LayerError
from .layers import Linear
from .module import Module, Parameter
from ..tensor import empty, tensor

_ACTS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}


class TopKRouter(Module):
    """weight (E, H): logits x W^T, softmax in float32, the k largest probabilities (renormalised to sum 1 with
    norm_topk_prob). forward -> (logits (T, E), weights (T, k), experts (T, k) int64)."""

    def __init__(self, hidden_size, num_experts, top_k, norm_topk_prob=True, device=None, dtype=None):
        super().__init__()
        self.top_k, self.num_experts, self.norm_topk_prob = top_k, num_experts, norm_topk_prob
        self.weight = Parameter(empty(num_experts, hidden_size, device=device, dtype=dtype))
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x):
        logits = F.linear(x, self.weight)                                  # (T, E)
        probs = F.softmax(logits.float(), -1)
        top, idx = probs.topk(self.top_k, -1)                              # (T, k)
        if self.norm_topk_prob:
            top = top / top.sum(-1, keepdim=True)
        return logits, top.to(x.dtype), idx


class Experts(Module):
    """num_experts SwiGLU MLPs in two stacked weights: gate_up_proj (E, 2F, H) (gate rows, then up rows) and
    down_proj (E, H, F)."""

    def __init__(self, num_experts, hidden_size, intermediate_size, activation="silu", device=None, dtype=None):
        super().__init__()
        if activation not in _ACTS:
            raise LayerError("MoE", "activation", f"must be one of {sorted(_ACTS)}, got {activation!r}")
        self.num_experts, self.act = num_experts, _ACTS[activation]
        kw = dict(device=device, dtype=dtype)
        self.gate_up_proj = Parameter(empty(num_experts, 2 * intermediate_size, hidden_size, **kw))
        self.down_proj = Parameter(empty(num_experts, hidden_size, intermediate_size, **kw))
        for w, fan_in in ((self.gate_up_proj, hidden_size), (self.down_proj, intermediate_size)):
            b = 1 / math.sqrt(fan_in)
            init.uniform_(w, -b, b)

    def forward(self, x, experts, weights):
        """x (T, H), experts (T, k) expert ids, weights (T, k) -> (T, H): sum over each token's k experts."""
        out = x.new_zeros(x.shape)
        ids = experts.numpy().astype(np.intp)                              # host-side grouping (intp: wasm32 bincount)
        T, k = ids.shape
        order = np.argsort(ids.reshape(-1), kind="stable")
        counts = np.bincount(ids.reshape(-1), minlength=self.num_experts)
        flat_w = weights.reshape(T * k, 1)
        at = 0
        for e in np.nonzero(counts)[0]:
            slots = order[at:at + counts[e]]                               # flat (token, choice) positions
            at += counts[e]
            tok = tensor(slots // k, device=x.device)
            y = self.expert(int(e), x.index_select(0, tok))               # (n, H) the tokens routed to e
            y = y * flat_w.index_select(0, tensor(slots, device=x.device))
            out = out.index_add(0, tok, y)
        return out

    def expert(self, e, xs):
        """Expert e's SwiGLU on its tokens xs (n, H) -> (n, H) (a quantized subclass multiplies its blocks)."""
        gate, up = F.linear(xs, self.gate_up_proj[e]).chunk(2, -1)
        return F.linear(self.act(gate) * up, self.down_proj[e])


class SwiGLU(Module):
    """down_proj(act(gate_proj x) * up_proj x), no biases (the shared expert)."""

    def __init__(self, hidden_size, intermediate_size, activation="silu", device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = Linear(intermediate_size, hidden_size, **kw)
        self.act = _ACTS[activation]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class MoE(Module):
    """Sparse MoE block over (..., H): gate (TopKRouter), experts (Experts), and with
    shared_expert_intermediate_size a shared expert scaled by sigmoid(shared_expert_gate x).
    forward(x) -> y, or (y, router_logits (T, E)) with return_router_logits."""

    def __init__(self, hidden_size, intermediate_size, num_experts, num_experts_per_tok=2, norm_topk_prob=True,
                 shared_expert_intermediate_size=0, activation="silu", device=None, dtype=None):
        super().__init__()
        for arg, v in (("hidden_size", hidden_size), ("intermediate_size", intermediate_size),
                       ("num_experts", num_experts), ("num_experts_per_tok", num_experts_per_tok)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayerError("MoE", arg, f"must be an integer >= 1, got {v!r}")
        if num_experts_per_tok > num_experts:
            raise LayerError("MoE", "num_experts_per_tok", f"{num_experts_per_tok} exceeds num_experts {num_experts}")
        kw = dict(device=device, dtype=dtype)
        self.hidden_size = hidden_size
        self.gate = TopKRouter(hidden_size, num_experts, num_experts_per_tok, norm_topk_prob, **kw)
        self.experts = Experts(num_experts, hidden_size, intermediate_size, activation, **kw)
        if shared_expert_intermediate_size:
            self.shared_expert = SwiGLU(hidden_size, shared_expert_intermediate_size, activation, **kw)
            self.shared_expert_gate = Linear(hidden_size, 1, bias=False, **kw)
        else:
            self.shared_expert = self.shared_expert_gate = None

    def forward(self, x, return_router_logits=False):
        if x.shape[-1] != self.hidden_size:
            raise LayerError("MoE", "input", f"last size {x.shape[-1]} != hidden_size {self.hidden_size}")
        flat = x.reshape(-1, self.hidden_size)                             # (T, H)
        logits, weights, experts = self.gate(flat)
        y = self.experts(flat, experts, weights)
        if self.shared_expert is not None:
            y = y + F.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        y = y.reshape(*x.shape)
        return (y, logits) if return_router_logits else y
