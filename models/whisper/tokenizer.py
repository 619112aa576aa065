"""Whisper's view of ember.tokenizers: the start-of-transcript prompt, special and timestamp
token ids, and text from generated ids (timestamps and specials dropped or rendered)."""
from __future__ import annotations

from ember.tokenizers import Tokenizer

from .config import WhisperConfig


class WhisperTokenizer:
    def __init__(self, path, config: WhisperConfig, backend: str = "auto"):
        self.tokenizer = Tokenizer.from_file(path, backend=backend)
        self.config = config
        s = config.special
        self.eot, self.sot, self.no_timestamps = s.eot, s.sot, s.no_timestamps
        self.timestamp_begin = s.timestamp_begin
        self.sot_prev, self.no_speech = s.sot_prev, s.no_speech

    def sot_sequence(self, language: str | None = None, task: str = "transcribe",
                     timestamps: bool = False) -> list[int]:
        """<|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>] — language and task only
        for multilingual checkpoints (English-only ones were trained without them)."""
        seq = [self.sot]
        if self.config.multilingual:
            seq += [self.language_id(language or "en"), self.task_id(task)]
        elif task != "transcribe":
            raise ValueError(f"ember: task {task!r} needs a multilingual checkpoint; this one is English-only")
        if not timestamps:
            seq.append(self.no_timestamps)
        return seq

    def language_id(self, language: str) -> int:
        key = language if language.startswith("<|") else f"<|{language}|>"
        table = self.config.special.lang_to_id
        if key not in table:
            raise ValueError(f"ember: language {language!r} is not one of this checkpoint's "
                             f"{len(table)} languages ({', '.join(sorted(t[2:-2] for t in table)[:12])} ...)")
        return table[key]

    def task_id(self, task: str) -> int:
        tid = {"transcribe": self.config.special.transcribe, "translate": self.config.special.translate}.get(task)
        if tid is None:
            raise ValueError(f"ember: task must be 'transcribe' or 'translate', got {task!r}")
        return tid

    def language_of(self, token: int) -> str | None:
        for t, i in self.config.special.lang_to_id.items():
            if i == token:
                return t[2:-2]
        return None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids) -> str:
        """Text of the ordinary tokens in ids (specials and timestamps skipped)."""
        return self.tokenizer.decode([int(i) for i in ids if int(i) < self.eot], skip_special_tokens=True)

    def decode_with_timestamps(self, ids) -> str:
        """Text with timestamp tokens rendered as <|1.08|> (openai's decode_with_timestamps)."""
        out, run = [], []
        for i in map(int, ids):
            if i >= self.timestamp_begin:
                out.append(self.decode(run))
                run = []
                out.append(f"<|{(i - self.timestamp_begin) * 0.02:.2f}|>")
            else:
                run.append(i)
        out.append(self.decode(run))
        return "".join(out)

    @property
    def non_speech_language_tokens(self) -> list[int]:
        return sorted(self.config.special.lang_to_id.values())
