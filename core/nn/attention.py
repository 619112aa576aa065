"""Multi-head attention as torch.nn.MultiheadAttention: the same constructor, parameters, masks and outputs,
with the attention itself through F.scaled_dot_product_attention (the registry's attention kernels)."""
from __future__ import annotations

import math

from .. import dtypes as D
from . import functional as F
from . import init
from .errors import LayerError
from .layers import Linear
from .module import Module, Parameter
from ..ops_movement import cat
from ..tensor import empty, ones, zeros


def _float_mask(mask, dtype, what):
    """torch's canonical mask: bool True (not allowed) -> -inf, float added as is."""
    if mask is None:
        return None
    if mask.dtype is D.bool_:
        return zeros(*mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.dtype.is_float:
        raise LayerError("MultiheadAttention", what, f"must be bool or floating point, got {mask.dtype}")
    return mask.to(dtype)


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
                                 add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 q_proj_weight=None, k_proj_weight=None, v_proj_weight=None,
                                 average_attn_weights=True, is_causal=False):
    """torch.nn.functional.multi_head_attention_forward: query (L, N, E) or (L, E), key/value (S, N, kdim/vdim).
    Returns (output (L, N, E), weights (N, L, S) averaged over heads, (N, H, L, S) otherwise, or None)."""
    batched = query.ndim == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, E = query.shape
    S = key.shape[0]
    if E % num_heads:
        raise LayerError("MultiheadAttention", "embed_dim", f"{E} is not divisible by num_heads {num_heads}")
    if key.shape[:2] != value.shape[:2] or key.shape[1] != N:
        raise LayerError("MultiheadAttention", "key/value", f"shapes {tuple(key.shape)} and {tuple(value.shape)} "
                         f"do not match the query's batch {N} (query {tuple(query.shape)})")
    H, hd = num_heads, E // num_heads
    if is_causal and attn_mask is None:  # torch requires the mask as well; a causal mask is what the hint means
        attn_mask = ~ones(L, S, dtype=D.bool_, device=query.device).tril()
    causal_only = is_causal and key_padding_mask is None and not need_weights
    attn_mask = None if causal_only else _float_mask(attn_mask, query.dtype, "attn_mask")
    key_padding_mask = _float_mask(key_padding_mask, query.dtype, "key_padding_mask")

    # ---- projections: q (L, N, E), k (S, N, E), v (S, N, E)
    if in_proj_weight is not None:
        w = [in_proj_weight.narrow(0, i * E, E) for i in range(3)]
    else:
        w = [q_proj_weight, k_proj_weight, v_proj_weight]
    b = [None] * 3 if in_proj_bias is None else [in_proj_bias.narrow(0, i * E, E) for i in range(3)]
    if query is key and key is value:
        q, k, v = F.linears(query, w, b)
    else:
        q, k, v = F.linear(query, w[0], b[0]), F.linear(key, w[1], b[1]), F.linear(value, w[2], b[2])

    if attn_mask is not None:
        want = [(L, S), (N * H, L, S)]
        if tuple(attn_mask.shape) not in want:
            raise LayerError("MultiheadAttention", "attn_mask", f"has shape {tuple(attn_mask.shape)}, expected "
                             f"{want[0]} or {want[1]} (batch * num_heads, L, S)")
        if attn_mask.ndim == 2:
            attn_mask = attn_mask.unsqueeze(0)                             # (1, L, S)
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (N, S):
        raise LayerError("MultiheadAttention", "key_padding_mask",
                         f"has shape {tuple(key_padding_mask.shape)}, expected (batch, S) = {(N, S)}")
    if bias_k is not None:  # one learned key/value appended to every sequence
        k = cat([k, bias_k.expand(1, N, E)], 0)                            # (S + 1, N, E)
        v = cat([v, bias_v.expand(1, N, E)], 0)
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
    q = q.reshape(L, N * H, hd).transpose(0, 1)                            # (N * H, L, hd)
    k = k.reshape(k.shape[0], N * H, hd).transpose(0, 1)                   # (N * H, S', hd)
    v = v.reshape(v.shape[0], N * H, hd).transpose(0, 1)
    if add_zero_attn:
        k = cat([k, zeros(N * H, 1, hd, dtype=k.dtype, device=k.device)], 1)
        v = cat([v, zeros(N * H, 1, hd, dtype=v.dtype, device=v.device)], 1)
        attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
        key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
    S = k.shape[1]
    if key_padding_mask is not None:
        kpm = key_padding_mask.reshape(N, 1, 1, S).expand(N, H, 1, S).reshape(N * H, 1, S)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm         # (N * H | 1, L | 1, S)
    if not training:
        dropout_p = 0.0

    if need_weights:
        s = (q * math.sqrt(1.0 / hd)) @ k.transpose(-1, -2)               # (N * H, L, S)
        if attn_mask is not None:
            s = s + attn_mask
        p = F.softmax(s, -1)
        if dropout_p > 0:
            p = F.dropout(p, dropout_p)
        out = p @ v                                                        # (N * H, L, hd)
        weights = p.reshape(N, H, L, S)
        weights = weights.mean(1) if average_attn_weights else weights
    else:
        m = None if attn_mask is None else (attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1
                                            else attn_mask.reshape(N, H, -1, S))
        out = F.scaled_dot_product_attention(q.reshape(N, H, L, hd), k.reshape(N, H, S, hd),
                                             v.reshape(N, H, S, hd), m, dropout_p, causal_only)
        out, weights = out.reshape(N * H, L, hd), None
    out = out.transpose(0, 1).reshape(L, N, E)                             # heads back together
    out = F.linear(out, out_proj_weight, out_proj_bias)
    if not batched:
        out = out.squeeze(1)
        weights = None if weights is None else weights.squeeze(0)
    return out, weights


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: in_proj_weight (3E, E) (or q/k/v_proj_weight when kdim or vdim differ),
    in_proj_bias (3E,), out_proj (E -> E), bias_k / bias_v (1, 1, E) with add_bias_kv."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if int(embed_dim) <= 0:
            raise LayerError("MultiheadAttention", "embed_dim", f"must be positive, got {embed_dim}")
        if int(num_heads) <= 0:
            raise LayerError("MultiheadAttention", "num_heads", f"must be positive, got {num_heads}")
        if embed_dim % num_heads:
            raise LayerError("MultiheadAttention", "embed_dim", f"{embed_dim} is not divisible by num_heads {num_heads}")
        if not 0.0 <= dropout <= 1.0:
            raise LayerError("MultiheadAttention", "dropout", f"must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        E, kw = embed_dim, dict(dtype=dtype, device=device)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * E, E, **kw))         # (3 E, E): q | k | v rows
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = Parameter(empty(E, E, **kw))
            self.k_proj_weight = Parameter(empty(E, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(E, self.vdim, **kw))
        self.in_proj_bias = Parameter(empty(3 * E, **kw)) if bias else None
        self.out_proj = Linear(E, E, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, E, **kw))
            self.bias_v = Parameter(empty(1, 1, E, **kw))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if self.batch_first and query.ndim == 3:  # (N, L, E) in and out
            query, key, value = (t.transpose(0, 1) for t in (query, key, value)) if not (query is key is value) \
                else (query.transpose(0, 1),) * 3
        out, weights = multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k, self.bias_v,
            self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias, self.training,
            key_padding_mask, need_weights, attn_mask, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight,
            average_attn_weights, is_causal)
        if self.batch_first and query.ndim == 3:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"
