"""SAM's prompt encoder (transformers' SamPromptEncoder, SamPositionalEmbedding, SamMaskEmbedding; v5.x):
points with labels and boxes become sparse tokens (random Fourier features of their position plus a learned
embedding per kind), a low-resolution mask becomes a dense embedding added to the image embedding.

Point labels: 1 foreground, 0 background, -1 "not a point" (the pad SAM appends when there is no box), -10 the
processor's padding (its embedding is zero). Coordinates are in the 1024-pixel model input frame.
"""
from __future__ import annotations

import math

import numpy as np

import ember
from ember import nn

from ..common.mlp import activation
from .config import SamConfig
from .vision import ChannelsFirstLayerNorm


def centred(xy: np.ndarray) -> np.ndarray:
    """Coordinates in [0, 1] -> 2 xy - 1 in [-1, 1], float32 (computed in the input's precision first, as
    transformers does for the processor's float64 points)."""
    return (xy * 2 - 1).astype(np.float32)


class PositionalEmbedding(nn.Module):
    """sin/cos of 2 pi c @ G, G a fixed random (2, num_pos_feats) Gaussian matrix, c = 2 xy - 1 for xy in [0, 1]
    (see centred): (..., 2) -> (..., 2 num_pos_feats)."""

    def __init__(self, num_pos_feats: int):
        super().__init__()
        self.positional_embedding = nn.Parameter(ember.zeros(2, num_pos_feats))   # (2, F)

    def forward(self, c: np.ndarray):
        c = ember.tensor(c, device=self.positional_embedding.device) @ self.positional_embedding * (2 * math.pi)
        return ember.cat([c.sin(), c.cos()], -1)                                   # (..., 2 F)


class MaskEmbedding(nn.Module):
    """(B, 1, 4 E, 4 E) mask logits -> (B, hidden, E, E): two stride-2 convs with LayerNorm and activation, a 1x1."""

    def __init__(self, c: SamConfig):
        super().__init__()
        p = c.prompt
        q = p.mask_input_channels
        self.act = activation(p.hidden_act, "prompt_encoder_config.hidden_act")
        self.conv1 = nn.Conv2d(1, q // 4, 2, stride=2)                             # (q/4, 1, 2, 2)
        self.conv2 = nn.Conv2d(q // 4, q, 2, stride=2)                             # (q, q/4, 2, 2)
        self.conv3 = nn.Conv2d(q, p.hidden_size, 1)                                # (hidden, q, 1, 1)
        self.layer_norm1 = ChannelsFirstLayerNorm(q // 4, eps=p.layer_norm_eps)
        self.layer_norm2 = ChannelsFirstLayerNorm(q, eps=p.layer_norm_eps)

    def forward(self, masks):
        x = self.act(self.layer_norm1(self.conv1(masks)))                         # (B, q/4, 2E, 2E)
        x = self.act(self.layer_norm2(self.conv2(x)))                             # (B, q, E, E)
        return self.conv3(x)                                                       # (B, hidden, E, E)


class SamPromptEncoder(nn.Module):
    def __init__(self, c: SamConfig, shared: PositionalEmbedding):
        super().__init__()
        p = c.prompt
        object.__setattr__(self, "shared", shared)  # SamModel's shared_image_embedding, not a second copy
        self.mask_embed = MaskEmbedding(c)
        self.no_mask_embed = nn.Embedding(1, p.hidden_size)                        # (1, hidden)
        self.point_embed = nn.ModuleList([nn.Embedding(1, p.hidden_size) for _ in range(p.num_point_embeddings)])
        self.not_a_point_embed = nn.Embedding(1, p.hidden_size)                    # (1, hidden)
        self.size, self.grid, self.hidden = p.image_size, p.image_embedding_size, p.hidden_size

    def embed_points(self, points, labels, pad: bool):
        """points (B, P, N, 2) float in input pixels, labels (B, P, N) int (numpy) -> (B, P, N [+1], hidden)."""
        if pad:  # SAM's "not a point" token when no box follows the points
            points = np.concatenate([points, np.zeros(points.shape[:2] + (1, 2), points.dtype)], 2)
            labels = np.concatenate([labels, -np.ones(labels.shape[:2] + (1,), labels.dtype)], 2)
        dev = self.no_mask_embed.weight.device
        emb = self.shared(centred((points + 0.5) / self.size))                     # (B, P, N, hidden), pixel centres
        # -1 and -10 drop the Fourier features; -1, 0 and 1 add their learned vector
        keep = ember.tensor(((labels != -1) & (labels != -10)).astype(np.float32)[..., None], device=dev)
        kinds = [(labels == -1, self.not_a_point_embed.weight), (labels == 0, self.point_embed[0].weight),
                 (labels == 1, self.point_embed[1].weight)]
        out = emb * keep
        for sel, w in kinds:
            if sel.any():
                out = out + ember.tensor(sel.astype(np.float32)[..., None], device=dev) * w.reshape(1, 1, 1, -1)
        return out

    def embed_boxes(self, boxes):
        """boxes (B, P, 4) x0 y0 x1 y1 in input pixels (numpy) -> (B, P, 2, hidden): each corner's features plus
        the learned top-left / bottom-right vectors."""
        corners = (boxes.reshape(boxes.shape[:2] + (2, 2)) + 0.5) / self.size
        emb = self.shared(centred(corners))                                        # (B, P, 2, hidden)
        tl_br = ember.cat([self.point_embed[2].weight, self.point_embed[3].weight], 0)  # (2, hidden)
        return emb + tl_br

    def forward(self, points=None, labels=None, boxes=None, masks=None, batch: int = 1):
        """-> sparse (B, P, tokens, hidden) or None, dense (B, hidden, grid, grid). points (B, P, N, 2) and labels
        (B, P, N) as numpy; boxes (B, P, 4) numpy; masks (B, 1, 4 grid, 4 grid) Tensor."""
        sparse = None
        if points is not None:
            batch = points.shape[0]
            sparse = self.embed_points(points, labels, pad=boxes is None)
        if boxes is not None:
            batch = boxes.shape[0]
            b = self.embed_boxes(boxes)
            sparse = b if sparse is None else ember.cat([sparse, b], 2)
        if masks is not None:
            dense = self.mask_embed(masks)                                         # (B, hidden, grid, grid)
        else:
            dense = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(batch, self.hidden, self.grid, self.grid)
        return sparse, dense
