"""SAM's image encoder (transformers' SamVisionEncoder, modeling_sam.py v5.x): a ViT over 16x16 patches of the
1024x1024 padded image with learned absolute positions, blocks of windowed (14x14) or global multi-head attention
with decomposed relative position bias (MViTv2), then a conv neck down to the 256-channel image embedding.

Attention runs as F.scaled_dot_product_attention with the relative bias as its additive mask (the kernel registry's
`attention` op). A global layer of SAM ViT-B would hold a (12, 4096, 4096) bias and as many scores at once
(800 MB each): its queries go in chunks of rows (QUERY_CHUNK scores per chunk), so memory stays bounded on the
page too. Names are the checkpoint's (`vision_encoder.layers.N.attn.qkv.weight`, `...rel_pos_h`).
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F

from ..common.mlp import MLP
from .config import SamVisionConfig

QUERY_CHUNK = 1 << 24  # scores (heads x query rows x keys) computed at once in one attention call


class ChannelsFirstLayerNorm(nn.LayerNorm):
    """SamLayerNorm(data_format="channels_first"): LayerNorm over the channels of (B, C, H, W)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class PatchEmbeddings(nn.Module):
    def __init__(self, c: SamVisionConfig):
        super().__init__()
        self.projection = nn.Conv2d(c.num_channels, c.hidden_size, c.patch_size, stride=c.patch_size)  # (d, 3, p, p)

    def forward(self, pixels):
        return self.projection(pixels).permute(0, 2, 3, 1)                      # (B, grid, grid, d)


def relative_index(size: int) -> np.ndarray:
    """Row of the (2 size - 1, head_dim) table for each (query, key) pair along one axis: q - k + size - 1."""
    i = np.arange(size)
    return (i[:, None] - i[None, :] + size - 1).astype(np.int64).ravel()       # (size * size,)


