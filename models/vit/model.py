"""ViT (after transformers' models/vit/modeling_vit.py, v5.x): a patch convolution, a [CLS] token and learned
positions, pre-LayerNorm blocks (layernorm_before / layernorm_after) of bidirectional attention and a GELU
MLP, the final layernorm, a linear classifier on [CLS] (ViTForImageClassification). Names are the
checkpoint's (`vit.embeddings.*`, `vit.encoder.layer.N.attention.attention.query`, `classifier`); the heads
are the toolkit's Attention. Input: pixel_values (B, 3, H, W) at the config's image_size, normalized."""
from __future__ import annotations

from dataclasses import dataclass

import ember
from ember import nn
from ember.errors import FormatError
from ember.limits import check_config

from ..common.attention import Attention
from ..common.mlp import activation


@dataclass
class ViTOutput:
    logits: object                 # (B, num_labels)
    last_hidden_state: object      # (B, 1 + patches, dim)


class ViTConfig:
    def __init__(self, d: dict):
        try:
            self.dim, self.n_layers, self.n_heads = int(d["hidden_size"]), int(d["num_hidden_layers"]), int(d["num_attention_heads"])
            self.hidden_dim, self.image_size, self.patch = int(d["intermediate_size"]), int(d["image_size"]), int(d["patch_size"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"ember: vit config.json: bad or missing field {e}") from None
        self.channels, self.eps = int(d.get("num_channels", 3)), float(d.get("layer_norm_eps", 1e-12))
        self.act, self.qkv_bias = d.get("hidden_act", "gelu"), bool(d.get("qkv_bias", True))
        self.labels = {int(k): v for k, v in (d.get("id2label") or {}).items()}
        check_config("vit config.json", "width", hidden_size=self.dim, intermediate_size=self.hidden_dim)
        check_config("vit config.json", "layers", num_hidden_layers=self.n_layers)
        if self.patch <= 0 or self.image_size % self.patch or self.dim % self.n_heads:
            raise FormatError(f"ember: vit config.json: image_size {self.image_size} / patch_size {self.patch} / "
                              f"heads {self.n_heads} do not divide")
        self.n_patches = (self.image_size // self.patch) ** 2


class PatchEmbeddings(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.projection = nn.Conv2d(c.channels, c.dim, c.patch, stride=c.patch)  # (dim, 3, p, p)


class Embeddings(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.cls_token = nn.Parameter(ember.zeros(1, 1, c.dim))                     # (1, 1, dim)
        self.position_embeddings = nn.Parameter(ember.zeros(1, c.n_patches + 1, c.dim))  # (1, 1 + N, dim)
        self.patch_embeddings = PatchEmbeddings(c)

    def forward(self, pixels):
        x = self.patch_embeddings.projection(pixels)                                # (B, dim, h, w)
        B, D = x.shape[0], x.shape[1]
        x = x.reshape(B, D, -1).transpose(1, 2)                                     # (B, N, dim)
        cls = self.cls_token.expand(B, 1, D)
        return ember.cat([cls, x], 1) + self.position_embeddings                    # (B, 1 + N, dim)


class Dense(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.dense = nn.Linear(d_in, d_out)                                         # (d_out, d_in)


class AttentionBlock(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.attention = Attention(c.dim, c.n_heads, bias=c.qkv_bias, names=("query", "key", "value", None))
        self.output = Dense(c.dim, c.dim)


class Layer(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.attention = AttentionBlock(c)
        self.intermediate, self.output = Dense(c.dim, c.hidden_dim), Dense(c.hidden_dim, c.dim)
        self.layernorm_before = nn.LayerNorm(c.dim, eps=c.eps)                      # (dim,)
        self.layernorm_after = nn.LayerNorm(c.dim, eps=c.eps)                       # (dim,)
        self.act = activation(c.act)

    def forward(self, x):
        a = self.attention
        x = x + a.output.dense(a.attention(self.layernorm_before(x)))
        return x + self.output.dense(self.act(self.intermediate.dense(self.layernorm_after(x))))


class Encoder(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c.n_layers)])


class Backbone(nn.Module):
    def __init__(self, c: ViTConfig):
        super().__init__()
        self.embeddings, self.encoder = Embeddings(c), Encoder(c)
        self.layernorm = nn.LayerNorm(c.dim, eps=c.eps)                             # (dim,)


class ViTForImageClassification(nn.Module):
    def __init__(self, config: ViTConfig, num_labels: int):
        super().__init__()
        self.config = c = config
        self.vit = Backbone(c)
        self.classifier = nn.Linear(c.dim, num_labels)                             # (labels, dim)

    @property
    def device(self):
        return self.classifier.weight.device

    def forward(self, pixel_values) -> ViTOutput:
        c = self.config
        if tuple(pixel_values.shape[1:]) != (c.channels, c.image_size, c.image_size):
            raise ValueError(f"ember: ViT wants pixel_values (B, {c.channels}, {c.image_size}, {c.image_size}), "
                             f"got {tuple(pixel_values.shape)}")
        x = self.vit.embeddings(pixel_values.to(self.device))
        for layer in self.vit.encoder.layer:
            x = layer(x)
        x = self.vit.layernorm(x)                                                   # (B, 1 + N, dim)
        return ViTOutput(self.classifier(x.narrow(1, 0, 1).reshape(x.shape[0], c.dim)), x)


def build_from_hf(config: dict, sd: dict, where: str) -> ViTForImageClassification:
    if "classifier.weight" not in sd:
        raise FormatError(f"ember: {where}: no 'classifier.weight': ember runs ViTForImageClassification checkpoints")
    model = ViTForImageClassification(ViTConfig(config), sd["classifier.weight"].shape[0])
    model.load_state_dict(sd, strict=True, source=where)
    return model
