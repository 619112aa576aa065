"""DecoderSpec: the dimensions every decoder's config.json spells the same way (hidden_size,
num_attention_heads, num_key_value_heads, rope_theta / rope_parameters, sliding_window, ...), read once,
checked against the resource budget, with the rotary table they imply. Architecture files read their own
extra fields from the dict."""
from __future__ import annotations

from dataclasses import dataclass

from ember.errors import FormatError
from ember.limits import check_config

from .positions import RotaryEmbedding, rope_inv_freq


class DecoderConfigError(FormatError):
    """A config.json that cannot describe the decoder (names the model_type and the field)."""


@dataclass
class DecoderSpec:
    model_type: str
    vocab_size: int
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_seq_len: int
    norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    partial_rotary: float
    tie_embeddings: bool
    windows: list
    act: str

    @classmethod
    def from_hf(cls, d: dict, *, eps_field="rms_norm_eps", hidden_field="intermediate_size", tie_default=False,
                act_field="hidden_act", act_default="silu") -> DecoderSpec:
        mt = d.get("model_type", "?")
        try:
            heads = int(d["num_attention_heads"])
            rp = dict(d.get("rope_parameters") or {})  # transformers >= 5 keeps theta + scaling together
            theta = rp.pop("rope_theta", d.get("rope_theta", 10000.0))
            scaling = rp if rp.get("rope_type", "default") != "default" else d.get("rope_scaling")
            dim = int(d["hidden_size"])
            n_layers = int(d["num_hidden_layers"])
            window = d.get("sliding_window") if d.get("use_sliding_window", True) else None
            # Qwen2: layers from max_window_layers on slide (transformers' layer_types); others: all or none
            first = int(d.get("max_window_layers", 0)) if mt == "qwen2" else 0
            windows = list(d["layer_types"]) if d.get("layer_types") else None
            windows = [int(window) if window and (windows[i] == "sliding_attention" if windows else i >= first)
                       else None for i in range(n_layers)]
            hidden = d.get(hidden_field)
            spec = cls(model_type=mt, vocab_size=int(d["vocab_size"]), dim=dim,
                       hidden_dim=int(hidden) if hidden is not None else 4 * dim, n_layers=n_layers, n_heads=heads,
                       n_kv_heads=int(d.get("num_key_value_heads") or heads),
                       head_dim=int(d.get("head_dim") or dim // heads),
                       max_seq_len=int(d.get("max_position_embeddings", 2048)), norm_eps=float(d.get(eps_field, 1e-6)),
                       rope_theta=float(theta), rope_scaling=scaling,
                       partial_rotary=float(rp.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))),
                       tie_embeddings=bool(d.get("tie_word_embeddings", tie_default)), windows=windows,
                       act=d.get(act_field) or act_default)
        except (KeyError, TypeError, ValueError) as e:
            raise DecoderConfigError(f"ember: {mt} config.json: bad or missing field {e}") from None
        spec.validate()
        return spec

    def validate(self):
        where = f"{self.model_type} config.json"
        for name in ("vocab_size", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise DecoderConfigError(f"ember: {where} field {name!r} must be positive, got {getattr(self, name)}")
        check_config(where, "vocab", vocab_size=self.vocab_size)
        check_config(where, "width", dim=self.dim, hidden_dim=self.hidden_dim, n_heads=self.n_heads,
                     head_dim=self.head_dim)
        check_config(where, "layers", n_layers=self.n_layers)
        check_config(where, "context", max_seq_len=self.max_seq_len)
        if self.n_heads % self.n_kv_heads:
            raise DecoderConfigError(f"ember: {where}: {self.n_heads} heads are not a multiple of "
                                     f"{self.n_kv_heads} kv heads")

    def rotary(self, layout: str = "half") -> RotaryEmbedding:
        rd = int(self.head_dim * self.partial_rotary)
        inv, factor = rope_inv_freq(rd - rd % 2, self.rope_theta, self.rope_scaling)
        return RotaryEmbedding(self.head_dim, inv, factor, layout)

    def setup_args(self) -> dict:
        """CausalLM.setup's keyword arguments (rope excluded)."""
        return dict(n_layers=self.n_layers, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                    max_seq_len=self.max_seq_len, windows=self.windows)
