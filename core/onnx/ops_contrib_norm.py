"""onnxruntime's contrib operators (domain com.microsoft) for normalization and activations, as its transformer
optimizer writes them: SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization, Gelu,
BiasGelu, FastGelu, QuickGelu, BiasAdd, BiasSplitGelu; and SimplifiedLayerNormalization, which onnxruntime
registers in the default domain.

Semantics follow onnxruntime's CPU kernels (onnxruntime/contrib_ops/cpu/skip_layer_norm.cc, embed_layer_norm.cc,
bert/bias_gelu.cc ...): the sums and norms compute in float32 for half inputs, and the optional outputs (mean,
inverse std, the pre-norm sum) are made only when the node names them.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from .. import ops_elementwise as E
from .. import ops_movement as M
from .. import ops_reduce as R
from ..nn.functional import layer_norm, rms_norm
from .guard import node_error
from .registry import op
from .values import axis, cast, host

MS = "com.microsoft"


def _wants(at, i):
    """Whether the node names its output i."""
    outs = at.node.output
    return i < len(outs) and bool(outs[i])


def _stats(xf, rms, eps):
    """(mean or None, 1 / std) over the last axis of float32 xf, keeping it: the optional outputs."""
    if rms:
        return None, E.rsqrt(R.mean(xf * xf, dim=-1, keepdim=True) + eps)
    mean = R.mean(xf, dim=-1, keepdim=True)
    c = xf - mean
    return mean, E.rsqrt(R.mean(c * c, dim=-1, keepdim=True) + eps)


def _normed(ctx, at, s, gamma, beta, eps, rms):
    """[y, mean, inv_std] of the pre-norm sum s, with the stats computed only when named."""
    hidden = s.shape[-1]
    if tuple(gamma.shape) != (hidden,) or (beta is not None and tuple(beta.shape) != (hidden,)):
        raise node_error(at, f"gamma {tuple(gamma.shape)} / beta {None if beta is None else tuple(beta.shape)} "
                             f"must be ({hidden},), the input's last dimension")
    y = rms_norm(s, hidden, gamma, eps) if rms else layer_norm(s, hidden, gamma, beta, eps)
    if not (_wants(at, 1) or _wants(at, 2)):
        return [y, None, None]
    mean, inv = _stats(cast(s, D.float32), rms, eps)
    return [y, mean, inv]


def _skip_norm(rms):
    def f(ctx, ins, at):
        x, skip, gamma = ins[:3]
        beta = None if rms else (ins[3] if len(ins) > 3 else None)
        bias = ins[3 if rms else 4] if len(ins) > (3 if rms else 4) else None
        if x.ndim not in (2, 3) or tuple(skip.shape[-1:]) != tuple(x.shape[-1:]):
            raise node_error(at, f"input {tuple(x.shape)} and skip {tuple(skip.shape)} must be (batch, sequence, "
                                 "hidden) or (tokens, hidden) with the same hidden size")
        s = x + skip
        if bias is not None:
            s = s + bias
        eps = at.f("epsilon", 1e-12)
        return _normed(ctx, at, s, gamma, beta, eps, rms) + [s]
    return f


op("SkipLayerNormalization", domain=MS)(_skip_norm(rms=False))
op("SkipSimplifiedLayerNormalization", domain=MS)(_skip_norm(rms=True))


@op("SimplifiedLayerNormalization", since=1)
def _simplified_layer_norm(ctx, ins, at):
    """RMSNorm over the axes from `axis` on (onnxruntime registers it in the default domain): [Y, inv_std_var]."""
    x, scale = ins[0], ins[1]
    ax = axis(at.i("axis", -1), x.ndim, ctx)
    eps = at.f("epsilon", 1e-5)
    if ax == x.ndim - 1 and tuple(scale.shape) == (x.shape[-1],) and not _wants(at, 1) and scale.dtype is x.dtype:
        return rms_norm(x, x.shape[-1], scale, eps)
    axes = tuple(range(ax, x.ndim))
    xf = cast(x, D.float32)
    inv = E.rsqrt(R.mean(xf * xf, dim=axes, keepdim=True) + eps)
    return [cast(xf * inv, x.dtype) * scale, inv]


@op("EmbedLayerNormalization", domain=MS)
def _embed_layer_norm(ctx, ins, at):
    """LayerNorm(word[ids] + position[position_ids or 0..S-1] + segment[segment_ids]) -> [output, mask_index
    (the count of non-zero mask entries per row, as onnxruntime's CPU kernel), embedding_sum]."""
    ids, seg, word, pos_table, seg_table, gamma, beta = (list(ins) + [None] * 9)[:7]
    mask = ins[7] if len(ins) > 7 else None
    pos_ids = ins[8] if len(ins) > 8 else None
    if ids.ndim != 2:
        raise node_error(at, f"input_ids must be (batch, sequence), got {tuple(ids.shape)}")
    b, s = ids.shape

    def look(table, idx, what):
        i = host(idx).astype(np.int64)
        if i.size and (i.min() < 0 or i.max() >= table.shape[0]):
            raise node_error(at, f"{what} holds {int(i.min())}..{int(i.max())}, outside the table's "
                                 f"{table.shape[0]} rows")
        from .. import ops_indexing as I
        return M.reshape(I.index_select(table, 0, ctx.const(i.reshape(-1))), *i.shape, table.shape[1])

    emb = look(word, ids, "input_ids")                                        # (B, S, hidden)
    if pos_ids is None:
        if s > pos_table.shape[0]:
            raise node_error(at, f"sequence length {s} is past the position table's {pos_table.shape[0]} rows")
        emb = emb + M.unsqueeze(M.narrow(pos_table, 0, 0, s), 0)
    else:
        emb = emb + look(pos_table, pos_ids, "position_ids")
    if seg is not None and seg_table is not None:
        emb = emb + look(seg_table, seg, "segment_ids")
    y = layer_norm(emb, emb.shape[-1], gamma, beta, at.f("epsilon", 1e-12))
    mask_index = None
    if _wants(at, 1):
        m = host(mask) if mask is not None else np.ones((b, s), np.int32)
        mask_index = ctx.const((m != 0).sum(-1).astype(np.int32))
    return [y, mask_index, emb]


# ====================================================================== activations

@op("Gelu", domain=MS)
def _gelu(ctx, ins, at):
    return E.gelu(ins[0])


@op("BiasGelu", domain=MS)
def _bias_gelu(ctx, ins, at):
    return E.gelu(ins[0] + ins[1])


@op("FastGelu", domain=MS)
def _fast_gelu(ctx, ins, at):
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), x plus the optional bias: GELU's tanh form."""
    x = ins[0] if len(ins) < 2 or ins[1] is None else ins[0] + ins[1]
    return E.gelu(x, approximate="tanh")


@op("QuickGelu", domain=MS)
def _quick_gelu(ctx, ins, at):
    x = ins[0]
    alpha = at.f("alpha", 1.702)
    return x * E.sigmoid(x * alpha) if alpha != 1.0 else E.silu(x)


@op("BiasAdd", domain=MS)
def _bias_add(ctx, ins, at):
    x, bias, skip = ins[:3]
    return x + bias + skip


@op("BiasSplitGelu", domain=MS)
def _bias_split_gelu(ctx, ins, at):
    """(X + bias) split in halves along the last axis: left * Gelu(right)."""
    x = ins[0] + ins[1]
    half = x.shape[-1] // 2
    if x.shape[-1] % 2:
        raise node_error(at, f"the last dimension {x.shape[-1]} must be even")
    return M.narrow(x, -1, 0, half) * E.gelu(M.narrow(x, -1, half, half))

