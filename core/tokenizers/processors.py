"""tokenizer.json post-processors: add special tokens, set type ids, trim byte-level offsets."""
from __future__ import annotations

from .byte_level import BYTES_CHAR
from .encoding import Encoding
from .errors import TokenizerError, component_type, unsupported
from .unicode_regex import is_whitespace

_SPACE = BYTES_CHAR[ord(" ")]


def _specials(ids, tokens, type_id) -> Encoding:
    enc = Encoding()
    for i, t in zip(ids, tokens):
        enc.append(i, t, (0, 0), type_id, 1)
    return enc


class Template:
    """TemplateProcessing: `single`/`pair` lists of {"SpecialToken": {id, type_id}} and
    {"Sequence": {id: A|B, type_id}}; `special_tokens` maps a name to its ids and tokens."""

    def __init__(self, single, pair, special_tokens, where="post_processor"):
        self.special_tokens = {}
        for name, spec in special_tokens.items():
            if len(spec["ids"]) != len(spec["tokens"]):
                raise TokenizerError(f"tokenizer.json {where}: special token {name!r} has "
                                     f"{len(spec['ids'])} ids but {len(spec['tokens'])} tokens")
            self.special_tokens[name] = (list(spec["ids"]), list(spec["tokens"]))
        self.single, self.pair = self._parse(single, where), self._parse(pair, where)

    def _parse(self, template, where):
        pieces = []
        for item in template:
            if "SpecialToken" in item:
                name = item["SpecialToken"]["id"]
                if name not in self.special_tokens:
                    raise TokenizerError(f"tokenizer.json {where}: template uses special token "
                                         f"{name!r}, missing from special_tokens")
                pieces.append(("special", name, item["SpecialToken"].get("type_id", 0)))
            elif "Sequence" in item:
                seq = item["Sequence"]["id"]
                if seq not in ("A", "B"):
                    raise TokenizerError(f"tokenizer.json {where}: sequence id {seq!r} is not A or B")
                pieces.append(("sequence", seq, item["Sequence"].get("type_id", 0)))
            else:
                raise TokenizerError(f"tokenizer.json {where}: template item {item!r} is neither "
                                     f"SpecialToken nor Sequence")
        return pieces

    def added_tokens(self, is_pair: bool) -> int:
        return sum(len(self.special_tokens[name][0]) for kind, name, _ in
                   (self.pair if is_pair else self.single) if kind == "special")

    def process(self, encodings: list[Encoding], add_special_tokens: bool) -> list[Encoding]:
        out = []
        for kind, name, type_id in (self.pair if len(encodings) > 1 else self.single):
            if kind == "sequence":
                enc = encodings[0 if name == "A" else 1]
                enc.type_ids = [type_id] * len(enc)
                out.append(enc)
            elif add_special_tokens:
                out.append(_specials(*self.special_tokens[name], type_id))
        return out


class Bert:
    """BertProcessing: [CLS] A [SEP] (B [SEP]); RobertaProcessing: <s> A </s> (</s> B </s>),
    type ids all 0, after trimming byte-level offsets like the ByteLevel processor."""

    def __init__(self, sep, cls, roberta=False, trim_offsets=False, add_prefix_space=True):
        self.sep, self.cls, self.roberta = tuple(sep), tuple(cls), roberta
        self.trim = ByteLevel(True, add_prefix_space) if roberta and trim_offsets else None

    def added_tokens(self, is_pair: bool) -> int:
        return (4 if self.roberta else 3) if is_pair else 2

    def process(self, encodings, add_special_tokens):
        if self.trim is not None:
            encodings = self.trim.process(encodings, add_special_tokens)
        if self.roberta:
            for enc in encodings:
                enc.type_ids = [0] * len(enc)
        if not add_special_tokens:
            return encodings
        (sep, sep_id), (cls, cls_id) = self.sep, self.cls
        first = [_specials([cls_id], [cls], 0), encodings[0], _specials([sep_id], [sep], 0)]
        if len(encodings) == 1:
            return first
        b_type = 0 if self.roberta else 1
        encodings[1].type_ids = [b_type] * len(encodings[1])
        lead = [_specials([sep_id], [sep], b_type)] if self.roberta else []
        return [*first, *lead, encodings[1], _specials([sep_id], [sep], b_type)]


class ByteLevel:
    """Trims the spaces a byte-level token carries out of its offsets."""

    def __init__(self, trim_offsets=True, add_prefix_space=True):
        self.trim_offsets, self.add_prefix_space = trim_offsets, add_prefix_space

    def added_tokens(self, is_pair: bool) -> int:
        return 0

    def process(self, encodings, add_special_tokens):
        if self.trim_offsets:
            for enc in encodings:
                enc.offsets = [self._trim(i, t, o) for i, (t, o) in
                               enumerate(zip(enc.tokens, enc.offsets))]
        return encodings

    def _trim(self, i, token, offsets):
        def spacey(c):
            return c == _SPACE or is_whitespace(c)

        lead = 0
        while lead < len(token) and spacey(token[lead]):
            lead += 1
        trail = 0
        while trail < len(token) and spacey(token[len(token) - 1 - trail]):
            trail += 1
        start, end = offsets
        if lead:
            if (i == 0 or start == 0) and self.add_prefix_space and lead == 1:
                lead = 0  # the space ByteLevel itself prepended is kept
            start = min(start + lead, end)
        if trail and end >= trail:
            end = max(end - trail, start)
        return start, end


class Sequence:
    def __init__(self, processors):
        self.processors = processors

    def added_tokens(self, is_pair: bool) -> int:
        return sum(p.added_tokens(is_pair) for p in self.processors)

    def process(self, encodings, add_special_tokens):
        for p in self.processors:
            encodings = p.process(encodings, add_special_tokens)
        return encodings


def build_processor(spec, where="post_processor"):
    if spec is None:
        return None
    kind = component_type(spec, where)
    try:
        if kind == "TemplateProcessing":
            return Template(spec["single"], spec["pair"], spec.get("special_tokens", {}), where)
        if kind in ("BertProcessing", "RobertaProcessing"):
            return Bert(spec["sep"], spec["cls"], kind == "RobertaProcessing",
                        spec.get("trim_offsets", True), spec.get("add_prefix_space", True))
        if kind == "ByteLevel":
            return ByteLevel(spec.get("trim_offsets", True), spec.get("add_prefix_space", True))
        if kind == "Sequence":
            return Sequence([build_processor(p, f"{where}.processors[{i}]")
                             for i, p in enumerate(spec["processors"])])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, TokenizerError):
            raise
        raise TokenizerError(f"tokenizer.json {where} ({kind}): missing or bad field {exc}") from None
    raise unsupported(where, kind, ["TemplateProcessing", "BertProcessing", "RobertaProcessing",
                                    "ByteLevel", "Sequence"])
