"""DecoderSpec: a decoder's dimensions, from a Hugging Face config.json (hf_fields) or a GGUF file's metadata
(gguf_fields) — the keys every decoder spells the same way, read in one place — checked against the resource
budget, with the rotary table and the per-layer sliding windows they imply. A family's config subclasses it for
its defaults, its error class and the fields only it has (Gemma 3's second rope base); an architecture reads
its own extra keys from the dict."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

import math

from ember.errors import EmberError, FormatError
from ember.io.gguf import arch_fields
from ember.limits import check_config

from .config_check import check_fields, rope_scaling_problem
from .positions import RotaryEmbedding, rope_inv_freq

SLIDING, GLOBAL = "sliding_attention", "full_attention"  # transformers' layer_types


class DecoderConfigError(FormatError):
    """A config.json or GGUF metadata that cannot describe the decoder (names the source and the field)."""


@dataclass
class DecoderSpec:
    error: ClassVar[type] = DecoderConfigError
    label: ClassVar[str | None] = None  # how errors name a config (None: "<model_type> config.json")

    vocab_size: int
    dim: int                        # hidden_size
    hidden_dim: int                 # intermediate_size
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None   # < n_heads: grouped-query attention; None: n_heads
    head_dim: int | None = None     # None: dim // n_heads
    max_seq_len: int = 2048         # bounds the KV cache
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "llama3" | "linear" | "yarn", "factor": ...}
    partial_rotary: float = 1.0
    tie_embeddings: bool = False
    act: str = "silu"
    sliding_window: int | None = None  # a sliding layer's query at p sees keys p - window < k <= p
    layer_types: list | None = None    # SLIDING | GLOBAL per layer; None: every layer from window_from slides
    window_from: int = 0               # Qwen2's max_window_layers
    bos_token_id: int | None = None
    eos_token_ids: list = field(default_factory=list)
    model_type: str = "decoder"
    windows: list = field(init=False, repr=False, compare=False)  # per layer: its window or None

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        ints = isinstance(self.dim, (int, np.integer)) and isinstance(self.n_heads, (int, np.integer))
        if self.head_dim is None and ints:
            self.head_dim = self.dim // max(self.n_heads, 1)
        self.validate()
        sw, lt = self.sliding_window, self.layer_types  # built after validate: n_layers is bounded by then
        self.windows = [sw if sw and (lt[i] == SLIDING if lt else i >= self.window_from) else None
                        for i in range(self.n_layers)]

    @property
    def where(self) -> str:
        return self.label or f"{self.model_type} config.json"

    def validate(self):
        where, error = self.where, self.error
        for name in ("vocab_size", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "max_seq_len"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise error(f"ember: {where}: field {name!r} must be a positive int, got {v!r}")
        check_config(where, "vocab", vocab_size=self.vocab_size)
        check_config(where, "width", dim=self.dim, hidden_dim=self.hidden_dim, n_heads=self.n_heads,
                     head_dim=self.head_dim)
        check_config(where, "layers", n_layers=self.n_layers)
        check_config(where, "context", max_seq_len=self.max_seq_len)  # sizes the rope tables and KV cache
        if self.n_heads % self.n_kv_heads:
            raise error(f"ember: {where}: n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.layer_types is not None and (len(self.layer_types) != self.n_layers or
                                             set(self.layer_types) - {SLIDING, GLOBAL}):
            raise error(f"ember: {where}: layer_types must list {self.n_layers} entries of {SLIDING!r} / "
                        f"{GLOBAL!r}, got {self.layer_types!r}")
        # the numbers a forward divides by, takes roots or powers of: NaN, 0 or a string here gave NaN logits
        # or a numpy error at the first forward
        for name, lo, hi in (("norm_eps", 0.0, 1.0), ("rope_theta", 0.0, math.inf), ("partial_rotary", 0.0, 1.0)):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.floating)) or isinstance(v, bool) or not math.isfinite(v) \
                    or not lo < v <= hi:
                raise error(f"ember: {where}: field {name!r} must be a finite number in ({lo}, {hi}], got {v!r:.80}")
        why = rope_scaling_problem(self.rope_scaling, "rope_scaling")
        if why:
            raise error(f"ember: {where}: {why}")
        for name in ("sliding_window", "bos_token_id"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0):
                raise error(f"ember: {where}: field {name!r} must be a non-negative int or null, got {v!r:.80}")
        if not all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) and e >= 0
                   for e in self.eos_token_ids):
            raise error(f"ember: {where}: field 'eos_token_ids' must be token ids, got {self.eos_token_ids!r:.80}")

    def rotary(self, layout: str = "half") -> RotaryEmbedding:
        rd = int(self.head_dim * self.partial_rotary)
        with np.errstate(all="ignore"):  # (an overflow is reported below, naming the fields)
            inv, factor = rope_inv_freq(rd - rd % 2, self.rope_theta, self.rope_scaling)
        if not (np.isfinite(inv).all() and (inv > 0).all() and math.isfinite(factor) and factor > 0):
            raise self.error(f"ember: {self.where}: rope_theta {self.rope_theta!r} with rope_scaling "
                             f"{self.rope_scaling!r:.200} gives non-finite rotary frequencies")
        return RotaryEmbedding(self.head_dim, inv, factor, layout)

    def setup_args(self) -> dict:
        """CausalLM.setup's keyword arguments (rope excluded)."""
        return dict(n_layers=self.n_layers, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                    max_seq_len=self.max_seq_len, windows=self.windows)

    @classmethod
    def from_hf(cls, d: dict, **kw) -> DecoderSpec:
        """A config.json (as a dict); kw: hf_fields' field names and defaults."""
        return cls(**hf_fields(d, f"{d.get('model_type', '?')} config.json", cls.error, **kw))

    @classmethod
    def from_gguf(cls, md: dict, where: str, arch: str | None = None, **kw) -> DecoderSpec:
        """GGUF metadata of architecture `arch` (default: the class's model_type); kw: gguf_fields' defaults
        (what llama.cpp hard-codes for the architecture)."""
        return cls(**gguf_fields(md, arch or cls.model_type, where, cls.error, **kw))


