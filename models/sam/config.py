"""SamConfig as config.json spells it (transformers' configuration_sam.py, v5.x): vision_config,
prompt_encoder_config and mask_decoder_config, each with transformers' defaults (SAM ViT-H) for what a file
leaves out. SlimSAM checkpoints are the same layout with pruned widths (hidden_size, mlp_dim, heads), so
they are configs of this class too.

Every size is checked before a module is built from it: against the resource budget (ember.limits), for the
divisibilities the layers need, and the parameter count it implies against the weights actually given
(`check_weights`), so an absurd config fails in bounded memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ember.errors import FormatError
from ember.limits import check_config


class SamConfigError(FormatError):
    """A config.json that cannot describe a SamModel (names the file and the field)."""


@dataclass
class SamVisionConfig:
    hidden_size: int = 768
    output_channels: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 1024
    patch_size: int = 16
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    mlp_ratio: float = 4.0
    use_abs_pos: bool = True
    use_rel_pos: bool = True
    window_size: int = 14
    global_attn_indexes: tuple = (2, 5, 8, 11)
    num_pos_feats: int = 128
    mlp_dim: int | None = None

    def __post_init__(self):
        self.global_attn_indexes = tuple(self.global_attn_indexes)
        if self.mlp_dim is None:
            self.mlp_dim = int(self.hidden_size * self.mlp_ratio)

    @property
    def grid(self) -> int:
        """Patches per side of the image embedding (64 for SAM's 1024 / 16)."""
        return self.image_size // self.patch_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def window(self, layer: int) -> int:
        """The layer's attention window (0: global attention over the whole grid)."""
        return 0 if layer in self.global_attn_indexes else self.window_size


@dataclass
class SamPromptEncoderConfig:
    hidden_size: int = 256
    image_size: int = 1024
    patch_size: int = 16
    mask_input_channels: int = 16
    num_point_embeddings: int = 4
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6

    @property
    def image_embedding_size(self) -> int:
        return self.image_size // self.patch_size


@dataclass
class SamMaskDecoderConfig:
    hidden_size: int = 256
    hidden_act: str = "relu"
    mlp_dim: int = 2048
    num_hidden_layers: int = 2
    num_attention_heads: int = 8
    attention_downsample_rate: int = 2
    num_multimask_outputs: int = 3
    iou_head_depth: int = 3
    iou_head_hidden_dim: int = 256
    layer_norm_eps: float = 1e-6


_SUBS = {"vision_config": SamVisionConfig, "prompt_encoder_config": SamPromptEncoderConfig,
         "mask_decoder_config": SamMaskDecoderConfig}


@dataclass
class SamConfig:
    vision: SamVisionConfig = field(default_factory=SamVisionConfig)
    prompt: SamPromptEncoderConfig = field(default_factory=SamPromptEncoderConfig)
    decoder: SamMaskDecoderConfig = field(default_factory=SamMaskDecoderConfig)

    @classmethod
    def from_dict(cls, d: dict, where: str = "config.json") -> SamConfig:
        if not isinstance(d, dict):
            raise SamConfigError(f"ember: {where}: a SAM config must be a JSON object, got {type(d).__name__}")
        parts = {}
        for key, sub in _SUBS.items():
            raw = d.get(key) or {}
            if not isinstance(raw, dict):
                raise SamConfigError(f"ember: {where}: {key} must be an object, got {type(raw).__name__}")
            parts[key] = _typed(sub, raw, f"{where}: {key}")
        cfg = cls(parts["vision_config"], parts["prompt_encoder_config"], parts["mask_decoder_config"])
        cfg.check(where)
        return cfg

    def check(self, where: str = "config.json"):
        """Bounds and divisibilities, before any module is sized from the config."""
        v, p, m = self.vision, self.prompt, self.decoder
        check_config(where, "layers", **{"vision_config.num_hidden_layers": v.num_hidden_layers,
                                         "mask_decoder_config.num_hidden_layers": m.num_hidden_layers,
                                         "mask_decoder_config.iou_head_depth": m.iou_head_depth})
        check_config(where, "width", **{f"vision_config.{k}": getattr(v, k) for k in (
            "hidden_size", "output_channels", "num_attention_heads", "num_channels", "image_size", "mlp_dim",
            "num_pos_feats", "window_size")})
        check_config(where, "width", **{f"prompt_encoder_config.{k}": getattr(p, k) for k in (
            "hidden_size", "image_size", "mask_input_channels", "num_point_embeddings")})
        check_config(where, "width", **{f"mask_decoder_config.{k}": getattr(m, k) for k in (
            "hidden_size", "mlp_dim", "num_attention_heads", "num_multimask_outputs", "iou_head_hidden_dim")})
        rules = [
            (v.patch_size > 0 and v.image_size % v.patch_size == 0,
             "vision_config.image_size must be a multiple of patch_size"),
            (v.num_attention_heads > 0 and v.hidden_size % v.num_attention_heads == 0,
             "vision_config.hidden_size must be a multiple of num_attention_heads"),
            (all(0 <= i < v.num_hidden_layers for i in v.global_attn_indexes),
             "vision_config.global_attn_indexes must name layers 0 .. num_hidden_layers - 1"),
            (v.window_size > 0 or all(i in v.global_attn_indexes for i in range(v.num_hidden_layers)),
             "vision_config.window_size must be positive when some layer is windowed"),
            (p.image_size == v.image_size and p.patch_size == v.patch_size,
             "prompt_encoder_config.image_size / patch_size must equal vision_config's"),
            (2 * v.num_pos_feats == p.hidden_size == m.hidden_size == v.output_channels,
             "2 * vision_config.num_pos_feats, prompt_encoder_config.hidden_size, mask_decoder_config.hidden_size "
             "and vision_config.output_channels must be equal"),
            (p.mask_input_channels % 4 == 0 and p.mask_input_channels > 0,
             "prompt_encoder_config.mask_input_channels must be a positive multiple of 4"),
            (p.num_point_embeddings >= 4, "prompt_encoder_config.num_point_embeddings must be at least 4"),
            (m.num_attention_heads > 0 and m.attention_downsample_rate > 0
             and (m.hidden_size // m.attention_downsample_rate) % m.num_attention_heads == 0
             and m.hidden_size % m.num_attention_heads == 0,
             "mask_decoder_config.hidden_size / attention_downsample_rate must be a multiple of num_attention_heads"),
            (m.hidden_size % 8 == 0, "mask_decoder_config.hidden_size must be a multiple of 8"),
            (m.iou_head_depth >= 2, "mask_decoder_config.iou_head_depth must be at least 2"),
            (m.num_multimask_outputs >= 1, "mask_decoder_config.num_multimask_outputs must be at least 1"),
        ]
        for ok, what in rules:
            if not ok:
                raise SamConfigError(f"ember: {where}: {what}")
        tokens = v.grid * v.grid
        check_config(where, "context", **{"vision_config (image_size / patch_size)^2": tokens})

    def n_parameters(self) -> int:
        """How many numbers the SamModel of this config holds (what the weights must provide)."""
        v, p, m = self.vision, self.prompt, self.decoder
        d, hd = v.hidden_size, v.head_dim

        def lin(i, o, bias=True):
            return i * o + (o if bias else 0)
        n = 2 * v.num_pos_feats                                                 # shared_image_embedding
        n += lin(v.num_channels * v.patch_size ** 2, d)                         # patch_embed
        n += v.grid * v.grid * d if v.use_abs_pos else 0
        for i in range(v.num_hidden_layers):
            side = v.window(i) or v.grid
            n += 4 * d + lin(d, 3 * d, v.qkv_bias) + lin(d, d) + lin(d, v.mlp_dim) + lin(v.mlp_dim, d)
            n += 2 * (2 * side - 1) * hd if v.use_rel_pos else 0
        c = v.output_channels
        n += d * c + 9 * c * c + 4 * c                                          # neck
        q, mc = p.mask_input_channels, p.mask_input_channels // 4
        n += (4 * mc + mc) + 2 * mc + (4 * mc * q + q) + 2 * q + lin(q, p.hidden_size)  # mask_embed
        n += p.hidden_size * (2 + p.num_point_embeddings)                       # no_mask, not_a_point, point_embed
        h, inner = m.hidden_size, m.hidden_size // m.attention_downsample_rate
        attn = (lambda k: 3 * lin(h, k) + lin(k, h))
        n += m.num_hidden_layers * (attn(h) + 2 * attn(inner) + 8 * h + lin(h, m.mlp_dim) + lin(m.mlp_dim, h))
        n += attn(inner) + 2 * h
        tokens = m.num_multimask_outputs + 1
        n += h * (1 + tokens)
        n += 4 * h * (h // 4) + h // 4 + 2 * (h // 4) + 4 * (h // 4) * (h // 8) + h // 8
        n += tokens * (2 * lin(h, h) + lin(h, h // 8))
        hid = m.iou_head_hidden_dim
        n += lin(h, hid) + (m.iou_head_depth - 2) * lin(hid, hid) + lin(hid, tokens)
        return n


def _typed(cls, raw: dict, where: str):
    """cls(**raw) for the fields cls knows, each converted to the type of its default (unknown keys ignored,
    as transformers ignores them)."""
    kw = {}
    for f in fields(cls):
        if f.name not in raw or raw[f.name] is None:
            continue
        value, default = raw[f.name], f.default
        try:
            if f.name == "global_attn_indexes":
                if not isinstance(value, (list, tuple)) or len(value) > 4096:
                    raise TypeError("a list of layer indices")
                value = tuple(_int(x) for x in value)
            elif f.name == "mlp_dim" or isinstance(default, int) and not isinstance(default, bool):
                value = _int(value)
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    raise TypeError("true or false")
            elif isinstance(default, float):
                value = float(value)
                if not value == value or value in (float("inf"), float("-inf")):
                    raise ValueError("a finite number")
            elif isinstance(default, str):
                if not isinstance(value, str):
                    raise TypeError("a string")
        except (TypeError, ValueError) as e:
            raise SamConfigError(f"ember: {where}.{f.name}: {raw[f.name]!r} is not {e}") from None
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise SamConfigError(f"ember: {where}.{f.name}: {value} must not be negative")
        kw[f.name] = value
    return cls(**kw)


def _int(x) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x):
        raise TypeError("an integer")
    return int(x)
