"""tokenizer.json decoders: each maps a list of token strings to a list of strings."""
from __future__ import annotations

from .byte_level import from_byte_chars
from .errors import TokenizerError, component_type, unsupported
from .normalizers import pattern_regex


def byte_level(tokens: list[str]) -> list[str]:
    """Byte-level characters back to bytes, then UTF-8 (invalid bytes become U+FFFD)."""
    data = bytearray()
    for t in tokens:
        raw = from_byte_chars(t)
        data += raw if raw is not None else t.encode("utf-8")  # e.g. an added token's text
    return [data.decode("utf-8", errors="replace")]


def _byte_of(token: str) -> int | None:
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        digits = token[3:5]
        if all(c in "0123456789abcdefABCDEF" for c in digits):
            return int(digits, 16)
    return None


def byte_fallback(tokens: list[str]) -> list[str]:
    """<0xXX> runs back to text; a run that is not valid UTF-8 gives one U+FFFD per byte."""
    out, pending = [], bytearray()

    def flush():
        if pending:
            try:
                out.append(pending.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend(["\ufffd"] * len(pending))
            pending.clear()

    for t in tokens:
        b = _byte_of(t)
        if b is None:
            flush()
            out.append(t)
        else:
            pending.append(b)
    flush()
    return out


def fuse(tokens: list[str]) -> list[str]:
    return ["".join(tokens)]


class Metaspace:
    def __init__(self, replacement="\u2581", prepend_scheme="always"):
        self.replacement, self.prepend_scheme = replacement, prepend_scheme

    def __call__(self, tokens):
        out = []
        for i, t in enumerate(tokens):
            # every replacement char of the first token is dropped when a prefix was prepended
            drop = i == 0 and self.prepend_scheme != "never"
            out.append(t.replace(self.replacement, "" if drop else " "))
        return out


class Strip:
    def __init__(self, content=" ", start=0, stop=0):
        self.content, self.start, self.stop = content, start, stop

    def __call__(self, tokens):
        out = []
        for t in tokens:
            s = 0
            while s < min(self.start, len(t)) and t[s] == self.content:
                s += 1
            e, cut = len(t), 0
            while cut < self.stop and e > 0 and t[e - 1] == self.content:
                e -= 1
                cut += 1
            out.append(t[s:e] if s <= e else "")
        return out


class Replace:
    def __init__(self, pattern, content):
        self.regex, self.content = pattern_regex(pattern, "decoder Replace"), content

    def __call__(self, tokens):
        return [self.regex.sub(lambda _: self.content, t) for t in tokens]


_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
             (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def cleanup(text: str) -> str:
    """tokenizers' `clean_up_tokenization`: glue punctuation and contractions back on."""
    for a, b in _CLEANUPS:
        text = text.replace(a, b)
    return text


class WordPiece:
    def __init__(self, prefix="##", cleanup_spaces=True):
        self.prefix, self.cleanup = prefix, cleanup_spaces

    def __call__(self, tokens):
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t[len(self.prefix):] if t.startswith(self.prefix) else " " + t
            out.append(cleanup(t) if self.cleanup else t)
        return out


class BPESuffix:
    """tokenizers' BPEDecoder: the end-of-word suffix becomes a space (none after the last)."""

    def __init__(self, suffix="</w>"):
        self.suffix = suffix

    def __call__(self, tokens):
        last = len(tokens) - 1
        return [t.replace(self.suffix, "" if i == last else " ") for i, t in enumerate(tokens)]


class Sequence:
    def __init__(self, decoders):
        self.decoders = decoders

    def __call__(self, tokens):
        for d in self.decoders:
            tokens = d(tokens)
        return tokens


def build_decoder(spec, where="decoder"):
    if spec is None:
        return None
    kind = component_type(spec, where)
    try:
        if kind == "ByteLevel":
            return byte_level
        if kind == "ByteFallback":
            return byte_fallback
        if kind == "Fuse":
            return fuse
        if kind == "Metaspace":
            scheme = spec.get("prepend_scheme")
            if scheme is None:
                scheme = "always" if spec.get("add_prefix_space", True) else "never"
            return Metaspace(spec.get("replacement", "\u2581"), scheme)
        if kind == "Strip":
            return Strip(spec["content"], spec.get("start", 0), spec.get("stop", 0))
        if kind == "Replace":
            return Replace(spec["pattern"], spec["content"])
        if kind == "WordPiece":
            return WordPiece(spec.get("prefix", "##"), spec.get("cleanup", True))
        if kind == "BPEDecoder":
            return BPESuffix(spec.get("suffix", "</w>"))
        if kind == "Sequence":
            return Sequence([build_decoder(d, f"{where}.decoders[{i}]")
                             for i, d in enumerate(spec["decoders"])])
    except (KeyError, TypeError) as exc:
        raise TokenizerError(f"tokenizer.json {where} ({kind}): missing or bad field {exc}") from None
    raise unsupported(where, kind, ["ByteLevel", "ByteFallback", "Fuse", "Metaspace", "Strip",
                                    "Replace", "WordPiece", "BPEDecoder", "Sequence"])
