"""Additive attention masks built on the host (numpy) from cache indices: causal, sliding-window, padding,
plus an optional additive bias (ALiBi). Rows are ordered as common.attention.Attention stacks its queries:
the G = n_heads // n_kv_heads query heads of one kv head go along the sequence axis, so a mask is
(G * T, S), or (batch, 1, G * T, S) with padding, or (heads, T, S) with a per-head bias.
"""
from __future__ import annotations

import numpy as np

import ember


def attention_mask(q_idx, k_idx, *, causal: bool = True, window: int | None = None, key_valid=None,
                   group: int = 1, bias=None, dtype=None, device=None):
    """q_idx (T,) and k_idx (S,) cache indices of the queries and keys; key_valid (B, S) bool (False: a
    padding token); bias (heads, 1 | T, S) added to every row. None when nothing is masked or added.

    A query always sees its own key, so a padding query row (whose output nobody reads) stays finite
    instead of turning into NaN that would reach the real rows through its keys and values."""
    q = np.asarray(q_idx)[:, None]                                      # (T, 1)
    kpos = np.asarray(k_idx)[None, :]                                   # (1, S)
    allowed = np.ones((q.shape[0], kpos.shape[1]), bool)                # (T, S)
    if causal:
        allowed &= kpos <= q
    if window is not None:
        allowed &= q - kpos < window
    if key_valid is not None:
        allowed = allowed[None] & np.asarray(key_valid, bool)[:, None, :]  # (B, T, S)
        allowed |= (kpos == q)[None]
    if bias is None and allowed.all():
        return None
    m = np.where(allowed, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    if bias is not None:
        if group != 1:
            raise ValueError("ember: an additive attention bias needs one kv head per query head")
        b = np.asarray(bias, np.float32)                                # (H, 1 | T, S)
        m = (m[:, None] + b[None]) if m.ndim == 3 else (m[None] + b)    # (B, H, T, S) | (H, T, S)
    elif m.ndim == 3:
        m = np.tile(m, (1, group, 1))[:, None]                          # (B, 1, G * T, S)
    else:
        m = np.tile(m, (group, 1))                                      # (G * T, S)
    return ember.tensor(m, dtype=dtype, device=device)


def padding_mask(attention_mask, dtype=None, device=None):
    """An encoder's (B, 1, 1, S) additive mask from a (B, S) 0/1 attention_mask (tokenizer's), or None."""
    valid = np.asarray(attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask, bool)
    if valid.all():
        return None
    m = np.where(valid, np.float32(0), np.float32(-np.inf))[:, None, None, :]
    return ember.tensor(m, dtype=dtype, device=device)
