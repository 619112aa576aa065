"""`Tokenizer`: one interface over two backends reading the same tokenizer.json.

backend="native" wraps the Rust `tokenizers` package (an optional extra, absent in Pyodide);
backend="python" is ember's own runtime (pipeline.py); "auto" takes native when importable.
Both give the same ids, tokens and offsets; encodings expose .ids/.tokens/.offsets either way.
"""
from __future__ import annotations

import contextlib
import json
import os

from .errors import TokenizerError
from .pipeline import PythonTokenizer, check_text
from .validate import check_for_native

BACKENDS = ("auto", "native", "python")


def _native_module(required: bool):
    try:
        import tokenizers  # optional extra; only imported when a tokenizer is built
    except ImportError:
        if required:
            raise TokenizerError("backend='native' needs the `tokenizers` package "
                                 "(pip install ember[tokenizers]); use backend='python' "
                                 "for ember's own runtime") from None
        return None
    return tokenizers


@contextlib.contextmanager
def _as_tokenizer_error(source: str, what: str):
    """The errors of both runtimes as TokenizerError: the Rust side raises bare Exceptions and, on a panic,
    pyo3's PanicException, which derives from BaseException; the Python runtime's own bugs on a file its
    load-time checks let through would be TypeErrors and the like."""
    try:
        yield
    except TokenizerError:
        raise
    except BaseException as exc:
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise  # KeyboardInterrupt, SystemExit, a caller's timeout: not the tokenizer's to report
        raise TokenizerError(f"{source}: {what} failed ({type(exc).__name__}: {str(exc)[:200]})") from None


class DecodeStream:
    """Incremental decoding for token-by-token output: `step(id)` returns the new text, or
    None while the text so far ends inside a character (a partial UTF-8 sequence decodes to
    U+FFFD, which is held back). Same algorithm as tokenizers.decoders.DecodeStream: decode a
    short window of recent ids and emit what extends the previously decoded prefix."""

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer, self.skip_special_tokens = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix, self.prefix_index = "", 0

    def step(self, token_id: int) -> str | None:
        self.ids.append(int(token_id))
        text = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens)
        if len(text) <= len(self.prefix) or text.endswith("\ufffd"):
            return None
        if not text.startswith(self.prefix):
            raise TokenizerError(f"decode_stream: decoding ids {self.ids} no longer starts with "
                                 f"the text already emitted ({self.prefix!r})")
        new = text[len(self.prefix):]
        new_index = len(self.ids) - self.prefix_index
        self.ids = self.ids[self.prefix_index:]
        self.prefix = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip_special_tokens)
        self.prefix_index = new_index
        return new


class Tokenizer:
    """`from_file`/`from_str` then `encode`, `encode_batch`, `decode`, `decode_stream`, ..."""

    def __init__(self, impl, backend: str, source: str = "tokenizer.json"):
        self._impl, self.backend, self.source = impl, backend, source

    @classmethod
    def from_str(cls, json_text: str, backend: str = "auto",
                 source: str = "tokenizer.json") -> Tokenizer:
        if backend not in BACKENDS:
            raise TokenizerError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
        native = _native_module(required=backend == "native") if backend != "python" else None
        if native is None:
            return cls(PythonTokenizer.from_str(json_text, source), "python", source)
        try:
            config = json.loads(json_text)
        except (ValueError, RecursionError) as exc:
            raise TokenizerError(f"{source}: malformed JSON ({str(exc)[:200]})") from None
        check_for_native(config, source)
        with _as_tokenizer_error(source, "load"):
            return cls(native.Tokenizer.from_str(json_text), "native", source)

    @classmethod
    def from_file(cls, path, backend: str = "auto") -> Tokenizer:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{os.fspath(path)}: cannot read tokenizer file ({exc})") from None
        return cls.from_str(text, backend, source=os.fspath(path))

    @classmethod
    def from_buffer(cls, data: bytes, backend: str = "auto") -> Tokenizer:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TokenizerError(f"tokenizer.json buffer: not UTF-8 ({exc})") from None
        return cls.from_str(text, backend)

    def __repr__(self) -> str:
        return f"Tokenizer(backend={self.backend!r}, vocab_size={self.get_vocab_size()})"

    # ------------------------------------------------------------------ encode / decode

    def encode(self, sequence: str, pair: str | None = None, add_special_tokens: bool = True):
        if self.backend == "native":  # the same errors as the Python runtime gives
            check_text(sequence, "sequence")
            if pair is not None:
                check_text(pair, "pair")
        with _as_tokenizer_error(self.source, "encode"):
            return self._impl.encode(sequence, pair, add_special_tokens=add_special_tokens)

    def encode_batch(self, inputs, add_special_tokens: bool = True) -> list:
        inputs = list(inputs)
        if self.backend == "native":
            for item in inputs:
                for text in (item if isinstance(item, (tuple, list)) else (item,)):
                    check_text(text, "batch item")
        with _as_tokenizer_error(self.source, "encode_batch"):
            return self._impl.encode_batch(inputs, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        if self.backend == "native":  # tokenizers silently drops unknown ids; ember refuses
            size = self.get_vocab_size()
            bad = [i for i in ids if i < 0 or self._impl.id_to_token(i) is None]
            if bad:
                raise TokenizerError(f"decode: id {bad[0]} is out of range (vocabulary size {size})")
        with _as_tokenizer_error(self.source, "decode"):
            return self._impl.decode(ids, skip_special_tokens=skip_special_tokens)

    def decode_batch(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    def decode_stream(self, skip_special_tokens: bool = True) -> DecodeStream:
        return DecodeStream(self, skip_special_tokens)

    # ------------------------------------------------------------------ vocabulary

    def token_to_id(self, token: str) -> int | None:
        return self._impl.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._impl.id_to_token(int(token_id))

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        return self._impl.get_vocab(with_added_tokens=with_added_tokens)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return self._impl.get_vocab_size(with_added_tokens=with_added_tokens)

    # ------------------------------------------------------------------ truncation / padding

    def enable_truncation(self, max_length: int, **kwargs) -> None:
        self._impl.enable_truncation(max_length, **kwargs)

    def no_truncation(self) -> None:
        self._impl.no_truncation()

    def enable_padding(self, **kwargs) -> None:
        self._impl.enable_padding(**kwargs)

    def no_padding(self) -> None:
        self._impl.no_padding()
