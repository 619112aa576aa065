"""Multi-head attention for every model of the zoo: MHA, grouped-query (GQA) and multi-query (MQA), self
or encoder (no cache), q/k/v as separate projections or one fused matrix [q | k | v], optional biases,
q/k norms, rotary embeddings, an explicit KVCache (common/cache.py), masks from common/masks.py.

Small models are bound by per-op overhead, so attention runs few, large ops: grouped-query attention does not
repeat k/v; the G = n_heads // n_kv_heads query heads that share a kv head are stacked along the sequence axis
instead ((B, K, G * T, hd) against (B, K, S, hd): one F.scaled_dot_product_attention, the backend's fused
kernel where it has one). Projection names are the checkpoint's (`names`), so loading stays strict.
"""
from __future__ import annotations

from ember import nn
from ember.nn import functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int | None = None, head_dim: int | None = None, *,
                 bias: bool | tuple = False, out_bias: bool | None = None, scale: float | None = None,
                 names=("q_proj", "k_proj", "v_proj", "o_proj"), fused: str | None = None, qk_norm=None):
        """bias: for q, k and v alike, or a (q, k, v) triple (Whisper's key has none); fused: the name of one
        (n_heads + 2 n_kv_heads) * head_dim projection (q, k, v rows stacked) that replaces names[:3];
        qk_norm: a factory norm(head_dim) applied to q and k per head before rope."""
        super().__init__()
        self.n_heads, self.n_kv = n_heads, n_kv_heads or n_heads
        self.hd = head_dim or dim // n_heads
        self.scale, self.names, self.fused = scale, names, fused
        H, K, hd = self.n_heads, self.n_kv, self.hd
        qb, kb, vb = bias if isinstance(bias, tuple) else (bias,) * 3
        if fused:
            setattr(self, fused, nn.Linear(dim, (H + 2 * K) * hd, bias=qb))        # ((H + 2K) * hd, dim)
        else:
            setattr(self, names[0], nn.Linear(dim, H * hd, bias=qb))               # (H * hd, dim)
            setattr(self, names[1], nn.Linear(dim, K * hd, bias=kb))               # (K * hd, dim)
            setattr(self, names[2], nn.Linear(dim, K * hd, bias=vb))               # (K * hd, dim)
        if names[3] is not None:  # None: the caller projects the heads (BERT keeps it in another module)
            setattr(self, names[3], nn.Linear(H * hd, dim, bias=qb if out_bias is None else out_bias))  # (dim, H * hd)
        self.qk_norm = qk_norm is not None
        if qk_norm is not None:
            self.q_norm, self.k_norm = qk_norm(hd), qk_norm(hd)                    # (hd,) each

    def project(self, x):
        """x (B, T, dim) -> q (B, T, H, hd), k, v (B, T, K, hd); rope not yet applied."""
        B, T, _ = x.shape
        H, K, hd = self.n_heads, self.n_kv, self.hd
        if self.fused:
            qkv = getattr(self, self.fused)(x).reshape(B, T, H + 2 * K, hd)       # (B, T, H + 2K, hd)
            return qkv.narrow(2, 0, H), qkv.narrow(2, H, K), qkv.narrow(2, H + K, K)
        mods = [getattr(self, n) for n in self.names[:3]]
        if all(type(m) is nn.Linear for m in mods):  # float weights: the backend may run the three as one kernel
            q, k, v = F.linears(x, [m.weight for m in mods], [m.bias for m in mods])
        else:
            q, k, v = (m(x) for m in mods)
        return q.reshape(B, T, H, hd), k.reshape(B, T, K, hd), v.reshape(B, T, K, hd)

    def memory_kv(self, memory):
        """Cross-attention keys and values (B, K, S, hd) of encoder states memory (B, S, dim): computed once
        per input and passed as forward(kv=...) at every decoding step."""
        B, S, _ = memory.shape
        k, v = (getattr(self, n)(memory).reshape(B, S, self.n_kv, self.hd).transpose(1, 2) for n in self.names[1:3])
        return k, v

    def forward(self, x, rope=None, mask=None, cache=None, layer: int = 0, kv=None):
        """x (B, T, dim) -> (B, T, dim); with a cache, k/v are appended at the cache's position; with kv
        (memory_kv's), x attends to those instead (cross-attention: no rope, no cache)."""
        B, T, _ = x.shape
        H, K, hd = self.n_heads, self.n_kv, self.hd
        if kv is not None:
            q = getattr(self, self.names[0])(x).reshape(B, T, H, hd)
            k, v = kv
            rope = cache = None
        elif self.fused and not self.qk_norm and T == 1 and cache is not None and getattr(rope, "matrix", None) \
                is not None:  # one decoded token: rope, the cache write and attention in one op
            qkv = getattr(self, self.fused)(x).reshape(B, 1, H + 2 * K, hd)       # (B, 1, H + 2K, hd)
            kbuf, vbuf, row, length = cache.slot(layer, qkv.narrow(2, H, K).transpose(1, 2))
            o = F.rope_append_attention(qkv, rope.matrix, kbuf, vbuf, mask, n_heads=H, slot=row, length=length,
                                        scale=self.scale)                          # (B, K, G, hd)
            o = o.reshape(B, 1, H * hd)
            return o if self.names[3] is None else getattr(self, self.names[3])(o)  # (B, 1, dim)
        elif self.fused and not self.qk_norm and rope is not None:  # q and k rotated in one op
            qkv = getattr(self, self.fused)(x).reshape(B, T, H + 2 * K, hd)       # (B, T, H + 2K, hd)
            qk = rope(qkv.narrow(2, 0, H + K))                                     # (B, T, H + K, hd)
            q, k, v = qk.narrow(2, 0, H), qk.narrow(2, H, K), qkv.narrow(2, H + K, K)
        else:
            q, k, v = self.project(x)
            if self.qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            if rope is not None:
                q, k = rope(q), rope(k)                                            # (B, T, H | K, hd)
        if kv is None:
            k, v = k.transpose(1, 2), v.transpose(1, 2)                            # (B, K, T, hd)
        # the G = H // K query heads of one kv head go along the sequence axis: (B, K, G * T, hd)
        # (for one token that is a plain reshape: decoding skips the permutes)
        q = q.reshape(B, K, H // K, hd) if T == 1 else \
            q.reshape(B, T, K, H // K, hd).permute(0, 2, 3, 1, 4).reshape(B, K, H // K * T, hd)
        if cache is not None:
            k, v = cache.update(layer, k, v)                                       # (B, K, S, hd)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)  # (B, K, G * T, hd)
        o = o.reshape(B, T, H * hd) if T == 1 else \
            o.reshape(B, K, H // K, T, hd).permute(0, 3, 1, 2, 4).reshape(B, T, H * hd)
        return o if self.names[3] is None else getattr(self, self.names[3])(o)     # (B, T, dim)
