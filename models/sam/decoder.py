"""SAM's mask decoder (transformers' SamMaskDecoder, SamTwoWayTransformer, SamAttention, SamFeedForward; v5.x):
output tokens (an IoU token and num_multimask_outputs + 1 mask tokens) followed by the prompt's sparse tokens
attend to the image embedding and back (a two-way transformer), the image embedding is upscaled 4x by two
transposed convs, and each mask token's hypernetwork MLP gives the weights that turn the upscaled embedding
into that mask's logits; an MLP on the IoU token predicts each mask's quality.

Shapes: B images, P prompts per image ("point batch"), T tokens per prompt, E the embedding's side (64), C its
channels (256). Names are the checkpoint's (`mask_decoder.transformer.layers.0.cross_attn_token_to_image.q_proj`).
"""
from __future__ import annotations

import ember
from ember import nn
from ember.nn import functional as F

from ..common.mlp import MLP, activation
from .config import SamMaskDecoderConfig
from .vision import ChannelsFirstLayerNorm


class SamAttention(nn.Module):
    """Attention whose q/k/v projections may shrink the width (hidden // downsample_rate) before the heads."""

    def __init__(self, c: SamMaskDecoderConfig, downsample_rate: int):
        super().__init__()
        inner = c.hidden_size // downsample_rate
        self.heads = c.num_attention_heads
        self.q_proj = nn.Linear(c.hidden_size, inner)                             # (inner, hidden)
        self.k_proj = nn.Linear(c.hidden_size, inner)
        self.v_proj = nn.Linear(c.hidden_size, inner)
        self.out_proj = nn.Linear(inner, c.hidden_size)                           # (hidden, inner)

    def _heads(self, x):
        B, P, n, d = x.shape
        return x.reshape(B * P, n, self.heads, d // self.heads).transpose(1, 2)  # (B P, heads, n, hd)

    def forward(self, q, k, v):
        B, P, n, _ = q.shape
        qh, kh, vh = self._heads(self.q_proj(q)), self._heads(self.k_proj(k)), self._heads(self.v_proj(v))
        y = F.scaled_dot_product_attention(qh, kh, vh)                            # (B P, heads, n, hd)
        return self.out_proj(y.transpose(1, 2).reshape(B, P, n, -1))              # (B, P, n, hidden)


class TwoWayBlock(nn.Module):
    """Self-attention of the tokens, tokens -> image cross-attention, MLP, image -> tokens cross-attention."""

    def __init__(self, c: SamMaskDecoderConfig, skip_first_layer_pe: bool):
        super().__init__()
        eps, h = c.layer_norm_eps, c.hidden_size
        self.self_attn = SamAttention(c, 1)
        self.layer_norm1 = nn.LayerNorm(h, eps=eps)
        self.cross_attn_token_to_image = SamAttention(c, c.attention_downsample_rate)
        self.layer_norm2 = nn.LayerNorm(h, eps=eps)
        self.mlp = MLP(h, c.mlp_dim, c.hidden_act, names=("lin1", "lin2"))
        self.layer_norm3 = nn.LayerNorm(h, eps=eps)
        self.layer_norm4 = nn.LayerNorm(h, eps=eps)
        self.cross_attn_image_to_token = SamAttention(c, c.attention_downsample_rate)
        self.skip_first_layer_pe = skip_first_layer_pe

    def forward(self, queries, keys, query_pe, key_pe):
        if self.skip_first_layer_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.layer_norm1(queries)
        k = keys + key_pe
        queries = self.layer_norm2(queries + self.cross_attn_token_to_image(queries + query_pe, k, keys))
        queries = self.layer_norm3(queries + self.mlp(queries))
        keys = self.layer_norm4(keys + self.cross_attn_image_to_token(k, queries + query_pe, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    def __init__(self, c: SamMaskDecoderConfig):
        super().__init__()
        self.layers = nn.ModuleList([TwoWayBlock(c, i == 0) for i in range(c.num_hidden_layers)])
        self.final_attn_token_to_image = SamAttention(c, c.attention_downsample_rate)
        self.layer_norm_final_attn = nn.LayerNorm(c.hidden_size)  # torch's default eps 1e-5, as transformers

    def forward(self, tokens, image, image_pe):
        """tokens (B, P, T, C); image (B, P, C, E, E); image_pe (1, C, E, E), the same for every image
        -> tokens (B, P, T, C), image (B, P, E E, C)."""
        B, P, C = image.shape[:3]
        keys = image.reshape(B, P, C, -1).transpose(2, 3)                         # (B, P, E E, C)
        key_pe = image_pe.reshape(1, 1, C, -1).transpose(2, 3)                    # (1, 1, E E, C)
        queries = tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe)
        q = queries + tokens
        queries = self.layer_norm_final_attn(queries + self.final_attn_token_to_image(q, keys + key_pe, keys))
        return queries, keys


class FeedForward(nn.Module):
    """SamFeedForward: proj_in -> ReLU -> (layers -> ReLU)* -> proj_out."""

    def __init__(self, d_in: int, hidden: int, d_out: int, depth: int):
        super().__init__()
        self.proj_in = nn.Linear(d_in, hidden)
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(depth - 2)])
        self.proj_out = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.relu(self.proj_in(x))
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.proj_out(x)


