"""Token masks: which tokens of a vocabulary keep a DFA (automaton.py) alive from a state, computed for all tokens
at once with numpy and kept per state; and Constraint, the object ember's generate() consults at each step.

A vocabulary is the bytes each token adds to the text (None for control tokens, which a constrained reply never
contains). From a state s, token t is allowed when walking its bytes never reaches the dead state *nor a state from
which no accepting state is reachable* (so the text can always still be completed); the walk runs one byte
position at a time over every token still long enough (tokens sorted by length), a few ms per state for a 49k
vocabulary. End-of-sequence is allowed where the state accepts; where a state accepts and allows no token, the
text is complete and only end-of-sequence remains.
"""
from __future__ import annotations

import numpy as np

from .automaton import DFA
from .errors import GrammarError


class Vocabulary:
    """Token bytes as a padded matrix (tokens sorted by length, longest first) for vectorized DFA walks."""

    def __init__(self, token_bytes: list):
        n = len(token_bytes)
        lengths = np.array([len(b) if b else 0 for b in token_bytes], np.int64)
        self.order = np.argsort(-lengths, kind="stable")             # longest first
        self.lengths = lengths[self.order]
        width = int(self.lengths[0]) if n else 0
        mat = np.zeros((n, max(width, 1)), np.uint8)
        for row, tid in enumerate(self.order):
            b = token_bytes[tid]
            if b:
                mat[row, :len(b)] = np.frombuffer(b, np.uint8)
        self.bytes = mat                                              # (tokens, width)
        # counts[j]: how many tokens are longer than j (their rows come first)
        self.counts = np.array([(self.lengths > j).sum() for j in range(width)], np.int64)
        self.n = n
        self.token_bytes = token_bytes

    @classmethod
    def of(cls, tokenizer) -> "Vocabulary":
        """The vocabulary of a tokenizer with token_bytes(id) (ember's GGUF tokenizers, TextTokenizer), built once
        and kept on it."""
        v = getattr(tokenizer, "_grammar_vocabulary", None)
        if v is None:
            n = tokenizer.vocab_size()
            v = cls([tokenizer.token_bytes(i) for i in range(n)])
            tokenizer._grammar_vocabulary = v
        return v


class TokenMasks:
    """A DFA's masks over one vocabulary, computed per state on first use."""

    def __init__(self, dfa: DFA, vocab: Vocabulary):
        self.dfa, self.vocab = dfa, vocab
        self.live = dfa.live()
        if not self.live[dfa.start]:
            raise GrammarError("ember: the grammar accepts no text at all")
        # a transition into a state that cannot reach acceptance is as good as dead
        self.table = np.where(self.live[dfa.table], dfa.table, 0).astype(np.int32)
        self._cache: dict[int, np.ndarray] = {}

    def allowed(self, state: int) -> np.ndarray:
        """(vocab,) bool, in token id order."""
        hit = self._cache.get(state)
        if hit is not None:
            return hit
        v, table, classes = self.vocab, self.table, self.dfa.classes
        cur = np.full(v.n, state, np.int32)
        for j, n in enumerate(v.counts):
            if n == 0:
                break
            cur[:n] = table[cur[:n], classes[v.bytes[:n, j]]]
        ok_sorted = (cur != 0) & (v.lengths > 0)
        out = np.zeros(v.n, bool)
        out[v.order] = ok_sorted
        self._cache[state] = out
        return out

    def step(self, state: int, token: int) -> int:
        b = self.vocab.token_bytes[token]
        if not b:
            return 0
        for byte in b:
            state = int(self.table[state, self.dfa.classes[byte]])
            if state == 0:
                return 0
        return state


class Constraint:
    """One constrained reply's state: generate() asks allowed(n_vocab) and accepting() before each pick, and
    calls advance(id) after it."""
    error = GrammarError

    def __init__(self, masks: TokenMasks, description: str = "grammar"):
        self.masks, self.description = masks, description
        self.state = masks.dfa.start
        self._text = bytearray()

    def allowed(self, n_vocab: int) -> np.ndarray:
        m = self.masks.allowed(self.state)
        if m.shape[0] == n_vocab:
            return m
        out = np.zeros(n_vocab, bool)  # a model with more rows than the tokenizer has tokens: extras never allowed
        k = min(n_vocab, m.shape[0])
        out[:k] = m[:k]
        return out

    def accepting(self) -> bool:
        return bool(self.masks.dfa.accept[self.state])

    def advance(self, token: int):
        nxt = self.masks.step(self.state, token)
        if nxt == 0:
            raise GrammarError(f"ember: token {token} leaves the {self.description} after {self.text()[-60:]!r}")
        self.state = nxt
        self._text += self.masks.vocab.token_bytes[token] or b""

    def text(self) -> str:
        return self._text.decode("utf-8", errors="replace")
