"""Byte-pair encoding (tokenizers' BPE model): merges by rank with a heap, plus a word cache."""
from __future__ import annotations

import heapq

from .errors import TokenizerError

CACHE_WORDS = 100_000  # distinct words remembered before the cache starts over
CACHE_MAX_CHARS = 256  # longer inputs (a whole Llama-2 text has no pre-tokenizer) are not kept


def char_offsets(text: str, lengths: list[int]) -> list[tuple[int, int]]:
    """Character spans of consecutive pieces of `text` given their UTF-8 byte lengths.
    A piece that ends inside a character (one byte of a byte-fallback triple) covers it."""
    out, pos = [], 0
    if text.isascii():
        for n in lengths:
            out.append((pos, pos + n))
            pos += n
        return out
    char_at = [i for i, c in enumerate(text) for _ in range(len(c.encode("utf-8")))]
    for n in lengths:
        if n == 0:
            at = char_at[pos] if pos < len(char_at) else len(text)
            out.append((at, at))
        else:
            end = min(pos + n, len(char_at))
            out.append((char_at[pos], char_at[end - 1] + 1))
        pos += n
    return out


class BPE:
    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], unk_token=None,
                 continuing_subword_prefix=None, end_of_word_suffix=None, fuse_unk=False,
                 byte_fallback=False, ignore_merges=False):
        self.vocab = vocab
        self.vocab_r = {i: t for t, i in vocab.items()}
        self.unk_token, self.fuse_unk, self.byte_fallback = unk_token, fuse_unk, byte_fallback
        self.prefix = continuing_subword_prefix or ""
        self.suffix = end_of_word_suffix or ""
        self.ignore_merges = ignore_merges
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}  # (left, right) -> (rank, new)
        for rank, (a, b) in enumerate(merges):
            new = a + b[len(self.prefix):]
            for tok in (a, b, new):
                if tok not in vocab:
                    raise TokenizerError(f"tokenizer.json model (BPE): merge #{rank} {a!r} + {b!r} "
                                         f"uses {tok!r}, which is not in the vocabulary")
            self.merges[(vocab[a], vocab[b])] = (rank, vocab[new])
        self.byte_ids = ([vocab.get(f"<0x{b:02X}>") for b in range(256)] if byte_fallback else None)
        self.cache: dict[str, list[tuple[int, str, int, int]]] = {}

    def tokenize(self, text: str) -> list[tuple[int, str, int, int]]:
        """(id, token, start, end) per token, offsets in characters of `text`."""
        if not text:
            return []
        hit = self.cache.get(text)
        if hit is not None:
            return hit
        if self.ignore_merges and text in self.vocab:
            out = [(self.vocab[text], text, 0, len(text))]
        else:
            ids, lengths = self._merge(*self._symbols(text))
            vocab_r = self.vocab_r
            out = [(i, vocab_r[i], s, e) for i, (s, e) in zip(ids, char_offsets(text, lengths))]
        if len(text) <= CACHE_MAX_CHARS:
            if len(self.cache) >= CACHE_WORDS:
                self.cache.clear()
            self.cache[text] = out
        return out

    def _symbols(self, text: str) -> tuple[list[int], list[int]]:
        """Initial symbols (id, UTF-8 byte length): characters, byte fallbacks or unk,
        following tokenizers' BPE::merge_word quirk for quirk."""
        ids, lengths, unk = [], [], None
        last = len(text) - 1
        for i, c in enumerate(text):
            s = c if (i == 0 or not self.prefix) else self.prefix + c
            if i == last and self.suffix:
                s += self.suffix
            nbytes = len(c.encode("utf-8")) if c > "\x7f" else 1
            tid = self.vocab.get(s)
            if tid is not None:
                if unk is not None:
                    ids.append(unk[0])
                    lengths.append(unk[1])
                    unk = None
                ids.append(tid)
                lengths.append(nbytes)
                continue
            if self.byte_fallback:
                fallback = [self.byte_ids[b] for b in s.encode("utf-8")]
                if None not in fallback:  # a pending unk is not flushed here, as upstream
                    ids.extend(fallback)
                    lengths.extend([1] * len(fallback))
                    continue
            if self.unk_token is not None:
                unk_id = self.vocab.get(self.unk_token)
                if unk_id is None:
                    raise TokenizerError(f"tokenizer.json model (BPE): unk_token "
                                         f"{self.unk_token!r} is not in the vocabulary")
                if unk is not None and self.fuse_unk:
                    unk = (unk[0], unk[1] + nbytes)
                else:
                    if unk is not None:
                        ids.append(unk[0])
                        lengths.append(unk[1])
                    unk = (unk_id, nbytes)
        if unk is not None:
            ids.append(unk[0])
            lengths.append(unk[1])
        return ids, lengths

    def _merge(self, ids: list[int], lengths: list[int]) -> tuple[list[int], list[int]]:
        """Apply merges lowest rank first (leftmost on ties) over a linked list of symbols."""
        merges, n = self.merges, len(ids)
        if n < 2:
            return ids, lengths
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []
        for pos in range(n - 1):
            m = merges.get((ids[pos], ids[pos + 1]))
            if m is not None:
                heap.append((m[0], pos, m[1]))
        heapq.heapify(heap)
        while heap:
            rank, pos, new = heapq.heappop(heap)
            right = nxt[pos]
            if not alive[pos] or right == -1:
                continue
            m = merges.get((ids[pos], ids[right]))
            if m is None or m[1] != new:  # a stale entry: the pair changed since it was queued
                continue
            ids[pos] = new
            lengths[pos] += lengths[right]
            alive[right] = False
            nxt[pos] = after = nxt[right]
            if after != -1:
                prev[after] = pos
            before = prev[pos]
            if before != -1:
                m = merges.get((ids[before], new))
                if m is not None:
                    heapq.heappush(heap, (m[0], before, m[1]))
            if after != -1:
                m = merges.get((new, ids[after]))
                if m is not None:
                    heapq.heappush(heap, (m[0], pos, m[1]))
        keep = [i for i in range(n) if alive[i]]
        return [ids[i] for i in keep], [lengths[i] for i in keep]


def build_bpe(spec: dict) -> BPE:
    vocab, merges = spec.get("vocab"), spec.get("merges", [])
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        raise TokenizerError("tokenizer.json model (BPE): needs a \"vocab\" object and a "
                             "\"merges\" list")
    if spec.get("dropout") not in (None, 0, 0.0):
        raise TokenizerError(f"tokenizer.json model (BPE): dropout {spec['dropout']} makes "
                             f"encoding random; ember supports dropout null only")
    pairs = []
    for i, m in enumerate(merges):
        if isinstance(m, str):
            parts = m.split(" ")
        elif isinstance(m, list):
            parts = m
        else:
            parts = []
        if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
            raise TokenizerError(f"tokenizer.json model (BPE): merge #{i} {m!r} is not a pair "
                                 f"\"a b\" or [a, b]")
        pairs.append((parts[0], parts[1]))
    return BPE(vocab, pairs, spec.get("unk_token"), spec.get("continuing_subword_prefix"),
               spec.get("end_of_word_suffix"), bool(spec.get("fuse_unk", False)),
               bool(spec.get("byte_fallback", False)), bool(spec.get("ignore_merges", False)))