class SamMaskDecoder(nn.Module):
    def __init__(self, c: SamMaskDecoderConfig):
        super().__init__()
        h = c.hidden_size
        self.num_mask_tokens = c.num_multimask_outputs + 1
        self.iou_token = nn.Embedding(1, h)                                       # (1, C)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, h)                  # (masks, C)
        self.transformer = TwoWayTransformer(c)
        self.upscale_conv1 = nn.ConvTranspose2d(h, h // 4, 2, stride=2)           # (C, C/4, 2, 2)
        self.upscale_conv2 = nn.ConvTranspose2d(h // 4, h // 8, 2, stride=2)      # (C/4, C/8, 2, 2)
        self.upscale_layer_norm = ChannelsFirstLayerNorm(h // 4, eps=1e-6)
        self.act = activation("gelu")
        self.output_hypernetworks_mlps = nn.ModuleList([FeedForward(h, h, h // 8, 3)
                                                        for _ in range(self.num_mask_tokens)])
        self.iou_prediction_head = FeedForward(h, c.iou_head_hidden_dim, self.num_mask_tokens, c.iou_head_depth)

    def forward(self, image, image_pe, sparse, dense, multimask_output: bool = True):
        """image (B, C, E, E), image_pe (1, C, E, E) (SamModel.image_pe), sparse (B, P, n, C) or None,
        dense (B, C, E, E) -> masks (B, P, m, 4E, 4E) logits, iou (B, P, m): m = num_multimask_outputs, or 1."""
        B, C, E, _ = image.shape
        P = sparse.shape[1] if sparse is not None else 1
        out_tokens = ember.cat([self.iou_token.weight, self.mask_tokens.weight], 0)  # (1 + masks, C)
        tokens = out_tokens.reshape(1, 1, -1, C).expand(B, P, out_tokens.shape[0], C)
        if sparse is not None:
            tokens = ember.cat([tokens, sparse], 2)                                # (B, P, T, C)
        src = (image + dense).reshape(B, 1, C, E, E).expand(B, P, C, E, E)        # (B, P, C, E, E)
        hs, keys = self.transformer(tokens, src, image_pe)                         # (B, P, T, C), (B, P, E E, C)
        iou_out = hs[:, :, 0]                                                      # (B, P, C)
        mask_out = hs[:, :, 1:1 + self.num_mask_tokens]                            # (B, P, masks, C)
        up = keys.transpose(2, 3).reshape(B * P, C, E, E)
        up = self.act(self.upscale_layer_norm(self.upscale_conv1(up)))            # (B P, C/4, 2E, 2E)
        up = self.act(self.upscale_conv2(up))                                      # (B P, C/8, 4E, 4E)
        hyper = ember.stack([mlp(mask_out[:, :, i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], 2)
        c8, side = up.shape[1], up.shape[2]
        masks = (hyper @ up.reshape(B, P, c8, side * side)).reshape(B, P, -1, side, side)  # (B, P, masks, 4E, 4E)
        iou = self.iou_prediction_head(iou_out)                                    # (B, P, masks)
        if multimask_output:
            return masks[:, :, 1:], iou[:, :, 1:]
        return masks[:, :, :1], iou[:, :, :1]
