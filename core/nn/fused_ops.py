"""ember's own tensor-level fused ops: the composed references, backward rules and output specs of the kernel
registry's entries called with Tensors (ember.kernels: rotary_embedding, flash_attention and its split-keys passes,
rope_append_attention), and the functions that pick the kernel or the composed form. The kernels themselves are
the backends' (webgpu/fused.py: WGSL files; cuda_fused.py); this module holds no kernel source.

F.rotary_embedding, F.scaled_dot_product_attention and F.rope_append_attention call these; docs/custom-ops.md shows
a user's op declared the same way.
"""
from __future__ import annotations

import math

from .. import dtypes as D
from .. import kernels as K
from ..custom_op import registered

# ------------------------------------------------------------------ rotary embedding


def rope_composed(x, cos, sin):
    """The rotary embedding from Tensor ops: x (B, T, H, D), cos and sin (T, D / 2), rotate-half layout."""
    from ..ops_movement import cat
    T, half = x.shape[1], x.shape[-1] // 2
    c = cat([cos, cos], -1).reshape(T, 1, 2 * half)                      # (T, 1, D)
    s = cat([sin, sin], -1).reshape(T, 1, 2 * half)
    if c.dtype is not x.dtype:  # in x's dtype, as the fused kernels
        c, s = c.to(x.dtype), s.to(x.dtype)
    x1, x2 = x.narrow(-1, 0, half), x.narrow(-1, half, half)
    return x * c + cat([-x2, x1], -1) * s                                 # (B, T, H, D)


def rope_backward(ctx, g):
    """The rotation's transpose for x (rotate by -sin); cos and sin get theirs summed over batch and heads."""
    x, cos, sin = ctx.inputs
    gx = rotary(g, cos, -sin) if x.requires_grad else None
    gc = gs = None
    if cos.requires_grad or sin.requires_grad:
        half = x.shape[-1] // 2
        g1, g2 = g.narrow(-1, 0, half).float(), g.narrow(-1, half, half).float()
        x1, x2 = x.narrow(-1, 0, half).float(), x.narrow(-1, half, half).float()
        gc = (g1 * x1 + g2 * x2).sum((0, 2)).to(cos.dtype)               # (T, D / 2)
        gs = (g2 * x1 - g1 * x2).sum((0, 2)).to(sin.dtype)
    return gx, gc, gs


rotary = registered("rotary_embedding")


# ------------------------------------------------------------------ flash attention

def flash_composed(q, k, v, mask, scale, causal):
    from .functional import _sdpa_composed
    return _sdpa_composed(q, k, v, mask, 0.0, causal, scale)


def flash_output(q, k, v, mask, scale, causal):
    return q.shape[:2] + (q.shape[2], v.shape[-1])


_flash = registered("flash_attention")


# split keys (flash-decoding): few query rows, many keys. Pass 1: per chunk of `chunk` keys, the unnormalized
# output row, its maximum and its sum, (B1, B2, L, chunks, Dv + 2) f32; pass 2 combines the chunks.

