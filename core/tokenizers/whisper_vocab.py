"""Whisper's vocabulary.txt (CTranslate2 export): one GPT-2 byte-level token per line, the id
being the line number; includes the special and timestamp tokens tokenizer.json lacks.
It holds no merges, so it decodes (and looks up) but cannot encode: use tokenizer.json."""
from __future__ import annotations

import os

from .byte_level import from_byte_chars
from .errors import TokenizerError


class WhisperVocabulary:
    def __init__(self, tokens: list[str], source: str = "vocabulary.txt"):
        if not tokens:
            raise TokenizerError(f"{source}: no tokens")
        self.tokens = tokens
        self.lookup = {t: i for i, t in enumerate(tokens)}
        self.source = source

    @classmethod
    def from_text(cls, text: str, source: str = "vocabulary.txt") -> WhisperVocabulary:
        lines = text.split("\n")  # not splitlines(): byte-level tokens never hold "\n", but
        if lines and lines[-1] == "":  # may hold characters splitlines() would break on
            lines.pop()
        return cls([line.rstrip("\r") for line in lines], source)

    @classmethod
    def from_file(cls, path) -> WhisperVocabulary:
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_text(f.read(), os.fspath(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{os.fspath(path)}: cannot read Whisper vocabulary ({exc})") from None

    def get_vocab_size(self) -> int:
        return len(self.tokens)

    def id_to_token(self, tid: int) -> str | None:
        return self.tokens[tid] if 0 <= tid < len(self.tokens) else None

    def token_to_id(self, token: str) -> int | None:
        return self.lookup.get(token)

    def is_special(self, tid: int) -> bool:
        """<|...|> tokens: end of text, task/language markers and timestamps."""
        t = self.tokens[tid]
        return t.startswith("<|") and t.endswith("|>")

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        data = bytearray()
        for tid in ids:
            tid = int(tid)
            if not 0 <= tid < len(self.tokens):
                raise TokenizerError(f"decode: id {tid} is out of range for {self.source} "
                                     f"({len(self.tokens)} tokens)")
            if skip_special_tokens and self.is_special(tid):
                continue
            token = self.tokens[tid]
            raw = from_byte_chars(token)
            data += raw if raw is not None else token.encode("utf-8")
        return data.decode("utf-8", errors="replace")

    def decode_stream(self, skip_special_tokens: bool = True):
        from .tokenizer import DecodeStream
        return DecodeStream(self, skip_special_tokens)
