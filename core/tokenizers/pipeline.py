"""The pure-Python tokenizer.json runtime: added tokens -> normalizer -> pre-tokenizer ->
model -> post-processor (+ truncation/padding), and ids -> decoder -> text."""
from __future__ import annotations

import json

from . import validate as V
from .added_tokens import AddedVocabulary
from .bpe import build_bpe
from .decoders import build_decoder
from .encoding import Encoding, pad_batch, truncate_pair
from .errors import TokenizerError
from .json_floats import serde_json_float
from .normalizers import build_normalizer
from .pre_tokenizers import build_pre_tokenizer
from .processors import build_processor
from .unigram import build_unigram
from .wordpiece import build_wordpiece

_MODELS = {"BPE": build_bpe, "WordPiece": build_wordpiece, "Unigram": build_unigram}


def _model_type(spec: dict) -> str:
    """Older files omit the model "type"; tokenizers then tells the models apart by fields."""
    if "type" in spec:
        return spec["type"]
    if "merges" in spec:
        return "BPE"
    if isinstance(spec.get("vocab"), list):
        return "Unigram"
    if "max_input_chars_per_word" in spec:
        return "WordPiece"
    raise TokenizerError("tokenizer.json model: no \"type\" and no fields that identify it")


def check_text(text, what: str) -> str:
    if not isinstance(text, str):
        raise TokenizerError(f"encode: {what} must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise TokenizerError(f"encode: {what} holds a lone surrogate {text[exc.start]!r} at "
                             f"character {exc.start}, which is not valid Unicode text") from None
    return text


