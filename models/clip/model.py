"""CLIP (after transformers' models/clip/modeling_clip.py, v5.x): a text transformer (causal mask, pooled at
the end-of-text token) and a vision transformer (patch conv + class embedding, pre_layrnorm, pooled [CLS]
through post_layernorm), both pre-LayerNorm with quick-GELU MLPs, projected into one space; logit_scale.
Names are CLIPModel's; the heads and MLPs are the toolkit's.

    model.get_text_features(input_ids)       # (B, projection_dim)
    model.get_image_features(pixel_values)   # (B, projection_dim)
    model(input_ids, pixel_values).logits_per_image  # (images, texts), as CLIPModel's forward
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ember
from ember import nn
from ember.errors import FormatError
from ember.limits import check_config

from ..common.attention import Attention
from ..common.decoder import DecoderBlock
from ..common.masks import attention_mask
from ..common.mlp import MLP


@dataclass
class CLIPOutput:
    logits_per_image: object       # (images, texts): logit_scale.exp() * cosine
    logits_per_text: object        # (texts, images)
    text_embeds: object            # (texts, proj) normalized
    image_embeds: object           # (images, proj) normalized


def _dims(d: dict, where: str) -> dict:
    try:
        out = dict(dim=int(d["hidden_size"]), hidden=int(d["intermediate_size"]), layers=int(d["num_hidden_layers"]),
                   heads=int(d["num_attention_heads"]), eps=float(d.get("layer_norm_eps", 1e-5)),
                   act=d.get("hidden_act", "quick_gelu"))
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(f"ember: {where}: bad or missing field {e}") from None
    check_config(where, "width", hidden_size=out["dim"], intermediate_size=out["hidden"], heads=out["heads"])
    check_config(where, "layers", num_hidden_layers=out["layers"])
    return out


def Layer(k: dict) -> DecoderBlock:
    attn = Attention(k["dim"], k["heads"], bias=True, names=("q_proj", "k_proj", "v_proj", "out_proj"))
    return DecoderBlock(attn, MLP(k["dim"], k["hidden"], k["act"]), nn.LayerNorm(k["dim"], eps=k["eps"]),
                        nn.LayerNorm(k["dim"], eps=k["eps"]), names=("self_attn", "mlp", "layer_norm1", "layer_norm2"))


class Encoder(nn.Module):
    def __init__(self, k: dict):
        super().__init__()
        self.layers = nn.ModuleList([Layer(k) for _ in range(k["layers"])])

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(x, None, mask, None, 0)
        return x


class TextEmbeddings(nn.Module):
    def __init__(self, vocab: int, positions: int, dim: int):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)                             # (vocab, dim)
        self.position_embedding = nn.Embedding(positions, dim)                      # (positions, dim)


class TextModel(nn.Module):
    def __init__(self, d: dict):
        super().__init__()
        k = _dims(d, "clip text_config")
        self.max_len, self.eos = int(d.get("max_position_embeddings", 77)), d.get("eos_token_id", 2)
        check_config("clip text_config", "vocab", vocab_size=int(d["vocab_size"]))
        self.embeddings = TextEmbeddings(int(d["vocab_size"]), self.max_len, k["dim"])
        self.encoder = Encoder(k)
        self.final_layer_norm = nn.LayerNorm(k["dim"], eps=k["eps"])                # (dim,)

    def forward(self, ids: np.ndarray, valid: np.ndarray, device):
        B, T = ids.shape
        if T > self.max_len:
            raise ValueError(f"ember: {T} tokens exceed CLIP's {self.max_len} text positions")
        e = self.embeddings
        x = e.token_embedding(ember.tensor(ids, device=device)) + \
            e.position_embedding(ember.tensor(np.arange(T)[None].repeat(B, 0), device=device))  # (B, T, dim)
        mask = attention_mask(np.arange(T), np.arange(T), key_valid=valid, dtype=x.dtype, device=device)
        x = self.final_layer_norm(self.encoder(x, mask))
        # pooled at end-of-text: the largest id for the original configs (eos_token_id 2), else the first eos
        end = ids.argmax(-1) if self.eos == 2 else (ids == self.eos).argmax(-1)
        return x.reshape(B * T, -1).index_select(0, ember.tensor(np.arange(B) * T + end, device=device))  # (B, dim)


class VisionEmbeddings(nn.Module):
    def __init__(self, k: dict, channels: int, patch: int, n_patches: int):
        super().__init__()
        self.class_embedding = nn.Parameter(ember.zeros(k["dim"]))                  # (dim,)
        self.patch_embedding = nn.Conv2d(channels, k["dim"], patch, stride=patch, bias=False)  # (dim, 3, p, p)
        self.position_embedding = nn.Embedding(n_patches + 1, k["dim"])             # (1 + N, dim)


class VisionModel(nn.Module):
    def __init__(self, d: dict):
        super().__init__()
        k = _dims(d, "clip vision_config")
        self.image_size, patch = int(d.get("image_size", 224)), int(d.get("patch_size", 32))
        self.channels = int(d.get("num_channels", 3))
        self.embeddings = VisionEmbeddings(k, self.channels, patch, (self.image_size // patch) ** 2)
        self.pre_layrnorm = nn.LayerNorm(k["dim"], eps=k["eps"])                    # (dim,) (sic: the checkpoint's name)
        self.encoder = Encoder(k)
        self.post_layernorm = nn.LayerNorm(k["dim"], eps=k["eps"])                  # (dim,)

    def forward(self, pixels):
        if tuple(pixels.shape[1:]) != (self.channels, self.image_size, self.image_size):
            raise ValueError(f"ember: CLIP wants pixel_values (B, {self.channels}, {self.image_size}, "
                             f"{self.image_size}), got {tuple(pixels.shape)}")
        e = self.embeddings
        x = e.patch_embedding(pixels)                                               # (B, dim, h, w)
        B, D = x.shape[0], x.shape[1]
        x = x.reshape(B, D, -1).transpose(1, 2)                                     # (B, N, dim)
        x = ember.cat([e.class_embedding.reshape(1, 1, D).expand(B, 1, D), x], 1) + e.position_embedding.weight
        x = self.encoder(self.pre_layrnorm(x))                                      # (B, 1 + N, dim)
        return self.post_layernorm(x.narrow(1, 0, 1).reshape(B, D))                 # (B, dim)


class CLIPModel(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        tc, vc = config.get("text_config") or {}, config.get("vision_config") or {}
        proj = int(config.get("projection_dim", 512))
        self.text_model, self.vision_model = TextModel(tc), VisionModel(vc)
        self.text_projection = nn.Linear(int(tc["hidden_size"]), proj, bias=False)     # (proj, text dim)
        self.visual_projection = nn.Linear(int(vc["hidden_size"]), proj, bias=False)   # (proj, vision dim)
        self.logit_scale = nn.Parameter(ember.zeros(()))                               # () log of 1 / temperature
        self.config = config

    @property
    def device(self):
        return self.text_projection.weight.device

    def get_text_features(self, input_ids, attention_mask=None):
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids, np.int64)
        valid = None if attention_mask is None else np.asarray(
            attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask, bool)
        return self.text_projection(self.text_model(ids, valid, self.device))          # (B, proj)

    def get_image_features(self, pixel_values):
        px = pixel_values if isinstance(pixel_values, ember.Tensor) else ember.tensor(np.asarray(pixel_values, np.float32))
        return self.visual_projection(self.vision_model(px.to(self.device)))           # (B, proj)

    def forward(self, input_ids, pixel_values, attention_mask=None) -> CLIPOutput:
        t = self.get_text_features(input_ids, attention_mask)                         # (texts, proj)
        i = self.get_image_features(pixel_values)                                     # (images, proj)
        t, i = t / t.norm(dim=-1, keepdim=True), i / i.norm(dim=-1, keepdim=True)
        per_text = (t @ i.transpose(0, 1)) * self.logit_scale.exp()                  # (texts, images)
        return CLIPOutput(per_text.transpose(0, 1), per_text, t, i)

    def zero_shot(self, pixel_values, input_ids, attention_mask=None) -> np.ndarray:
        """(images, labels) probabilities: softmax over labels of logit_scale.exp() * cosine."""
        return self(input_ids, pixel_values, attention_mask).logits_per_image.softmax(-1).numpy()


BUFFERS = ("text_model.embeddings.position_ids", "vision_model.embeddings.position_ids")


def build_from_hf(config: dict, sd: dict, where: str) -> CLIPModel:
    if not config.get("text_config") or not config.get("vision_config"):
        raise FormatError(f"ember: {where}: a CLIP config.json needs text_config and vision_config")
    model = CLIPModel(config)
    model.load_state_dict({k: v for k, v in sd.items() if k not in BUFFERS}, strict=True, source=where)
    return model