def _eos_list(eos) -> list:
    return list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])


def _reading(where: str, error, read):
    """read() with a missing key or a value of the wrong type turned into `error` naming `where`."""
    try:
        return read()
    except KeyError as e:
        raise error(f"ember: {where} lacks the field {e.args[0]!r}") from None
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as e:  # e.g. "rope_theta": [1], "eos_token_id": {}
        if isinstance(e, EmberError):  # the checks' own errors (LimitError ...) pass through
            raise
        raise error(f"ember: {where} holds a value of the wrong type ({e})") from None


def hf_fields(d: dict, where: str = "config.json", error=DecoderConfigError, *, eps_field="rms_norm_eps",
              hidden_field="intermediate_size", act_field="hidden_act", act_default="silu", tie_default=False,
              max_seq_len=2048, norm_eps=1e-6, bos=None, eos=None) -> dict:
    """DecoderSpec's fields from the keys transformers' decoder configs share (hidden_size, num_attention_heads,
    num_key_value_heads, rope_theta / rope_parameters, sliding_window, layer_types, ...); the keyword arguments
    name a family's own spellings and defaults. The well-known fields are checked first (config_check.py)."""
    check_fields(d, where, error)

    def read():
        mt = d.get("model_type", "?")
        heads, dim = int(d["num_attention_heads"]), int(d["hidden_size"])
        rp = dict(d.get("rope_parameters") or {})  # transformers >= 5 keeps theta + scaling together
        theta = rp.pop("rope_theta", d.get("rope_theta", 10000.0))
        scaling = rp if rp.get("rope_type", "default") != "default" else d.get("rope_scaling")
        window = d.get("sliding_window") if d.get("use_sliding_window", True) else None
        hidden = d.get(hidden_field)
        return dict(model_type=mt, vocab_size=int(d["vocab_size"]), dim=dim,
                    hidden_dim=int(hidden) if hidden is not None else 4 * dim, n_layers=int(d["num_hidden_layers"]),
                    n_heads=heads, n_kv_heads=int(d.get("num_key_value_heads") or heads),
                    head_dim=int(d.get("head_dim") or dim // heads),
                    max_seq_len=int(d.get("max_position_embeddings", max_seq_len)),
                    norm_eps=float(d.get(eps_field, norm_eps)), rope_theta=float(theta), rope_scaling=scaling,
                    partial_rotary=float(rp.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))),
                    tie_embeddings=bool(d.get("tie_word_embeddings", tie_default)), act=d.get(act_field) or act_default,
                    sliding_window=int(window) if window else None,
                    layer_types=list(d["layer_types"]) if d.get("layer_types") else None,
                    # Qwen2: layers from max_window_layers on slide (transformers' layer_types); others: all or none
                    window_from=int(d.get("max_window_layers", 0)) if mt == "qwen2" else 0,
                    bos_token_id=d.get("bos_token_id", bos), eos_token_ids=_eos_list(d.get("eos_token_id", eos)))
    return _reading(where, error, read)


def gguf_fields(md: dict, arch: str, where: str, error=DecoderConfigError, *, max_seq_len=2048, norm_eps=1e-5,
                rope_theta=10000.0, vocab_size=0, bos=None, eos=None) -> dict:
    """DecoderSpec's fields from a GGUF file's `{arch}.*` metadata (llama.cpp's LLM_KV names) and its
    `tokenizer.ggml.*` special ids; the keyword arguments are what the architecture defaults to (llama.cpp
    hard-codes some per architecture)."""
    g = arch_fields(md, arch, where, error=error)

    def read():
        heads, dim = int(g("attention.head_count")), int(g("embedding_length"))
        scaling = None
        if g("rope.scaling.type") == "linear":
            scaling = {"rope_type": "linear", "factor": float(g("rope.scaling.factor"))}
        window = g("attention.sliding_window")
        if isinstance(window, list):  # llama.cpp reads it as a key or a per-layer array
            window = max(window)
        eos_id = md.get("tokenizer.ggml.eos_token_id", eos)
        # llama.cpp's n_vocab: {arch}.vocab_size, else the token list's length
        vocab = g("vocab_size") or len(md.get("tokenizer.ggml.tokens") or []) or vocab_size
        return dict(model_type=arch, vocab_size=int(vocab), dim=dim, hidden_dim=int(g("feed_forward_length")),
                    n_layers=int(g("block_count")), n_heads=heads, n_kv_heads=int(g("attention.head_count_kv", heads)),
                    head_dim=int(g("attention.key_length") or dim // heads),
                    max_seq_len=int(g("context_length", max_seq_len)),
                    norm_eps=float(g("attention.layer_norm_rms_epsilon", norm_eps)),
                    rope_theta=float(g("rope.freq_base", rope_theta)), rope_scaling=scaling,
                    sliding_window=None if window is None else int(window),
                    bos_token_id=md.get("tokenizer.ggml.bos_token_id", bos),
                    eos_token_ids=[] if eos_id is None else [int(eos_id)])
    return _reading(where, error, read)