class PythonTokenizer:
    """tokenizers.Tokenizer's behaviour, read from the same tokenizer.json, in plain Python."""

    def __init__(self, config: dict, source: str = "tokenizer.json"):
        if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
            raise TokenizerError(f"{source}: not a tokenizer.json (no \"model\" object)")
        kind = _model_type(config["model"])
        if not isinstance(kind, str) or kind not in _MODELS:
            raise TokenizerError(f"{source} model: unsupported type {kind!r} "
                                 f"(ember supports {', '.join(_MODELS)})"[:300])
        try:
            self.model = _MODELS[kind](config["model"])
        except V.RUNTIME_ERRORS as exc:
            if isinstance(exc, TokenizerError):
                raise
            raise TokenizerError(f"{source} model ({kind}): missing or bad field ({type(exc).__name__}: "
                                 f"{str(exc)[:200]})") from None
        V.check_ids(self.model.vocab, source, "model.vocab")
        self.normalizer = V.build(source, "normalizer", build_normalizer, config.get("normalizer"))
        self.pre_tokenizer = V.build(source, "pre_tokenizer", build_pre_tokenizer, config.get("pre_tokenizer"))
        self.post_processor = V.build(source, "post_processor", build_processor, config.get("post_processor"))
        self.decoder = V.build(source, "decoder", build_decoder, config.get("decoder"))
        added = config.get("added_tokens") or []
        if not isinstance(added, list):
            raise TokenizerError(f"{source} added_tokens: expected a list")
        self.added = V.build(source, "added_tokens", AddedVocabulary, added, self.model, self.normalizer)
        self.truncation = V.check_truncation(config.get("truncation"), source)
        self.padding = V.check_padding(config.get("padding"), source)
        V.probe(self, source)

    @classmethod
    def from_str(cls, text: str, source: str = "tokenizer.json") -> PythonTokenizer:
        try:
            config = json.loads(text, parse_float=serde_json_float)
        except json.JSONDecodeError as exc:
            raise TokenizerError(f"{source}: malformed JSON ({exc})") from None
        except RecursionError:  # json recurses once per nesting level
            raise TokenizerError(f"{source}: JSON nested too deeply") from None
        return cls(config, source)

    # ------------------------------------------------------------------ encode

    def _encode_one(self, text: str, type_id: int) -> Encoding:
        enc = Encoding()
        for piece, tid in self.added.split(text, self.normalizer):
            if tid is not None:
                enc.append(tid, piece.text, piece.span(0, len(piece.text)), type_id)
                continue
            words = self.pre_tokenizer([piece]) if self.pre_tokenizer else [piece]
            for word in words:
                for tid, token, s, e in self.model.tokenize(word.text):
                    enc.append(tid, token, word.span(s, e), type_id)
        return enc

    def _post_process(self, first: Encoding, second: Encoding | None,
                      add_special_tokens: bool) -> Encoding:
        pair = second is not None
        if self.truncation:
            n_added = self.post_processor.added_tokens(pair) if (
                add_special_tokens and self.post_processor) else 0
            truncate_pair(first, second, self.truncation, n_added)
        parts = [first] if second is None else [first, second]
        if self.post_processor is not None:
            parts = self.post_processor.process(parts, add_special_tokens)
        out = Encoding()
        for p in parts:
            out.extend(p)
        return out

    def _encode_unpadded(self, sequence, pair, add_special_tokens):
        first = self._encode_one(check_text(sequence, "sequence"), 0)
        second = None if pair is None else self._encode_one(check_text(pair, "pair"), 1)
        return self._post_process(first, second, add_special_tokens)

    def encode(self, sequence: str, pair: str | None = None, is_pretokenized: bool = False,
               add_special_tokens: bool = True) -> Encoding:
        if is_pretokenized:
            raise TokenizerError("encode: is_pretokenized=True is not supported by ember's "
                                 "Python tokenizer runtime")
        enc = self._encode_unpadded(sequence, pair, add_special_tokens)
        if self.padding:
            pad_batch([enc], self.padding)
        return enc

    def encode_batch(self, inputs, is_pretokenized: bool = False,
                     add_special_tokens: bool = True) -> list[Encoding]:
        if is_pretokenized:
            raise TokenizerError("encode_batch: is_pretokenized=True is not supported by "
                                 "ember's Python tokenizer runtime")
        out = []
        for item in inputs:
            seq, pair = (item if isinstance(item, (tuple, list)) else (item, None))
            out.append(self._encode_unpadded(seq, pair, add_special_tokens))
        if self.padding:
            pad_batch(out, self.padding)
        return out

    # ------------------------------------------------------------------ decode

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        tokens = []
        for i in ids:
            token = self.id_to_token(int(i))
            if token is None or int(i) < 0:
                raise TokenizerError(f"decode: id {int(i)} is out of range (vocabulary size "
                                     f"{self.get_vocab_size()})")
            if not (skip_special_tokens and token in self.added.special):
                tokens.append(token)
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(self.decoder(tokens))

    def decode_batch(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    # ------------------------------------------------------------------ vocabulary

    def token_to_id(self, token: str) -> int | None:
        tid = self.added.by_content.get(token)
        return tid if tid is not None else self.model.vocab.get(token)

    def id_to_token(self, tid: int) -> str | None:
        added = self.added.by_id.get(tid)
        return added["content"] if added is not None else self.model.vocab_r.get(tid)

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        vocab = dict(self.model.vocab)
        if with_added_tokens:
            vocab.update(self.added.by_content)
        return vocab

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        if not with_added_tokens:
            return len(self.model.vocab_r)
        return len(set(self.model.vocab_r) | set(self.added.by_id))

    # ------------------------------------------------------------------ truncation/padding

    def enable_truncation(self, max_length: int, stride: int = 0, strategy: str = "longest_first",
                          direction: str = "right") -> None:
        self.truncation = V.check_truncation({"max_length": max_length, "stride": stride,
                                              "strategy": "".join(w.title() for w in strategy.split("_")),
                                              "direction": direction.title()}, "enable_truncation:")

    def no_truncation(self) -> None:
        self.truncation = None

    def enable_padding(self, direction: str = "right", pad_id: int = 0, pad_type_id: int = 0,
                       pad_token: str = "[PAD]", length: int | None = None,
                       pad_to_multiple_of: int | None = None) -> None:
        self.padding = V.check_padding({"strategy": "BatchLongest" if length is None else {"Fixed": length},
                                        "direction": direction.title(), "pad_id": pad_id,
                                        "pad_type_id": pad_type_id, "pad_token": pad_token,
                                        "pad_to_multiple_of": pad_to_multiple_of}, "enable_padding:")

    def no_padding(self) -> None:
        self.padding = None