class VisionAttention(nn.Module):
    """Multi-head attention over an (h, w) grid of tokens with decomposed relative position bias: the bias of
    query (y, x) for key (ky, kx) is q . Rh[y - ky] + q . Rw[x - kx]."""

    def __init__(self, c: SamVisionConfig, side: int):
        super().__init__()
        self.heads, self.head_dim, self.side = c.num_attention_heads, c.head_dim, side
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size, bias=c.qkv_bias)  # (3 d, d)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size)                       # (d, d)
        self.use_rel_pos = c.use_rel_pos
        if c.use_rel_pos:
            self.rel_pos_h = nn.Parameter(ember.zeros(2 * side - 1, c.head_dim))   # (2 side - 1, hd)
            self.rel_pos_w = nn.Parameter(ember.zeros(2 * side - 1, c.head_dim))
        self._index = {}  # device -> the relative_index(side) tensor

    def _table(self, rel_pos):
        dev = rel_pos.device
        if dev not in self._index:
            self._index[dev] = ember.tensor(relative_index(self.side), device=dev)
        return rel_pos.index_select(0, self._index[dev]).reshape(self.side, self.side, self.head_dim)  # (q, k, hd)

    def forward(self, x):
        B, h, w, d = x.shape
        if (h, w) != (self.side, self.side):
            raise ValueError(f"ember: SAM attention built for a {self.side}x{self.side} grid got {h}x{w}")
        H, hd, n = self.heads, self.head_dim, h * w
        qkv = self.qkv(x).reshape(B, n, 3, H, hd).permute(2, 0, 3, 1, 4)         # (3, B, H, n, hd)
        q, k, v = qkv[0], qkv[1], qkv[2]
        rh = rw = None
        if self.use_rel_pos:
            rh, rw = self._table(self.rel_pos_h), self._table(self.rel_pos_w)     # (h, kh, hd), (w, kw, hd)
        rows = max(1, min(h, QUERY_CHUNK // max(1, B * H * n * w)))               # grid rows of queries per call
        outs = []
        for y0 in range(0, h, rows):
            ny = min(rows, h - y0)
            qc = q.narrow(2, y0 * w, ny * w)                                       # (B, H, ny w, hd)
            bias = None
            if rh is not None:
                qg = qc.reshape(B * H, ny, w, hd)
                # rel_h[b, y, x, ky] = q[b, y, x] . Rh[y, ky]: a batched matmul over the rows y
                bh = qg.permute(1, 0, 2, 3).reshape(ny, B * H * w, hd) @ rh.narrow(0, y0, ny).transpose(1, 2)
                bh = bh.reshape(ny, B * H, w, h).permute(1, 0, 2, 3)              # (BH, ny, w, kh)
                bw = qg.permute(2, 0, 1, 3).reshape(w, B * H * ny, hd) @ rw.transpose(1, 2)
                bw = bw.reshape(w, B * H, ny, w).permute(1, 2, 0, 3)              # (BH, ny, w, kw)
                bias = (bh.reshape(B * H, ny, w, h, 1) + bw.reshape(B * H, ny, w, 1, w))
                bias = bias.reshape(B, H, ny * w, n)                              # (B, H, ny w, n)
            outs.append(F.scaled_dot_product_attention(qc, k, v, attn_mask=bias, scale=hd ** -0.5))
        y = outs[0] if len(outs) == 1 else ember.cat(outs, 2)                      # (B, H, n, hd)
        return self.proj(y.permute(0, 2, 1, 3).reshape(B, h, w, d))               # (B, h, w, d)


class VisionLayer(nn.Module):
    def __init__(self, c: SamVisionConfig, window: int):
        super().__init__()
        self.window = window
        self.layer_norm1 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.attn = VisionAttention(c, window or c.grid)
        self.layer_norm2 = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.mlp = MLP(c.hidden_size, c.mlp_dim, c.hidden_act, names=("lin1", "lin2"))

    def forward(self, x):
        B, h, w, d = x.shape
        y = self.layer_norm1(x)
        ws = self.window
        if ws:  # non-overlapping ws x ws windows, the grid zero-padded to a multiple of ws
            ph, pw = -h % ws, -w % ws
            if ph or pw:
                y = F.pad(y, (0, 0, 0, pw, 0, ph))
            H, W = h + ph, w + pw
            y = y.reshape(B, H // ws, ws, W // ws, ws, d).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws, ws, d)
            y = self.attn(y)                                                      # (B * windows, ws, ws, d)
            y = y.reshape(B, H // ws, W // ws, ws, ws, d).permute(0, 1, 3, 2, 4, 5).reshape(B, H, W, d)
            if ph or pw:
                y = y[:, :h, :w]
        else:
            y = self.attn(y)
        x = x + y
        return x + self.mlp(self.layer_norm2(x))                                   # (B, h, w, d)


class VisionNeck(nn.Module):
    def __init__(self, c: SamVisionConfig):
        super().__init__()
        o = c.output_channels
        self.conv1 = nn.Conv2d(c.hidden_size, o, 1, bias=False)                   # (o, d, 1, 1)
        self.layer_norm1 = ChannelsFirstLayerNorm(o, eps=1e-6)
        self.conv2 = nn.Conv2d(o, o, 3, padding=1, bias=False)                    # (o, o, 3, 3)
        self.layer_norm2 = ChannelsFirstLayerNorm(o, eps=1e-6)

    def forward(self, x):
        x = self.layer_norm1(self.conv1(x.permute(0, 3, 1, 2)))                  # (B, o, grid, grid)
        return self.layer_norm2(self.conv2(x))


class SamVisionEncoder(nn.Module):
    def __init__(self, c: SamVisionConfig):
        super().__init__()
        self.config = c
        self.patch_embed = PatchEmbeddings(c)
        if c.use_abs_pos:
            self.pos_embed = nn.Parameter(ember.zeros(1, c.grid, c.grid, c.hidden_size))  # (1, grid, grid, d)
        else:
            self.pos_embed = None
        self.layers = nn.ModuleList([VisionLayer(c, c.window(i)) for i in range(c.num_hidden_layers)])
        self.neck = VisionNeck(c)

    def forward(self, pixels):
        """pixels (B, 3, S, S) normalized, S = image_size -> image embeddings (B, output_channels, grid, grid)."""
        steps = self.forward_steps(pixels)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def forward_steps(self, pixels):
        """forward() as a generator yielding after each block (1 .. num_hidden_layers) and the neck, so a caller
        can report progress and stop between blocks (the page's worker)."""
        c = self.config
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (c.num_channels, c.image_size, c.image_size):
            raise ValueError(f"ember: the SAM image encoder wants pixel_values (B, {c.num_channels}, {c.image_size}, "
                             f"{c.image_size}), got {tuple(pixels.shape)}")
        x = self.patch_embed(pixels)                                              # (B, grid, grid, d)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        for i, layer in enumerate(self.layers):
            x = layer(x)
            yield i + 1
        out = self.neck(x)                                                        # (B, o, grid, grid)
        yield len(self.layers) + 1
        return out
