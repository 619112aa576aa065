"""Unigram (SentencePiece's unigram LM): Viterbi over the pieces, as tokenizers' encode_optimized."""
from __future__ import annotations

from .bpe import CACHE_MAX_CHARS, CACHE_WORDS
from .errors import TokenizerError

UNK_PENALTY = 10.0  # the unknown piece scores this much below the worst real piece


class Unigram:
    def __init__(self, vocab: list[tuple[str, float]], unk_id=None, byte_fallback=False,
                 fuse_unk=True):
        self.pieces = [p for p, _ in vocab]
        self.scores = [float(s) for _, s in vocab]
        self.vocab = {p: i for i, p in enumerate(self.pieces)}  # a repeated piece: last id wins
        self.vocab_r = dict(enumerate(self.pieces))
        if unk_id is not None and not 0 <= unk_id < len(vocab):
            raise TokenizerError(f"tokenizer.json model (Unigram): unk_id {unk_id} is outside "
                                 f"the vocabulary of {len(vocab)}")
        self.unk_id, self.byte_fallback, self.fuse_unk = unk_id, byte_fallback, fuse_unk
        self.min_score = min(self.scores, default=0.0)
        self.longest = max((len(p) for p in self.pieces), default=1)
        self.cache: dict[str, list[tuple[int, str, int, int]]] = {}

    def _viterbi(self, text: str) -> list[tuple[int, int]]:
        """Best segmentation as (start, end) character spans."""
        n, vocab, scores = len(text), self.vocab, self.scores
        unk_score = self.min_score - UNK_PENALTY
        best = [0.0] * (n + 1)
        back: list[tuple[int, int] | None] = [None] * (n + 1)  # (start, id) of best path's last piece
        for start in range(n):
            if start and back[start] is None:
                continue
            here, single = best[start], False
            for end in range(start + 1, min(n, start + self.longest) + 1):
                tid = vocab.get(text[start:end])
                if tid is None:
                    continue
                cand = here + scores[tid]
                if back[end] is None or cand > best[end]:
                    best[end], back[end] = cand, (start, tid)
                single = single or end == start + 1
            if not single:
                if self.unk_id is None:
                    raise TokenizerError("tokenizer.json model (Unigram): the text holds a "
                                         f"character ({text[start]!r}) outside the vocabulary "
                                         f"and the model has no unk_id")
                cand = here + unk_score
                if back[start + 1] is None or cand > best[start + 1]:
                    best[start + 1], back[start + 1] = cand, (start, self.unk_id)
        spans, end, unk_end = [], n, None
        while end > 0:
            start, tid = back[end]
            if self.fuse_unk and tid == self.unk_id:
                unk_end = end if unk_end is None else unk_end
            else:
                if unk_end is not None:
                    spans.append((end, unk_end))
                    unk_end = None
                spans.append((start, end))
            end = start
        if unk_end is not None:
            spans.append((0, unk_end))
        spans.reverse()
        return spans

    def tokenize(self, text: str) -> list[tuple[int, str, int, int]]:
        if not text:
            return []
        hit = self.cache.get(text)
        if hit is not None:
            return hit
        out = []
        for s, e in self._viterbi(text):
            tid = self.vocab.get(text[s:e])
            if tid is None and self.byte_fallback:
                fallback = [self.vocab.get(f"<0x{b:02X}>") for b in text[s:e].encode("utf-8")]
                if None not in fallback:
                    out.extend((t, self.pieces[t], s, e) for t in fallback)
                    continue
            # an unknown span keeps its own text as the token string, as upstream
            out.append((self.unk_id if tid is None else tid, text[s:e], s, e))
        if len(text) <= CACHE_MAX_CHARS:
            if len(self.cache) >= CACHE_WORDS:
                self.cache.clear()
            self.cache[text] = out
        return out


def build_unigram(spec: dict) -> Unigram:
    vocab = spec.get("vocab")
    if not isinstance(vocab, list) or not all(isinstance(v, list) and len(v) == 2 for v in vocab):
        raise TokenizerError("tokenizer.json model (Unigram): \"vocab\" must be a list of "
                             "[piece, score] pairs")
    return Unigram([(p, s) for p, s in vocab], spec.get("unk_id"),
                   bool(spec.get("byte_fallback", False)))
