"""ember's own fused ops, declared through ember.custom_op like a user's: the rotary embedding (a WGSL
kernel with its backward) and flash attention (webgpu/attention.wgsl, composed for gradients).

F.rotary_embedding and F.scaled_dot_product_attention call these; docs/custom-ops.md shows the rotary
embedding as the example a user copies.
"""
from __future__ import annotations

import math
from importlib import resources

from .. import dtypes as D
from ..custom_op import WGSL, custom_op

# ------------------------------------------------------------------ rotary embedding

_ROPE_WGSL = """
// x (B, T, H, D) -> [x1 cos - x2 sin, x2 cos + x1 sin] per (t, j): one thread per output element
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let T = prm[1];
    let H = prm[2];
    let D = prm[3];
    let half = D / 2u;
    let d = i % D;
    let cs = ((i / (D * H)) % T) * half + d % half;   // row t, column j of cos / sin (T, D / 2)
    let x = f32(in0[i]);
    var r = x * f32(in1[cs]);
    if (d < half) { r = r - f32(in0[i + half]) * f32(in2[cs]); } else { r = r + f32(in0[i - half]) * f32(in2[cs]); }
    out[i] = to_out(r);
}
"""


def rope_composed(x, cos, sin):
    """The rotary embedding from Tensor ops (and the backend's own `rope` kernel when it has one, as on CUDA)."""
    from .functional import _fused
    from .. import autograd as A
    if _fused(x, "rope", cos, sin):
        return A.prim_fused("rope", x, cos._data, sin._data)
    from ..ops_movement import cat
    T, half = x.shape[1], x.shape[-1] // 2
    c = cat([cos, cos], -1).reshape(T, 1, 2 * half)                      # (T, 1, D)
    s = cat([sin, sin], -1).reshape(T, 1, 2 * half)
    if c.dtype is not x.dtype:  # in x's dtype, as the fused kernels
        c, s = c.to(x.dtype), s.to(x.dtype)
    x1, x2 = x.narrow(-1, 0, half), x.narrow(-1, half, half)
    return x * c + cat([-x2, x1], -1) * s                                 # (B, T, H, D)


def _rope_backward(ctx, g):
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


rotary = custom_op(
    "ember.rotary_embedding",
    forward={"webgpu": WGSL(_ROPE_WGSL, params=lambda x, cos, sin: list(x.shape[1:]))},
    backward=_rope_backward, composed=rope_composed)


# ------------------------------------------------------------------ flash attention

def _view_words(a):
    """offset, two batch strides, row and column strides of a 4-D view (B1, B2, rows, cols)."""
    return [a.offset, *a.strides]


