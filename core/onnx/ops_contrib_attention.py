"""onnxruntime's contrib attention operators (domain com.microsoft): Attention (BERT/GPT-2 exports through its
transformer optimizer), MultiHeadAttention (projected Q/K/V, packed forms, past/present KV, cross-attention
caches), GroupQueryAttention (the KV-cache decoder op of onnxruntime-genai's Llama/Qwen/Phi exports: grouped KV
heads, rotary inside, seqlens_k, a shared or growing cache) and RotaryEmbedding.

Masks follow onnxruntime's CPU kernels (contrib_ops/cpu/bert/attention_helper.h PrepareMask,
gqa_attention_base.h): Attention and MultiHeadAttention add `mask_filter_value` (-10000 by default, not -inf: a
fully masked row keeps its scores' softmax, as there) to a masked score and the float32 lowest past the diagonal;
GroupQueryAttention leaves keys outside each row's causal (and local) window out of the softmax.
(onnxruntime's GEMM accumulates the scores into that mask, so it is additive.) Masks come from
shapes and small host arrays (lengths, 0/1 masks), built in numpy; the data path (Q·Kᵀ, softmax, ·V) runs on the
device.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_indexing as I
from .. import ops_movement as M
from .. import ops_reduce as R
from ..linalg import matmul
from ..nn.functional import rms_norm, scaled_dot_product_attention
from .guard import node_error, sized
from .registry import op
from .values import cast, host

MS = "com.microsoft"
LOWEST = float(np.finfo(np.float32).min)


def _heads(x, n):
    """(B, S, N*H) -> (B, N, S, H)."""
    b, s, hidden = x.shape
    return M.permute(M.reshape(x, b, s, n, hidden // n), 0, 2, 1, 3)


def _merge(y):
    """(B, N, S, H) -> (B, S, N*H)."""
    b, n, s, h = y.shape
    return M.reshape(M.permute(y, 0, 2, 1, 3), b, s, n * h)


def _work(x):
    return D.float32 if x.dtype.itemsize < 4 else x.dtype


# ====================================================================== rotary

def rotate(x, cos, sin, interleaved):
    """x (..., S, H) with cos/sin (..., S, rot / 2) broadcast against it: the first `rot` features rotated
    (halves, or interleaved pairs), the rest as they are."""
    rot = 2 * cos.shape[-1]
    h = x.shape[-1]
    r = M.narrow(x, -1, 0, rot) if rot < h else x
    if interleaved:
        x1, x2 = r[..., 0::2], r[..., 1::2]
    else:
        x1, x2 = M.narrow(r, -1, 0, rot // 2), M.narrow(r, -1, rot // 2, rot // 2)
    real, imag = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    out = M.reshape(M.stack([real, imag], -1), *r.shape) if interleaved else M.cat([real, imag], -1)
    return M.cat([out, M.narrow(x, -1, rot, h - rot)], -1) if rot < h else out


def _cache_rows(ctx, at, cache, pos, what="position"):
    """cos or sin cache rows at host positions pos (any shape) -> (*pos.shape, rot / 2) on the device."""
    if pos.size and (pos.min() < 0 or pos.max() >= cache.shape[0]):
        raise node_error(at, f"{what} ids {int(pos.min())}..{int(pos.max())} are outside the cos/sin cache's "
                             f"{cache.shape[0]} rows")
    rows = I.index_select(cache, 0, ctx.const(pos.reshape(-1).astype(np.int64)))
    return M.reshape(rows, *pos.shape, cache.shape[1])


@op("RotaryEmbedding", domain=MS)
def _rotary(ctx, ins, at):
    """input (B, S, N*H) or (B, N, S, H), position_ids (B, S) or (1,) (an offset), cos/sin caches
    (max positions, rot / 2)."""
    x, pos, cos, sin = ins[:4]
    if at.i("is_packed_batching", 0):
        raise node_error(at, "is_packed_batching=1 (ragged batches) is not supported")
    if cos.ndim != 2 or tuple(cos.shape) != tuple(sin.shape):
        raise node_error(at, f"cos_cache {tuple(cos.shape)} and sin_cache {tuple(sin.shape)} must be equal 2-D")
    rot = at.i("rotary_embedding_dim", 0) or 2 * cos.shape[1]
    if x.ndim == 4:
        b, n, s, h = x.shape
        xs = x
    elif x.ndim == 3:
        b, s, hidden = x.shape
        n = at.i("num_heads", 0) or hidden // (2 * cos.shape[1])
        if n <= 0 or hidden % n:
            raise node_error(at, f"hidden size {hidden} does not split into {n} heads")
        xs = _heads(x, n)
    else:
        raise node_error(at, f"input must be 3-D or 4-D, got {tuple(x.shape)}")
    if rot > xs.shape[-1] or rot != 2 * cos.shape[1]:
        raise node_error(at, f"rotary_embedding_dim {rot} must be 2 x the caches' width {cos.shape[1]} and at most "
                             f"the head size {xs.shape[-1]}")
    p = host(pos).astype(np.int64)
    if p.size == 1:                                   # an offset: positions offset .. offset + S - 1
        p = np.broadcast_to(p.reshape(-1)[0] + np.arange(s), (b, s))
    if p.shape != (b, s):
        raise node_error(at, f"position_ids {p.shape} must be ({b}, {s}) or (1,)")
    c = M.unsqueeze(_cache_rows(ctx, at, cos, p), 1)  # (B, 1, S, rot / 2)
    si = M.unsqueeze(_cache_rows(ctx, at, sin, p), 1)
    y = rotate(xs, cast(c, xs.dtype), cast(si, xs.dtype), bool(at.i("interleaved", 0)))
    return y if x.ndim == 4 else _merge(y)


# ====================================================================== masks as onnxruntime's CPU kernels build them

def _prepare_mask(at, mask, b, s, past, total, causal, filter_value):
    """onnxruntime's PrepareMask: the (B, S, T) float32 mask its GEMM accumulates the scaled scores into (0 where
    a key is seen, `filter_value` where the mask hides it, the float32 lowest past the causal diagonal), or None.
    mask: host int array of shape (B) (lengths), (2B) (ends, then starts), (B, T) or (B, S, T) of 0/1."""
    if mask is None and not causal:
        return None
    out = np.zeros((b, s, total), np.float32)
    if mask is not None:
        m = np.asarray(mask)
        if m.ndim == 3:
            if m.shape != (b, s, total):
                raise node_error(at, f"mask {m.shape} must be ({b}, {s}, {total})")
            out[m <= 0] = filter_value
        elif m.ndim == 2:
            if m.shape != (b, total):
                raise node_error(at, f"mask {m.shape} must be ({b}, {total}) (batch, past + new keys)")
            out[np.broadcast_to((m <= 0)[:, None, :], out.shape)] = filter_value
        elif m.ndim == 1 and m.shape[0] in (b, 2 * b):
            keys = np.arange(total)
            hide = keys[None, :] >= m[:b].astype(np.int64)[:, None]
            if m.shape[0] == 2 * b:
                hide |= keys[None, :] < np.minimum(m[b:].astype(np.int64), total)[:, None]
            out[np.broadcast_to(hide[:, None, :], out.shape)] = filter_value
        else:
            raise node_error(at, f"mask of shape {m.shape} is not supported (onnxruntime's CPU kernel reads "
                                 "(B), (2B), (B, T) or (B, S, T))")
    if causal:
        out[:, np.arange(total)[None, :] > (past + np.arange(s))[:, None]] = LOWEST
    return out


def _attend(ctx, q, k, v, scale, mask=None, attention_bias=None, softcap=0.0, sink=None, want_qk=0):
    """softmax(scale * q kᵀ [softcapped] + mask + attention_bias) v for q (B, N, S, H), k/v (B, N | Nkv, T, H).
    mask: a (B, S, T) float32 host array added to every head's scores (-inf leaves a key out). sink: (N,) logits
    in each head's softmax denominator only (GroupQueryAttention's head_sink / smooth softmax). want_qk: 1 also
    returns the scores before the softmax, 2 the probabilities. Returns (B, N, S, Hv) [, qk]."""
    n, nkv = q.shape[1], k.shape[1]
    if n != nkv:
        k, v = M.repeat_interleave(k, n // nkv, 1), M.repeat_interleave(v, n // nkv, 1)
    bias = None if mask is None else ctx.const(mask[:, None].astype(q.dtype.np))        # (B, 1, S, T)
    if softcap == 0.0 and sink is None and not want_qk:
        if attention_bias is not None:
            bias = attention_bias if bias is None else bias + attention_bias
        return scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    scores = matmul(q, M.transpose(k, 2, 3)) * scale                                   # (B, N, S, T)
    if softcap > 0:
        scores = E.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    if attention_bias is not None:
        scores = scores + attention_bias
    qk = scores if want_qk == 1 else None
    if sink is None:
        probs = R.softmax(scores, -1)
    else:
        b, nh, s, _ = scores.shape
        col = M.expand(M.reshape(cast(sink, scores.dtype), 1, nh, 1, 1), b, nh, s, 1)
        probs = M.narrow(R.softmax(M.cat([scores, col], -1), -1), -1, 0, scores.shape[-1])
    if want_qk == 2:
        qk = probs
    y = matmul(probs, v)
    return (y, qk) if want_qk else y


# ====================================================================== Attention

def _mask_host(mask):
    return None if mask is None else host(mask).astype(np.int64)


@op("Attention", domain=MS)
def _attention(ctx, ins, at):
    """input (B, S, Hin) @ weights (Hin, Hq + Hk + Hv) + bias -> heads; past (2, B, N, P, H) before the new keys;
    -> [output (B, S, Hv), present (2, B, N, P + S, H)]."""
    x, w = ins[0], ins[1]
    bias, mask, past, attn_bias, past_len = (list(ins[2:7]) + [None] * 5)[:5]
    n = at.i("num_heads")
    if at.i("do_rotary", 0):
        raise node_error(at, "do_rotary=1 is not supported (onnxruntime's CPU kernel has no rotary either)")
    if x.ndim != 3 or w.ndim != 2 or w.shape[0] != x.shape[2]:
        raise node_error(at, f"input {tuple(x.shape)} and weights {tuple(w.shape)} must be (B, S, Hin) and "
                             "(Hin, Hq + Hk + Hv)")
    sizes = at.ints("qkv_hidden_sizes") or [w.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != w.shape[1] or any(h <= 0 or h % n for h in sizes):
        raise node_error(at, f"qkv_hidden_sizes {sizes} must be 3 multiples of num_heads {n} summing to "
                             f"{w.shape[1]}")
    b, s, _ = x.shape
    qkv = matmul(x, w)
    if bias is not None:
        qkv = qkv + bias
    q, k, v = (_heads(M.narrow(qkv, -1, o, h), n) for o, h in zip((0, sizes[0], sizes[0] + sizes[1]), sizes))
    work = _work(q)
    q, k, v = cast(q, work), cast(k, work), cast(v, work)
    p = 0
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2 or past.shape[1] != b or past.shape[2] != n:
            raise node_error(at, f"past {tuple(past.shape)} must be (2, {b}, {n}, past length, head size)")
        if at.i("past_present_share_buffer", 0):
            p = int(host(past_len).reshape(-1)[0]) if past_len is not None else 0
            if not 0 <= p <= past.shape[3] - s:
                raise node_error(at, f"past_sequence_length {p} + {s} new keys do not fit the shared buffer's "
                                     f"{past.shape[3]} rows")
            pk, pv = M.narrow(cast(past[0], work), 2, 0, p), M.narrow(cast(past[1], work), 2, 0, p)
        else:
            p = past.shape[3]
            pk, pv = cast(past[0], work), cast(past[1], work)
        k, v = M.cat([pk, k], 2), M.cat([pv, v], 2)
    total = k.shape[2]
    add = _prepare_mask(at, _mask_host(mask), b, s, p, total, bool(at.i("unidirectional", 0)),
                        at.f("mask_filter_value", -10000.0))
    scale = at.f("scale", 0.0) or 1.0 / float(np.sqrt(sizes[0] // n))
    y = _attend(ctx, q, k, v, scale, add, None if attn_bias is None else cast(attn_bias, work))
    out = cast(_merge(y), x.dtype)
    present = None
    if len(at.node.output) > 1 and at.node.output[1]:
        present = M.stack([k, v], 0)
        if past is not None and at.i("past_present_share_buffer", 0):
            rest = past.shape[3] - total
            if rest:
                present = M.cat([present, M.narrow(cast(past, work), 3, total, rest)], 3)
        present = cast(present, x.dtype)
    return [out, present]


# ====================================================================== MultiHeadAttention

@op("MultiHeadAttention", domain=MS)
def _mha(ctx, ins, at):
    """Projected Q, K, V (B, S, D) / packed QKV (B, S, N, 3, H) / packed KV (B, L, N, 2, H) / K, V as
    (B, N, L, H) caches, plus bias, key_padding_mask, attention_bias and past_key/past_value (B, N, P, H)
    -> [output (B, S, Dv), present_key, present_value (B, N, P + L, H), qk]."""
    q_in, key, value, bias, kpm, attn_bias, past_k, past_v, past_len, cache_ind = (list(ins) + [None] * 10)[:10]
    n = at.i("num_heads")
    if cache_ind is not None:
        raise node_error(at, "cache_indirection (beam search) is not supported")
    b, s = q_in.shape[:2]
    work = _work(q_in)
    bias_parts = None
    if q_in.ndim == 5:                                          # packed QKV (B, S, N, 3, H)
        if q_in.shape[3] != 3 or key is not None:
            raise node_error(at, f"packed QKV {tuple(q_in.shape)} must be (B, S, N, 3, H) with no key/value")
        h = q_in.shape[4]
        q, k, v = (M.permute(q_in[:, :, :, i, :], 0, 2, 1, 3) for i in range(3))
        if bias is not None:
            q, k, v = (t + M.reshape(M.narrow(bias, 0, i * n * h, n * h), 1, n, 1, h) for i, t in enumerate((q, k, v)))
    else:
        if q_in.ndim != 3 or key is None:
            raise node_error(at, f"query {tuple(q_in.shape)} must be (B, S, D) with a key (or packed QKV 5-D)")
        d = q_in.shape[2]
        if bias is not None:
            dv = bias.shape[0] - 2 * d
            bias_parts = (M.narrow(bias, 0, 0, d), M.narrow(bias, 0, d, d), M.narrow(bias, 0, 2 * d, dv))
            q_in = q_in + bias_parts[0]
        q = _heads(q_in, n)
        if key.ndim == 5:                                       # packed KV (B, L, N, 2, H)
            k, v = (M.permute(key[:, :, :, i, :], 0, 2, 1, 3) for i in range(2))
            if bias_parts is not None:
                h = k.shape[3]
                k = k + M.reshape(bias_parts[1], 1, n, 1, h)
                v = v + M.reshape(bias_parts[2], 1, n, 1, h)
        elif key.ndim == 4:                                     # (B, N, L, H): a cross-attention cache as it is
            k, v = key, value
        else:
            if value is None:
                raise node_error(at, "a 3-D key needs a value")
            if bias_parts is not None:
                key, value = key + bias_parts[1], value + bias_parts[2]
            k, v = _heads(key, n), _heads(value, n)
    q, k, v = cast(q, work), cast(k, work), cast(v, work)
    p = 0
    if past_k is not None and past_v is not None:
        if past_len is not None:
            p = int(host(past_len).reshape(-1)[0])
            pk, pv = M.narrow(past_k, 2, 0, p), M.narrow(past_v, 2, 0, p)
        else:
            p = past_k.shape[2]
            pk, pv = past_k, past_v
        k, v = M.cat([cast(pk, work), k], 2), M.cat([cast(pv, work), v], 2)
    total = k.shape[2]
    add = _prepare_mask(at, _mask_host(kpm), b, s, p, total, bool(at.i("unidirectional", 0)),
                        at.f("mask_filter_value", -10000.0))
    scale = at.f("scale", 0.0) or 1.0 / float(np.sqrt(q.shape[3]))
    want_qk = 1 if len(at.node.output) > 3 and at.node.output[3] else 0
    got = _attend(ctx, q, k, v, scale, add, None if attn_bias is None else cast(attn_bias, work),
                  want_qk=want_qk)
    y, qk = got if want_qk else (got, None)
    dt = q_in.dtype
    return [cast(_merge(y), dt), cast(k, dt), cast(v, dt), None if qk is None else cast(qk, dt)]


# ====================================================================== GroupQueryAttention

@op("GroupQueryAttention", domain=MS)
def _gqa(ctx, ins, at):
    """query (B, S, Nq*H) or packed (B, S, (Nq + 2 Nkv) H), key/value (B, S, Nkv*H), past_key/past_value
    (B, Nkv, P_buffer, H), seqlens_k (B) = each row's total length - 1, total_sequence_length (scalar),
    cos/sin caches for do_rotary, position_ids, attention_bias, head_sink ... -> [output, present_key,
    present_value (B, Nkv, max(P_buffer, total), H), output_qk]."""
    (query, key, value, past_k, past_v, seqlens_k, total_len, cos, sin, pos_ids, attn_bias, head_sink,
     k_scale, v_scale, q_norm, k_norm, q_seqlens) = (list(ins) + [None] * 17)[:17]
    n, nkv = at.i("num_heads"), at.i("kv_num_heads")
    if n is None or nkv is None or n <= 0 or nkv <= 0 or n % nkv:
        raise node_error(at, f"num_heads {n} must be a positive multiple of kv_num_heads {nkv}")
    for name in ("k_quant_type", "v_quant_type"):
        if at.s(name, "NONE") != "NONE":
            raise node_error(at, f"{name}={at.s(name)!r}: a quantized KV cache is not supported")
    if at.i("sliding_window_cache", 0):
        raise node_error(at, "sliding_window_cache=1 (a window-sized cache) is not supported")
    if q_seqlens is not None:
        raise node_error(at, "query_seqlens (right-padded query chunks) is not supported")
    b, s = query.shape[:2]
    if key is None:                                             # packed QKV
        hidden = query.shape[2]
        h = hidden // (n + 2 * nkv)
        if h * (n + 2 * nkv) != hidden:
            raise node_error(at, f"packed QKV width {hidden} is not (num_heads + 2 kv_num_heads) x head size")
        q_in, k_in, v_in = (M.narrow(query, 2, o, c * h) for o, c in ((0, n), (n * h, nkv), ((n + nkv) * h, nkv)))
    else:
        q_in, k_in, v_in = query, key, value
        h = q_in.shape[2] // n
    if k_in.shape[1] != s:
        raise node_error(at, f"key/value length {k_in.shape[1]} must equal the query's {s}")
    work = _work(query)
    q, k, v = (cast(_heads(t, c), work) for t, c in ((q_in, n), (k_in, nkv), (v_in, nkv)))  # (B, N, S, H)
    lens = host(seqlens_k).astype(np.int64).reshape(-1) + 1                      # total length per row
    total = int(host(total_len).reshape(-1)[0])
    if lens.shape[0] != b or lens.min(initial=1) < 1 or lens.max(initial=0) > total:
        raise node_error(at, f"seqlens_k + 1 = {lens.tolist()} must be {b} lengths in 1..total_sequence_length "
                             f"{total}")
    first = s == total
    past_lens = np.zeros(b, np.int64) if first else lens - s                      # keys before this step, per row
    if past_lens.min(initial=0) < 0:
        raise node_error(at, f"seqlens_k + 1 = {lens.tolist()} is shorter than the {s} new tokens")
    if q_norm is not None and k_norm is not None:
        eps_q = at.f("q_norm_epsilon", at.f("qk_norm_epsilon", 1e-6))
        eps_k = at.f("k_norm_epsilon", at.f("qk_norm_epsilon", 1e-6))
        q, k = rms_norm(q, h, cast(q_norm, work), eps_q), rms_norm(k, h, cast(k_norm, work), eps_k)
    if at.i("do_rotary", 0):
        if cos is None or sin is None:
            raise node_error(at, "do_rotary=1 needs cos_cache and sin_cache")
        if pos_ids is not None and not first:
            pos = host(pos_ids).astype(np.int64).reshape(b, s)
        else:
            pos = past_lens[:, None] + np.arange(s)[None, :]                      # (B, S)
        c = cast(M.unsqueeze(_cache_rows(ctx, at, cos, pos), 1), work)           # (B, 1, S, rot / 2)
        si = cast(M.unsqueeze(_cache_rows(ctx, at, sin, pos), 1), work)
        inter = bool(at.i("rotary_interleaved", 0))
        q, k = rotate(q, c, si, inter), rotate(k, c, si, inter)
    # the cache: past rows [0, past_len) then the new rows, per batch row; buffer length max(P_buffer, total)
    p_buf = past_k.shape[2] if past_k is not None else 0
    length = sized(at, "total_sequence_length", [b, nkv, max(p_buf, total), h], work.itemsize)[2]
    present_k, present_v = _append(ctx, past_k, past_v, k, v, past_lens, length, work, first)
    # each row's window: keys [start, past + s] (causal), a local window if asked, none past the row's length
    keys = np.arange(length)
    qpos = past_lens[:, None] + np.arange(s)[None, :]                              # (B, S)
    allowed = np.broadcast_to(keys[None, None, :] < lens[:, None, None], (b, s, length))
    if at.i("causal", 1):
        allowed = allowed & (keys[None, None, :] <= qpos[:, :, None])
        window = at.i("local_window_size", -1)
        if window > 0:
            allowed = allowed & (keys[None, None, :] > qpos[:, :, None] - window)  # window keys, itself included
    mask = np.where(allowed, 0.0, -np.inf).astype(np.float32)
    softcap = at.f("softcap", 0.0)
    sink = None
    if head_sink is not None:
        sink = head_sink
    elif at.i("smooth_softmax", -1) == 1:
        sink = ctx.const(np.zeros(n, np.float32))
    scale = at.f("scale", 0.0) or 1.0 / float(np.sqrt(h))
    want_qk = at.i("qk_output", 0) if len(at.node.output) > 3 and at.node.output[3] else 0
    bias = None if attn_bias is None else cast(attn_bias, work)
    got = _attend(ctx, q, present_k, present_v, scale, mask, bias, softcap, sink, want_qk)
    y, qk = got if want_qk else (got, None)
    dt = query.dtype
    return [cast(_merge(y), dt), cast(present_k, past_k.dtype if past_k is not None else dt),
            cast(present_v, past_v.dtype if past_v is not None else dt), None if qk is None else cast(qk, dt)]


def _append(ctx, past_k, past_v, k, v, past_lens, length, work, first):
    """present (B, Nkv, length, H): each batch row's past rows [0, past_len) then its new rows, zeros after.
    The common case (one past length for every row) is two concatenations."""
    b, nkv, s, h = k.shape
    same = np.all(past_lens == past_lens[0])
    p = int(past_lens[0])
    if same and (past_k is None or first or past_k.shape[2] >= p):
        parts_k, parts_v = [], []
        if p:
            parts_k.append(M.narrow(cast(past_k, work), 2, 0, p))
            parts_v.append(M.narrow(cast(past_v, work), 2, 0, p))
        parts_k.append(k)
        parts_v.append(v)
        rest = length - p - s
        if rest > 0:  # rows past the total: zeros, as onnxruntime leaves a present buffer it allocated
            zeros = k.new_zeros((b, nkv, rest, h))
            parts_k.append(zeros)
            parts_v.append(zeros)
        return M.cat(parts_k, 2) if len(parts_k) > 1 else k, M.cat(parts_v, 2) if len(parts_v) > 1 else v
    rows_k, rows_v = [], []
    for i in range(b):
        pi = int(past_lens[i])
        pk = cast(past_k[i:i + 1], work) if past_k is not None else None
        pv = cast(past_v[i:i + 1], work) if past_v is not None else None
        rk, rv = _append(ctx, pk, pv, k[i:i + 1], v[i:i + 1], np.array([pi]), length, work, first)
        rows_k.append(rk)
        rows_v.append(rv)
    return M.cat(rows_k, 0), M.cat(rows_v, 0)
