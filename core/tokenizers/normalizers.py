"""tokenizer.json normalizers: each edits a Piece in place, keeping its alignment."""
from __future__ import annotations

import functools
import re
import unicodedata

from ..errors import LimitError
from .byte_level import to_byte_chars
from .errors import TokenizerError, component_type, unsupported
from .normalized import Piece
from .unicode_regex import WHITESPACE, class_body, compile_onig, is_whitespace


def unicode_normalize(piece: Piece, form: str) -> None:
    """NFC/NFD/NFKC/NFKD keeping alignment as tokenizers does (a decomposed character's
    parts all map to it, a composition maps to the first character it consumes)."""
    text = piece.text
    whole = unicodedata.normalize(form, text)
    if whole == text:
        return
    per_char = [unicodedata.normalize(form, c) for c in text]
    if "".join(per_char) == whole:  # the common case: characters normalize independently
        piece.text, piece.align = whole, [a for chars, a in zip(per_char, piece.align)
                                          for _ in chars]
        return
    # As unicode-normalization-alignments does: decompose char by char, the first part of a
    # char replacing it (change 0) and the others inserted (+1); put marks in canonical
    # order, the changes travelling with them; a composition of k parts sums their changes
    # minus k - 1. NormalizedString.transform then turns changes into alignments.
    decomposition = "NFKD" if form.startswith("NFK") else "NFD"
    parts = [(d, int(i > 0)) for c in text
             for i, d in enumerate(unicodedata.normalize(decomposition, c))]
    i = 0
    while i < len(parts):
        j = i
        while j < len(parts) and unicodedata.combining(parts[j][0]):
            j += 1
        if j > i + 1:
            parts[i:j] = sorted(parts[i:j], key=lambda p: unicodedata.combining(p[0]))
        i = j + 1
    if form in ("NFD", "NFKD"):
        piece.transform(parts)
        return
    pairs, used = [], 0
    for c in whole:
        k = len(unicodedata.normalize(decomposition, c))
        pairs.append((c, sum(change for _, change in parts[used:used + k]) - (k - 1)))
        used += k
    piece.transform(pairs)


_CONTROL_CATEGORIES = ("Cc", "Cf", "Co", "Cs")  # Rust's is_other(): unassigned (Cn) stays


def _is_control(c: str) -> bool:
    return c not in "\t\n\r" and unicodedata.category(c) in _CONTROL_CATEGORIES


_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
                  "\U0002b740-\U0002b81f\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f]")
_SPACES = {ord(c): " " for c in WHITESPACE}


@functools.cache
def _category_regex(*categories: str) -> re.Pattern:
    return re.compile(f"[{''.join(class_body(c) for c in categories)}]")


def lowercase(piece: Piece) -> None:
    """Per-character lowercase (Rust's char::to_lowercase), i.e. without Python's
    final-sigma rule; one str.lower() when no character changes length."""
    low = piece.text.lower()
    if len(low) == len(piece.text) and "\u03a3" not in piece.text:
        piece.text = low
    else:
        piece.map_chars(str.lower)


def _strip_nonspacing_marks(piece: Piece) -> None:  # BertNormalizer's strip_accents
    if _category_regex("Mn").search(piece.text):
        piece.filter(lambda c: unicodedata.category(c) != "Mn")


def _strip_marks(piece: Piece) -> None:  # the StripAccents normalizer drops Mc and Me too
    if _category_regex("M").search(piece.text):
        piece.filter(lambda c: unicodedata.category(c)[0] != "M")


class BertNormalizer:
    def __init__(self, clean_text=True, handle_chinese_chars=True, strip_accents=None,
                 lowercase=True):
        self.clean_text, self.handle_chinese_chars = clean_text, handle_chinese_chars
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.lowercase = lowercase

    def __call__(self, piece: Piece) -> None:
        # Each step edits per character only when a character it touches is present.
        if self.clean_text:
            if "\0" in piece.text or "\ufffd" in piece.text or \
                    _category_regex(*_CONTROL_CATEGORIES).search(
                        piece.text.translate(_KEEP_TAB_NL_CR)):
                piece.filter(lambda c: not (c == "\0" or c == "\ufffd" or _is_control(c)))
            piece.text = piece.text.translate(_SPACES)  # one char for one: alignment holds
        if self.handle_chinese_chars and _CJK.search(piece.text):
            pairs = []
            for c in piece.text:
                pairs.extend(((" ", 0), (c, 1), (" ", 1)) if _CJK.match(c) else ((c, 0),))
            piece.transform(pairs)
        if self.strip_accents:
            unicode_normalize(piece, "NFD")
            _strip_nonspacing_marks(piece)
        if self.lowercase:
            lowercase(piece)


