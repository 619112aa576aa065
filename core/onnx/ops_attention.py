"""ONNX attention-era operators on ember Tensors: Attention (opset 23+), RotaryEmbedding.

Masks that depend only on shapes (causal, sliding window, padding lengths) are built on the host
as small boolean arrays; the data path (Q·Kᵀ, the mask added, softmax, ·V) runs on the device.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_movement as M
from .. import ops_reduce as R
from ..autograd import prim_pad
from ..linalg import matmul
from .registry import op
from .values import cast, ember_dtype, host

_NEG_INF = float("-inf")


def _heads(x, n_heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = x.shape
    return M.permute(M.reshape(x, b, s, n_heads, hidden // n_heads), 0, 2, 1, 3)


def _structural_mask(q_len, kv_len, offset, causal, left, right):
    """Boolean (…, q, kv) array of allowed (query, key) pairs from shapes alone, or None.
    `offset` (an int or a (batch,) array) is where the query block starts among the keys."""
    if not causal and left < 0 and right < 0:
        return None
    off = np.asarray(offset).reshape(-1, 1, 1) if np.ndim(offset) else int(offset)
    diff = np.arange(q_len).reshape(-1, 1) + off - np.arange(kv_len).reshape(1, -1)
    allowed = np.ones(np.shape(diff), bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed[:, None] if allowed.ndim == 3 else allowed  # per batch: (B, 1, q, kv)


@op("Attention", since=23)
def _attention(ctx, ins, at):
    q, k, v = ins[:3]
    mask, past_k, past_v = (list(ins[3:6]) + [None] * 3)[:3]
    nonpad = ins[6] if len(ins) > 6 else None
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _heads(q, at.i("q_num_heads")), _heads(k, at.i("kv_num_heads")), _heads(v, at.i("kv_num_heads"))
    out_dtype = q.dtype
    work = D.float32 if q.dtype.itemsize < 4 else q.dtype  # half inputs compute in float32
    q, k, v = cast(q, work), cast(k, work), cast(v, work)
    if past_k is not None:
        k, v = M.cat([cast(past_k, work), k], 2), M.cat([cast(past_v, work), v], 2)
    present_k, present_v = k, v
    q_len, kv_len, batch = q.shape[2], k.shape[2], q.shape[0]
    scale = at.f("scale", 1.0 / np.sqrt(q.shape[3]))

    # the additive bias: the attn_mask (bool: allowed, float: added), then shape-only masks
    bias = None
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if mask.dtype is D.bool_:
            if pad > 0:
                mask = prim_pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, pad),), False)
            zeros = q.new_zeros((1,))
            bias = E.where(mask, zeros, zeros + _NEG_INF)
        else:
            bias = cast(mask, work)
            if pad > 0:
                bias = prim_pad(bias, ((0, 0),) * (bias.ndim - 1) + ((0, pad),), _NEG_INF)
    lens = host(nonpad).astype(np.int64).reshape(-1) if nonpad is not None else None
    offset = past_k.shape[2] if past_k is not None else (lens - q_len if lens is not None else 0)
    allowed = _structural_mask(q_len, kv_len, offset, bool(at.i("is_causal", 0)),
                               at.i("left_window_size", -1), at.i("right_window_size", -1))
    if lens is not None:
        padded = (np.arange(kv_len)[None, :] < lens[:, None]).reshape(batch, 1, 1, kv_len)
        allowed = padded if allowed is None else allowed & padded
    if allowed is not None:
        shaped = ctx.const(np.where(allowed, 0.0, -np.inf), work.np)
        bias = shaped if bias is None else bias + shaped

    # grouped-query attention: each KV head serves q_heads / kv_heads query heads
    if q.shape[1] != k.shape[1] and q.shape[1] % k.shape[1] == 0:
        reps = q.shape[1] // k.shape[1]
        k, v = M.repeat_interleave(k, reps, 1), M.repeat_interleave(v, reps, 1)
    root = float(np.sqrt(scale))  # as the reference: both operands scaled by sqrt(scale)
    scores = matmul(q * root, M.transpose(k * root, 2, 3))
    softcap = at.f("softcap", 0.0)
    if softcap > 0:
        scores = E.tanh(scores / softcap) * softcap
    mode = at.i("qk_matmul_output_mode", 0)
    qk_out = scores
    if bias is not None:
        scores = scores + bias
    if mode == 2:
        qk_out = scores
    precision = at.i("softmax_precision")
    if precision:
        scores = cast(scores, ember_dtype(precision, ctx.where))
    probs = cast(R.softmax(scores, -1), work)
    if bias is not None:  # a row with no allowed key attends to nothing: zeros, not NaN
        dead = R.amax(bias, dim=-1, keepdim=True) == _NEG_INF
        probs = E.where(dead, q.new_zeros((1,)), probs)
    if mode == 3:
        qk_out = probs
    y = matmul(probs, v)
    if three_d:
        y = M.reshape(M.permute(y, 0, 2, 1, 3), batch, q_len, -1)
    return [cast(t, out_dtype) for t in (y, present_k, present_v, qk_out)]


@op("RotaryEmbedding", since=23)
def _rotary(ctx, ins, at):
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        x = M.permute(x, 0, 2, 1, 3)
    else:
        b, s, hidden = x.shape
        heads = at.i("num_heads")
        x = M.reshape(x, b, s, heads, hidden // heads)
    dim = at.i("rotary_embedding_dim", 0) or x.shape[3]
    if pos is not None:
        from .. import ops_indexing as I
        cos = M.reshape(I.index_select(cos, 0, M.reshape(pos, -1)), *pos.shape, -1)
        sin = M.reshape(I.index_select(sin, 0, M.reshape(pos, -1)), *pos.shape, -1)
    cos, sin = M.unsqueeze(cos, 2), M.unsqueeze(sin, 2)
    rot, rest = M.narrow(x, 3, 0, dim), M.narrow(x, 3, dim, x.shape[3] - dim)
    if at.i("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = M.narrow(rot, 3, 0, dim // 2), M.narrow(rot, 3, dim // 2, dim // 2)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if at.i("interleaved", 0):
        rot = M.reshape(M.stack([real, imag], -1), *rot.shape)
    else:
        rot = M.cat([real, imag], -1)
    y = M.cat([rot, rest], -1) if rest.shape[3] else rot
    return M.reshape(y, *shape) if len(shape) == 3 else M.permute(y, 0, 2, 1, 3)


@op("LinearAttention", since=27)
def _linear_attention(ctx, ins, at):
    """Recurrent linear attention (linear, gated, delta, gated_delta rules): a (d_k, d_v) state per KV
    head, decayed by exp(decay), corrected toward v by beta (delta rules), read by each query."""
    q, k, v = ins[:3]
    past, decay, beta = (list(ins[3:6]) + [None] * 3)[:3]
    hq, hkv = at.i("q_num_heads"), at.i("kv_num_heads")
    rule = at.s("update_rule", "gated_delta")
    out_dtype = q.dtype
    b, t, _ = q.shape
    q4, k4, v4 = (cast(_heads(x, h), D.float32) for x, h in ((q, hq), (k, hkv), (v, hkv)))
    d_k, d_v = q4.shape[3], v4.shape[3]
    group = hq // hkv
    if decay is not None:
        decay4 = (M.permute(M.reshape(decay, b, t, hkv, 1), 0, 2, 1, 3) if decay.shape[-1] == hkv
                  else _heads(decay, hkv))
        decay4 = cast(decay4, D.float32)
    if beta is not None:
        beta4 = cast(M.permute(M.reshape(beta, b, t, beta.shape[-1], 1), 0, 2, 1, 3), D.float32)
    state_dtype = past.dtype if past is not None else out_dtype
    state = cast(past, D.float32) if past is not None else q4.new_zeros((b, hkv, d_k, d_v))
    scale = at.f("scale", 0.0) or 1.0 / np.sqrt(d_k)
    outs = []
    for i in range(t):
        qt, kt, vt = q4[:, :, i, :], k4[:, :, i, :], v4[:, :, i, :]
        if rule in ("gated", "gated_delta"):
            state = state * M.unsqueeze(E.exp(decay4[:, :, i, :]), -1)
        if rule in ("delta", "gated_delta"):
            retrieved = M.squeeze(matmul(M.unsqueeze(kt, 2), state), 2)  # (B, H, d_v)
            vt = beta4[:, :, i, :] * (vt - retrieved)
        state = state + M.unsqueeze(kt, -1) * M.unsqueeze(vt, -2)
        read = M.repeat_interleave(state, group, 1) if group > 1 else state
        outs.append(M.squeeze(matmul(M.unsqueeze(qt, 2), read), 2) * scale)  # (B, Hq, d_v)
    y = M.reshape(M.stack(outs, 1), b, t, hq * d_v)
    return [cast(y, out_dtype), cast(state, state_dtype)]


@op("FlexAttention", since=1, domain="ai.onnx.preview")
def _flex_attention(ctx, ins, at):
    """softmax(score_mod(Q·Kᵀ·scale)) then prob_mod, ·V; the mods are subgraphs of one tensor each."""
    q, k, v = ins[:3]
    work = D.float32 if q.dtype.itemsize < 4 else q.dtype
    precision = at.i("softmax_precision")
    if precision:
        work = ember_dtype(precision, ctx.where)
    if q.shape[1] != k.shape[1]:
        reps = q.shape[1] // k.shape[1]
        k, v = M.repeat_interleave(k, reps, 1), M.repeat_interleave(v, reps, 1)
    scale = at.f("scale", 1.0 / np.sqrt(q.shape[3]))
    root = float(np.sqrt(np.float32(scale)))
    scores = cast(matmul(q * root, M.transpose(k * root, 2, 3)), work)

    def mod(name, t):
        g = at.graph(name)
        if g is None:
            return t
        (out,) = ctx.run_graph(g, {g.input[0].name: t}, ctx.scope)
        return cast(out, work)
    probs = mod("prob_mod", R.softmax(mod("score_mod", scores), -1))
    return cast(matmul(probs, cast(v, work)), v.dtype)
