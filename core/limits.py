"""The resource budget for untrusted input: the one place every parser asks before it allocates from a
size, rate, count or depth it read from a file.

    from ember.limits import budget
    budget.max_pixels = 100_000_000     # or EMBER_MAX_PIXELS=100000000 in the environment

Exceeding a limit raises ember.LimitError naming the file, the field and the limit. The defaults let
every real model and media file ember targets through (Whisper large, Llama 70B configs, 48 MP photos,
hours of audio) and stop the amplifications a few-KB file can otherwise cause.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from . import settings
from .errors import LimitError


@dataclass
class Budget:
    # weights files: a loaded file may materialise at most load_factor x its size + load_allowance bytes
    # (views of one storage, stride-0 expansions and dtype copies all count)
    load_factor: float = 4.0
    load_allowance: int = 256 << 20
    pickle_depth: int = 200            # nesting of tuples/lists/dicts in a .pt pickle (real ones: < 30)
    pickle_work: int = 1 << 24         # nodes hashing a .pt pickle's dict keys and set members walks (expanded)
    # images: refused before the frame is decoded (PIL's own bomb limit is ~89 MP, a warning only); decoding
    # holds at most 8 bytes a pixel at its peak (ember.io.image.BYTES_PER_PIXEL): 400 MB at this cap
    max_pixels: int = 50_000_000
    # audio: checked on the WAV header, before decoding and resampling
    min_sample_rate: int = 1_000
    max_sample_rate: int = 384_000
    max_channels: int = 64
    max_audio_seconds: float = 6 * 3600.0
    # config.json values that size allocations
    max_context: int = 1 << 20         # positions (context length, max_position_embeddings, n_ctx)
    max_vocab: int = 1 << 22
    max_layers: int = 1024
    max_width: int = 1 << 17           # hidden / intermediate size, heads
    # tokenizer.json: padding/truncation lengths, pre-tokenizer regex length
    max_tokens: int = 1 << 20
    max_regex_chars: int = 4096
    max_regex_states: int = 200_000    # a linear-time regex's program ({1000}{1000} unrolled: a million)
    max_normalized_growth: int = 64    # characters a normalizer may make per input character (+1024; NFKC: 18)
    # templates a model carries (chat templates, rendered by ember.jinja's sandbox): one render's output
    # characters (also the largest string or list it may build), evaluation steps and seconds
    template_chars: int = 4 << 20
    template_steps: int = 20_000_000
    template_seconds: float = 10.0
    # grammars for constrained decoding (ember.grammar: JSON schemas, regexes): automaton states and compile time
    grammar_states: int = 20_000
    grammar_seconds: float = 20.0
    # ONNX graphs: a tensor whose size the model's data decides (ConstantOfShape, Expand, Tile, Range, Pad,
    # Resize, OneHot, StringSplit ... and broadcasting), and Loop iterations (real models: thousands)
    max_tensor_bytes: int = 8 << 30
    max_loop_iterations: int = 1 << 20

    def __post_init__(self):
        for f in fields(self):  # $EMBER_<FIELD> over the value given (ember.settings: a bad one raises SettingError)
            setattr(self, f.name, settings.get(env_name(f.name), getattr(self, f.name)))

    def load_bytes(self, file_size: int) -> int:
        """How many bytes a weights file of file_size bytes may materialise."""
        return int(self.load_factor * file_size) + self.load_allowance


def env_name(setting: str) -> str:
    return "EMBER_" + setting.upper()


budget = Budget()


def check(where: str, field: str, value, limit_name: str, unit: str = ""):
    """Raise LimitError if value > budget.<limit_name>; returns value."""
    limit = getattr(budget, limit_name)
    if value > limit:
        raise LimitError(where, field, value, limit, limit_name, unit)
    return value


class Meter:
    """Counts the bytes one load materialises against budget.load_bytes(file size)."""
    __slots__ = ("where", "limit", "used")

    def __init__(self, where: str, file_size: int):
        self.where, self.limit, self.used = where, budget.load_bytes(file_size), 0

    def take(self, nbytes: int, what: str):
        self.used += int(nbytes)
        if self.used > self.limit:
            raise LimitError(self.where, f"{what}: materialised bytes", self.used, self.limit, "load_allowance",
                             unit=" bytes")


# config.json fields by what they size: positions, vocabulary, layers, widths
_CONFIG_LIMITS = {"context": "max_context", "vocab": "max_vocab", "layers": "max_layers", "width": "max_width"}


def check_config(where: str, kind: str, **values):
    """Bound config values of one kind ('context' | 'vocab' | 'layers' | 'width') before a model is
    sized from them: check_config("config.json", "layers", num_hidden_layers=32)."""
    setting = _CONFIG_LIMITS[kind]
    limit = getattr(budget, setting)
    for field, v in values.items():
        if isinstance(v, int) and v > limit:
            raise LimitError(where, f"config field {field}", v, limit, setting)