def split_composed(q, k, v, mask, scale, causal, chunk):
    """Pass 1 in Tensor ops (other devices, gradients, and the reference the kernel is tested against)."""
    from . import functional as F
    from ..ops_movement import cat
    from ..tensor import ones
    L, S = q.shape[-2], k.shape[-2]
    n = -(-S // chunk)
    s = (q.float() @ k.float().transpose(-1, -2)) * scale                # (B1, B2, L, S)
    if causal:
        s = s.masked_fill(~ones(L, S, dtype=D.bool_, device=q.device).tril(), float("-inf"))
    if mask is not None:
        s = s + mask.float()
    s = F.pad(s, (0, n * chunk - S), value=float("-inf")).reshape(s.shape[:3] + (n, chunk))
    m = s.amax(-1, keepdim=True)                                         # (B1, B2, L, n, 1)
    e = (s - m.masked_fill(m == float("-inf"), 0.0)).exp()               # exp(-inf) = 0 where a chunk has no key
    vv = F.pad(v.float(), (0, 0, 0, n * chunk - S)).reshape(v.shape[:2] + (n, chunk, v.shape[-1]))
    acc = (e.unsqueeze(-2) @ vv.unsqueeze(2)).squeeze(-2)                # (B1, B2, L, n, Dv)
    return cat([acc, m, e.sum(-1, keepdim=True)], -1)


def split_output(q, k, v, mask, scale, causal, chunk):
    return q.shape[:3] + (-(-k.shape[2] // chunk), v.shape[-1] + 2), D.float32


def combine_composed(part, dtype):
    """Pass 2: out[..., c] = sum_j acc_j[c] exp(m_j - M) / sum_j sum_j exp(m_j - M), M the largest chunk maximum."""
    dv = part.shape[-1] - 2
    m = part.narrow(-1, dv, 1)
    big = m.amax(-2, keepdim=True)
    w = (m - big.masked_fill(big == float("-inf"), 0.0)).exp()           # (B1, B2, L, n, 1)
    num = (part.narrow(-1, 0, dv) * w).sum(-2)
    return (num / (part.narrow(-1, dv + 1, 1) * w).sum(-2)).to(dtype)


def combine_output(part, dtype):
    return part.shape[:3] + (part.shape[-1] - 2,), dtype


_flash_split = registered("flash_attention_split")
_flash_combine = registered("flash_attention_combine")

SPLIT_KEYS = 64     # more keys than this: the split pass (one workgroup per query row would walk them all)
_CHUNKS = 32        # about this many chunks per query row, each a multiple of 64 keys


def split_chunk(S):
    """Keys per chunk of the split pass for S keys (0: one pass)."""
    return 0 if S <= SPLIT_KEYS else 64 * -(-S // (64 * _CHUNKS))


def wants_flash(q, k, v, attn_mask, forced=False):
    """Whether the device's flash_attention kernel takes these shapes: its tuning rule (ember.kernels), or with
    `forced` wherever the kernel fits."""
    from ..ops_movement import broadcast_shapes
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([] if attn_mask is None else [attn_mask.shape[:-2]])
    return K.chooses("flash_attention", q.device.backend, tuple(broadcast_shapes(*shapes)), q.shape[-2],
                     q.shape[-1], k.shape[-2], v.shape[-1], forced=forced)


def flash_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v in one online-softmax kernel where the device has one that fits the shapes
    (webgpu: attention.wgsl; F.scaled_dot_product_attention calls this where the kernel's tuning rule takes the
    call); composed on other devices, for gradients, and where the kernel does not fit. q (..., L, D), k (..., S, D), v (..., S, Dv); a float (additive) or bool mask broadcast to (..., L, S);
    causal keeps key s <= query l (torch's top-left alignment)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if attn_mask is not None and attn_mask.dtype is D.bool_:
        attn_mask = (~attn_mask).to(q.dtype).masked_fill(~attn_mask, float("-inf"))  # 0 kept, -inf masked
    if not wants_flash(q, k, v, attn_mask, forced=True):
        return flash_composed(q, k, v, attn_mask, scale, is_causal)
    from ..ops_movement import broadcast_shapes
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([] if attn_mask is None else [attn_mask.shape[:-2]])
    bshape = broadcast_shapes(*shapes)
    L, hd, S, hv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    b2 = (1,) * (2 - len(bshape)) + tuple(bshape)                        # (B1, B2)
    q4, k4, v4 = q.expand(b2 + (L, hd)), k.expand(b2 + (S, hd)), v.expand(b2 + (S, hv))
    m4 = None if attn_mask is None else attn_mask.to(q.dtype).expand(b2 + (L, S))
    chunk = split_chunk(S)
    if chunk:
        part = _flash_split(q4, k4, v4, m4, scale=scale, causal=bool(is_causal), chunk=chunk)
        y = _flash_combine(part, dtype=q.dtype)                          # (B1, B2, L, Dv)
    else:
        y = _flash(q4, k4, v4, m4, scale=scale, causal=bool(is_causal))  # (B1, B2, L, Dv)
    return y.reshape(tuple(bshape) + (L, hv))


# ------------------------------------------------------------------ one decoded token: rope, cache append, attention

def append_composed(qkv, rot, k_cache, v_cache, mask, *, n_heads, slot, length, scale):
    """rope_append_attention from Tensor ops: rotate q and k, write the k and v rows at `slot`, attend."""
    from .functional import scaled_dot_product_attention
    from ..ops_indexing import copy_into
    B, _, heads, hd = qkv.shape
    K_ = (heads - n_heads) // 2
    qk = qkv.narrow(2, 0, n_heads + K_) @ rot                             # (B, 1, H + K, hd)
    q, k, v = qk.narrow(2, 0, n_heads), qk.narrow(2, n_heads, K_), qkv.narrow(2, n_heads + K_, K_)
    copy_into(k_cache, k.transpose(1, 2), (0, 0, slot, 0))
    copy_into(v_cache, v.transpose(1, 2), (0, 0, slot, 0))
    q = q.reshape(B, K_, n_heads // K_, hd)                               # (B, K, G, hd)
    return scaled_dot_product_attention(q, k_cache.narrow(2, 0, length), v_cache.narrow(2, 0, length),
                                        attn_mask=mask, scale=scale)


def append_output(qkv, rot, kc, vc, mask, *, n_heads, **a):
    K_ = (qkv.shape[2] - n_heads) // 2
    return qkv.shape[0], K_, n_heads // K_, qkv.shape[3]


_append = registered("rope_append_attention")


def rope_append_attention(qkv, rot, k_cache, v_cache, mask, *, n_heads, slot, length, scale=None):
    """One decoded token's attention with its KV cache write: qkv (B, 1, H + 2K, hd) the fused q | k | v
    projection, rot (hd, hd) the step's rotation (x @ rot applies rope to a row), k_cache / v_cache
    (B, K, capacity, hd) written in place at row `slot`, then attended over rows [0, length); mask (G, length)
    or broadcastable to (B, K, G, length), additive (or None). -> (B, K, G, hd), G = H / K query heads per kv
    head. One kernel where the device has one and its rule takes the step (webgpu: decode_attention.wgsl);
    composed elsewhere: the same ops as the unfused layer."""
    scale = scale if scale is not None else 1.0 / math.sqrt(qkv.shape[-1])
    B, _, heads, hd = qkv.shape
    K_ = (heads - n_heads) // 2
    dtypes = tuple(t.dtype for t in (qkv, rot, k_cache, v_cache))
    if not K.chooses("rope_append_attention", qkv.device.backend, qkv.shape, dtypes, n_heads, length,
                     mask is not None and mask.dtype is D.bool_):
        return append_composed(qkv, rot, k_cache, v_cache, mask, n_heads=n_heads, slot=slot, length=length,
                               scale=scale)
    m4 = None if mask is None else mask.to(qkv.dtype).expand(B, K_, n_heads // K_, length)
    return _append(qkv, rot.contiguous(), k_cache, v_cache, m4, n_heads=n_heads, slot=int(slot), length=int(length),
                   scale=float(scale))
