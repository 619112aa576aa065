"""Whisper's dimensions and generation settings, read from a Hugging Face folder's config.json and
generation_config.json (WhisperForConditionalGeneration layout)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ...errors import FormatError
from ...limits import check_config
from ..common.config_check import check_fields


class WhisperConfigError(FormatError):
    """config.json / generation_config.json is missing a field or holds a wrong value."""


@dataclass(frozen=True)
class ModelDimensions:
    """openai/whisper's ModelDimensions, filled from HF config.json names."""
    n_mels: int           # num_mel_bins
    n_audio_ctx: int      # max_source_positions (1500 frames after the stride-2 conv)
    n_audio_state: int    # d_model
    n_audio_head: int     # encoder_attention_heads
    n_audio_layer: int    # encoder_layers
    n_vocab: int          # vocab_size
    n_text_ctx: int       # max_target_positions (448)
    n_text_state: int     # d_model
    n_text_head: int      # decoder_attention_heads
    n_text_layer: int     # decoder_layers
    n_audio_ffn: int = 0  # encoder_ffn_dim (openai fixes it at 4 * d_model; HF stores it)
    n_text_ffn: int = 0   # decoder_ffn_dim

    @classmethod
    def from_hf(cls, config: dict, source: str = "config.json") -> ModelDimensions:
        check_fields(config, source, WhisperConfigError)  # types and ranges of the well-known fields

        def get(name):
            v = config.get(name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise WhisperConfigError(f"ember: {source}: {name} must be a positive integer, got {v!r}")
            return v
        if config.get("model_type", "whisper") != "whisper":
            raise WhisperConfigError(f"ember: {source}: model_type {config.get('model_type')!r} is not 'whisper'")
        act = config.get("activation_function", "gelu")
        if act != "gelu":
            raise WhisperConfigError(f"ember: {source}: activation_function {act!r} unsupported (gelu)")
        d = get("d_model")
        check_config(source, "width", d_model=d, encoder_attention_heads=get("encoder_attention_heads"),
                     decoder_attention_heads=get("decoder_attention_heads"),
                     encoder_ffn_dim=config.get("encoder_ffn_dim"), decoder_ffn_dim=config.get("decoder_ffn_dim"),
                     num_mel_bins=get("num_mel_bins"))
        check_config(source, "layers", encoder_layers=get("encoder_layers"), decoder_layers=get("decoder_layers"))
        check_config(source, "vocab", vocab_size=get("vocab_size"))
        check_config(source, "context", max_source_positions=get("max_source_positions"),
                     max_target_positions=get("max_target_positions"))
        for heads in ("encoder_attention_heads", "decoder_attention_heads"):
            if d % get(heads):
                raise WhisperConfigError(f"ember: {source}: d_model {d} is not divisible by {heads} {get(heads)}")
        return cls(get("num_mel_bins"), get("max_source_positions"), d, get("encoder_attention_heads"),
                   get("encoder_layers"), get("vocab_size"), get("max_target_positions"), d,
                   get("decoder_attention_heads"), get("decoder_layers"),
                   config.get("encoder_ffn_dim") or 4 * d, config.get("decoder_ffn_dim") or 4 * d)


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids the decoder prompts with and the logit filters act on."""
    eot: int                      # <|endoftext|>
    sot: int                      # <|startoftranscript|>
    no_timestamps: int            # <|notimestamps|>; the first timestamp <|0.00|> follows it
    sot_prev: int | None = None   # <|startofprev|>
    transcribe: int | None = None
    translate: int | None = None
    no_speech: int | None = None  # <|nospeech|> / <|nocaptions|>, for no_speech_prob
    lang_to_id: dict = field(default_factory=dict)  # "<|en|>" -> id, multilingual only

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1


@dataclass(frozen=True)
class WhisperConfig:
    dims: ModelDimensions
    special: SpecialTokens
    multilingual: bool
    suppress_tokens: tuple = ()
    begin_suppress_tokens: tuple = ()
    max_initial_timestamp_index: int = 50
    alignment_heads: tuple = ()
    max_length: int | None = None  # prompt + generated tokens (generation_config.json)

    @classmethod
    def from_dicts(cls, config: dict, generation: dict | None, added_tokens: dict[str, int],
                   source: str = "") -> WhisperConfig:
        """config.json, generation_config.json (optional) and the tokenizer's added tokens."""
        dims = ModelDimensions.from_hf(config, os.path.join(source, "config.json"))
        gen = generation or {}

        def tok(name, gen_key=None, required=False):
            v = gen.get(gen_key) if gen_key else None
            v = v if isinstance(v, int) else added_tokens.get(name)
            if v is None and required:
                raise WhisperConfigError(f"ember: {source}: special token {name} not in generation_config.json "
                                         f"nor tokenizer.json")
            return v
        eot = tok("<|endoftext|>", "eos_token_id", True)
        sot = tok("<|startoftranscript|>", "decoder_start_token_id", True)
        no_ts = tok("<|notimestamps|>", "no_timestamps_token_id", True)
        lang = gen.get("lang_to_id") or {}
        multilingual = bool(gen.get("is_multilingual", dims.n_vocab >= 51865))
        if multilingual and not lang:  # openai's layout: languages follow <|startoftranscript|>
            lang = {t: i for t, i in added_tokens.items() if i > sot and len(t) <= 9 and t.startswith("<|")
                    and t[2:-2].isalpha() and t[2:-2].islower() and i < no_ts
                    and t not in ("<|translate|>", "<|transcribe|>", "<|nocaptions|>", "<|nospeech|>")}
        special = SpecialTokens(eot, sot, no_ts, tok("<|startofprev|>", "prev_sot_token_id"),
                                tok("<|transcribe|>"), tok("<|translate|>"),
                                added_tokens.get("<|nospeech|>", added_tokens.get("<|nocaptions|>")),
                                dict(lang))
        return cls(dims, special, multilingual, tuple(gen.get("suppress_tokens") or ()),
                   tuple(gen.get("begin_suppress_tokens") or ()),
                   int(gen.get("max_initial_timestamp_index", 50)),
                   tuple(tuple(h) for h in gen.get("alignment_heads") or ()),
                   gen.get("max_length") if isinstance(gen.get("max_length"), int) else None)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> WhisperConfig:
        folder = os.fspath(folder)

        def read(name, required):
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                if required:
                    raise WhisperConfigError(f"ember: {path} not found; a Whisper folder needs config.json, "
                                             f"model.safetensors and tokenizer.json")
                return None
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
            except ValueError as e:
                raise WhisperConfigError(f"ember: {path}: not valid JSON ({e})") from None
            if not isinstance(data, dict):
                raise WhisperConfigError(f"ember: {path}: expected a JSON object")
            return data
        tokenizer = read("tokenizer.json", True)
        added = {t["content"]: int(t["id"]) for t in tokenizer.get("added_tokens") or []}
        return cls.from_dicts(read("config.json", True), read("generation_config.json", False), added, folder)