_KEEP_TAB_NL_CR = str.maketrans("\t\n\r", "   ")  # controls clean_text keeps (as spaces)


class Replace:
    def __init__(self, pattern, content, where="normalizer"):
        self.regex = pattern_regex(pattern, "Replace")
        if not isinstance(content, str):
            raise TokenizerError(f"tokenizer.json {where} (Replace): content must be a string, got {content!r:.80}")
        self.content, self.where = content, where

    def __call__(self, piece: Piece) -> None:
        matches = [m.span() for m in self.regex.finditer(piece.text) if m.end() > m.start()]
        if matches:
            # chained Replaces multiply the length (each "a" -> "aa" doubles it): bounded per input character
            n = len(piece.text) + len(matches) * len(self.content) - sum(e - s for s, e in matches)
            check_growth(piece, n, f"{self.where} (Replace)")
            piece.replace(matches, self.content)


def check_growth(piece: Piece, n: int, where: str):
    """A normalizer may make at most budget.max_normalized_growth characters per original character (+1024)."""
    from ..limits import budget
    original = piece.align[-1][1] - piece.align[0][0] if piece.align else 0
    limit = budget.max_normalized_growth * max(original, 0) + 1024
    if n > limit:
        raise LimitError(f"tokenizer.json {where}", f"normalized text of {original} characters: length", n, limit,
                         "max_normalized_growth", " characters")


def pattern_regex(spec, where: str) -> re.Pattern:
    """A tokenizer.json pattern {"String": s} (literal) or {"Regex": r} (Oniguruma)."""
    if isinstance(spec, dict) and isinstance(spec.get("String"), str):
        return re.compile(re.escape(spec["String"]))
    if isinstance(spec, dict) and isinstance(spec.get("Regex"), str):
        return compile_onig(spec["Regex"])
    raise TokenizerError(f"tokenizer.json {where}: pattern must be {{\"String\": ..}} or "
                         f"{{\"Regex\": ..}}, got {spec!r}")


class Prepend:
    def __init__(self, prepend):
        self.prepend = prepend

    def __call__(self, piece: Piece) -> None:
        piece.prepend(self.prepend)


class Strip:
    def __init__(self, strip_left=True, strip_right=True):
        self.left, self.right = strip_left, strip_right

    def __call__(self, piece: Piece) -> None:
        s, e = 0, len(piece.text)
        while self.left and s < e and is_whitespace(piece.text[s]):
            s += 1
        while self.right and e > s and is_whitespace(piece.text[e - 1]):
            e -= 1
        piece.text, piece.align = piece.text[s:e], piece.align[s:e]


class Sequence:
    def __init__(self, normalizers):
        self.normalizers = normalizers

    def __call__(self, piece: Piece) -> None:
        for n in self.normalizers:
            n(piece)


def _unicode(form):
    return lambda piece: unicode_normalize(piece, form)


def _byte_level(piece: Piece) -> None:
    piece.map_chars(to_byte_chars)


_SIMPLE = {"NFC": _unicode("NFC"), "NFD": _unicode("NFD"), "NFKC": _unicode("NFKC"),
           "NFKD": _unicode("NFKD"), "Lowercase": lowercase,
           "StripAccents": _strip_marks, "ByteLevel": _byte_level}


def build_normalizer(spec, where="normalizer"):
    """Build a normalizer from its tokenizer.json dict (None -> None)."""
    if spec is None:
        return None
    kind = component_type(spec, where)
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    try:
        if kind == "Sequence":
            return Sequence([build_normalizer(s, f"{where}.normalizers[{i}]")
                             for i, s in enumerate(spec["normalizers"])])
        if kind == "BertNormalizer":
            return BertNormalizer(spec.get("clean_text", True), spec.get("handle_chinese_chars", True),
                                  spec.get("strip_accents"), spec.get("lowercase", True))
        if kind == "Replace":
            return Replace(spec["pattern"], spec["content"], where)
        if kind == "Prepend":
            return Prepend(spec["prepend"])
        if kind == "Strip":
            return Strip(spec.get("strip_left", True), spec.get("strip_right", True))
    except (KeyError, TypeError) as exc:
        raise TokenizerError(f"tokenizer.json {where} ({kind}): missing or bad field {exc}") from None
    raise unsupported(where, kind, [*_SIMPLE, "Sequence", "BertNormalizer", "Replace", "Prepend",
                                    "Strip"])
