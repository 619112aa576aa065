"""WordPiece (BERT): greedy longest-match-first within each pre-tokenized word."""
from __future__ import annotations

from .errors import TokenizerError


class WordPiece:
    def __init__(self, vocab: dict[str, int], unk_token="[UNK]", continuing_subword_prefix="##",
                 max_input_chars_per_word=100):
        if unk_token not in vocab:
            raise TokenizerError(f"tokenizer.json model (WordPiece): unk_token {unk_token!r} is "
                                 f"not in the vocabulary")
        self.vocab = vocab
        self.vocab_r = {i: t for t, i in vocab.items()}
        self.unk_id, self.unk_token = vocab[unk_token], unk_token
        self.prefix = continuing_subword_prefix
        self.max_chars = max_input_chars_per_word
        self.longest = max((len(t) for t in vocab), default=1)  # bounds the match search

    def tokenize(self, text: str) -> list[tuple[int, str, int, int]]:
        n = len(text)
        if n == 0:
            return []
        if n > self.max_chars:
            return [(self.unk_id, self.unk_token, 0, n)]
        out, start, vocab = [], 0, self.vocab
        while start < n:
            prefix = self.prefix if start else ""
            end = min(n, start + self.longest - len(prefix))
            while end > start:
                piece = prefix + text[start:end]
                tid = vocab.get(piece)
                if tid is not None:
                    out.append((tid, piece, start, end))
                    break
                end -= 1
            else:  # no piece of the vocabulary starts here: the whole word is unknown
                return [(self.unk_id, self.unk_token, 0, n)]
            start = end
        return out


def build_wordpiece(spec: dict) -> WordPiece:
    if not isinstance(spec.get("vocab"), dict):
        raise TokenizerError("tokenizer.json model (WordPiece): needs a \"vocab\" object")
    return WordPiece(spec["vocab"], spec.get("unk_token", "[UNK]"),
                     spec.get("continuing_subword_prefix", "##"),
                     spec.get("max_input_chars_per_word", 100))