def _flash_params(q, k, v, mask, scale, causal, chunk=0):
    L, hd = q.shape[-2:]
    S, hv = v.shape[-2:]
    flags = (1 if mask is not None else 0) | (2 if causal else 0) | (4 if chunk else 0)
    words = [L, S, hd, hv, float(scale), flags, q.shape[1]]
    for a in (q, k, v):
        words += _view_words(a)
    words += _view_words(mask) if mask is not None else [0] * 5
    return words + ([chunk, -(-S // chunk)] if chunk else [S, 1])


def _flash_composed(q, k, v, mask, scale, causal):
    from .functional import _sdpa_composed
    return _sdpa_composed(q, k, v, mask, 0.0, causal, scale)


def _attention_wgsl():
    return resources.files("ember.webgpu").joinpath("attention.wgsl").read_text()


_flash = custom_op(
    "ember.flash_attention",
    forward={"webgpu": WGSL(_attention_wgsl, workgroup_size=64, params=_flash_params, views=True,
                            grid=lambda out, q, k, v, mask, scale, causal: (q.shape[2], q.shape[0] * q.shape[1], 1))},
    composed=_flash_composed,
    output=lambda q, k, v, mask, scale, causal: q.shape[:2] + (q.shape[2], v.shape[-1]))


# split keys (flash-decoding): few query rows, many keys. Pass 1, the same kernel with flag 4: per chunk
# of `chunk` keys, the unnormalized output row, its maximum and its sum, (B1, B2, L, chunks, Dv + 2) f32.

def _split_composed(q, k, v, mask, scale, causal, chunk):
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


_flash_split = custom_op(
    "ember.flash_attention_split",
    forward={"webgpu": WGSL(_attention_wgsl, workgroup_size=64, params=_flash_params, views=True,
                            grid=lambda out, q, k, v, mask, scale, causal, chunk:
                            (q.shape[2], q.shape[0] * q.shape[1], -(-k.shape[2] // chunk)))},
    composed=_split_composed,
    output=lambda q, k, v, mask, scale, causal, chunk:
    (q.shape[:3] + (-(-k.shape[2] // chunk), v.shape[-1] + 2), D.float32))

# pass 2: out[..., c] = sum_j acc_j[c] exp(m_j - M) / sum_j sum_j exp(m_j - M), M the largest chunk maximum
_COMBINE_WGSL = """
// in0 (rows, n, Dv + 2) chunk rows from attention.wgsl's split pass -> out (rows, Dv): one thread per output
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = flat_id(wid, nwg, lid);
    if (i >= prm[0]) { return; }
    let n = prm[1];
    let Dv = prm[2];
    let base = (i / Dv) * n * (Dv + 2u);
    let c = i % Dv;
    var big = -f_inf();
    for (var j = 0u; j < n; j = j + 1u) { big = max(big, f32(in0[base + j * (Dv + 2u) + Dv])); }
    var num = 0.0;
    var den = 0.0;
    for (var j = 0u; j < n; j = j + 1u) {
        let row = base + j * (Dv + 2u);
        let m = f32(in0[row + Dv]);
        let w = select(exp(m - big), 0.0, m == -f_inf());
        num = num + w * f32(in0[row + c]);
        den = den + w * f32(in0[row + Dv + 1u]);
    }
    out[i] = to_out(num / den);
}
"""


def _combine_composed(part, dtype):
    dv = part.shape[-1] - 2
    m = part.narrow(-1, dv, 1)
    big = m.amax(-2, keepdim=True)
    w = (m - big.masked_fill(big == float("-inf"), 0.0)).exp()           # (B1, B2, L, n, 1)
    num = (part.narrow(-1, 0, dv) * w).sum(-2)
    return (num / (part.narrow(-1, dv + 1, 1) * w).sum(-2)).to(dtype)


_flash_combine = custom_op(
    "ember.flash_attention_combine",
    forward={"webgpu": WGSL(_COMBINE_WGSL, params=lambda part, dtype: [part.shape[-2], part.shape[-1] - 2])},
    composed=_combine_composed,
    output=lambda part, dtype: (part.shape[:3] + (part.shape[-1] - 2,), dtype))

SPLIT_KEYS = 64     # more keys than this: the split pass (one workgroup per query row would walk them all)
_CHUNKS = 32        # about this many chunks per query row, each a multiple of 64 keys


def split_chunk(S):
    """Keys per chunk of the split pass for S keys (0: one pass)."""
    return 0 if S <= SPLIT_KEYS else 64 * -(-S // (64 * _CHUNKS))

_FLASH_MAX_HEAD = 256  # attention.wgsl keeps one query row (D) in workgroup memory and 4 output columns a thread
_MAX_GROUPS = 65535


def flash_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v in one online-softmax kernel on webgpu (attention.wgsl); composed on
    other devices, for gradients, and where the kernel does not apply (head size past 256, more than two
    batch dims, grid limits, no keys). q (..., L, D), k (..., S, D), v (..., S, Dv); a float (additive)
    or bool mask broadcast to (..., L, S); causal keeps key s <= query l (torch's top-left alignment)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if attn_mask is not None and attn_mask.dtype is D.bool_:
        attn_mask = (~attn_mask).to(q.dtype).masked_fill(~attn_mask, float("-inf"))  # 0 kept, -inf masked
    from ..ops_movement import broadcast_shapes
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([] if attn_mask is None else [attn_mask.shape[:-2]])
    bshape = broadcast_shapes(*shapes)
    L, hd, S, hv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    if len(bshape) > 2 or max(hd, hv) > _FLASH_MAX_HEAD or S == 0 or L > _MAX_GROUPS \
            or math.prod(bshape) > _MAX_GROUPS:
        return _flash_composed(q, k, v, attn_mask, scale, is_causal)
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

def _append_composed(qkv, rot, k_cache, v_cache, mask, *, n_heads, slot, length, scale):
    """rope_append_attention from Tensor ops: rotate q and k, write the k and v rows at `slot`, attend."""
    from .functional import scaled_dot_product_attention
    from ..ops_indexing import copy_into
    B, _, heads, hd = qkv.shape
    K = (heads - n_heads) // 2
    qk = qkv.narrow(2, 0, n_heads + K) @ rot                              # (B, 1, H + K, hd)
    q, k, v = qk.narrow(2, 0, n_heads), qk.narrow(2, n_heads, K), qkv.narrow(2, n_heads + K, K)
    copy_into(k_cache, k.transpose(1, 2), (0, 0, slot, 0))
    copy_into(v_cache, v.transpose(1, 2), (0, 0, slot, 0))
    q = q.reshape(B, K, n_heads // K, hd)                                 # (B, K, G, hd)
    return scaled_dot_product_attention(q, k_cache.narrow(2, 0, length), v_cache.narrow(2, 0, length),
                                        attn_mask=mask, scale=scale)


def _append_params(qkv, rot, kc, vc, mask, *, n_heads, slot, length, scale):
    K = (qkv.shape[2] - n_heads) // 2
    words = [n_heads, K, n_heads // K, qkv.shape[3], length, slot, float(scale), 0 if mask is None else 1]
    words += [qkv.offset, qkv.strides[0], qkv.strides[2], qkv.strides[3]]
    words += [kc.offset, *kc.strides, vc.offset, *vc.strides]
    return words + ([mask.offset, *mask.strides] if mask is not None else [0] * 5)


_append = custom_op(
    "ember.rope_append_attention",
    forward={"webgpu": WGSL(lambda: resources.files("ember.webgpu").joinpath("decode_attention.wgsl").read_text(),
                            workgroup_size=64, params=_append_params, views=True, writes=(2, 3),
                            grid=lambda out, qkv, rot, kc, vc, mask, **a: (out[2], out[0] * out[1], 1))},
    composed=_append_composed,
    output=lambda qkv, rot, kc, vc, mask, *, n_heads, **a: (
        qkv.shape[0], (qkv.shape[2] - n_heads) // 2, n_heads // ((qkv.shape[2] - n_heads) // 2), qkv.shape[3]))


def rope_append_attention(qkv, rot, k_cache, v_cache, mask, *, n_heads, slot, length, scale=None):
    """One decoded token's attention with its KV cache write: qkv (B, 1, H + 2K, hd) the fused q | k | v
    projection, rot (hd, hd) the step's rotation (x @ rot applies rope to a row), k_cache / v_cache
    (B, K, capacity, hd) written in place at row `slot`, then attended over rows [0, length); mask (G, length)
    or broadcastable to (B, K, G, length), additive (or None). -> (B, K, G, hd), G = H / K query heads per kv
    head. One kernel on webgpu (decode_attention.wgsl) where its flash-attention rule takes the step (few keys,
    float32, head size <= 256); composed elsewhere: the same ops as the unfused layer."""
    scale = scale if scale is not None else 1.0 / math.sqrt(qkv.shape[-1])
    B, _, heads, hd = qkv.shape
    K = (heads - n_heads) // 2
    from .functional import _wants_flash
    be = qkv.device.backend
    fits = getattr(be, "decode_fusion", True) and hd <= _FLASH_MAX_HEAD and B * K <= _MAX_GROUPS \
        and all(t.dtype is D.float32 for t in (qkv, rot, k_cache, v_cache)) \
        and _wants_flash(be, n_heads // K, length) and (mask is None or mask.dtype is not D.bool_)
    if not fits:
        return _append_composed(qkv, rot, k_cache, v_cache, mask, n_heads=n_heads, slot=slot, length=length,
                                scale=scale)
    m4 = None if mask is None else mask.to(qkv.dtype).expand(B, K, n_heads // K, length)
    return _append(qkv, rot.contiguous(), k_cache, v_cache, m4, n_heads=n_heads, slot=int(slot), length=int(length),
                   scale=float(scale))
