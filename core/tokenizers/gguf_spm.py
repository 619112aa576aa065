"""The SentencePiece-style ("llama") vocabulary a GGUF file carries in `tokenizer.ggml.*`, tokenized exactly as
llama.cpp does (src/llama-vocab.cpp: llm_tokenizer_spm_session, tokenizer_st_partition, token_to_piece):

1. partition: user-defined tokens (type 4), and with special=True control/unknown ones too, are cut out of the
   text first, longest first, each occurrence becoming that token;
2. each remaining piece: a space prefix when `add_space_prefix` and the piece follows a token (or starts the
   text), spaces -> U+2581, then split into UTF-8 characters and repeatedly merge the adjacent pair whose
   concatenation is a vocabulary entry with the highest score (ties: the leftmost);
3. a final symbol that is not an entry (a character never merged) becomes its UTF-8 bytes' <0xXX> tokens
   (byte fallback).

Token types (llama_token_type): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.

    tok = SpmTokenizer.from_gguf_metadata(ember.io.gguf.metadata("gemma-3-270m-q4_k_m.gguf"), "gemma.gguf")
    tok.encode("Hello world", bos=True)   # [2, 9259, 1902]
"""
from __future__ import annotations

import codecs

import heapq
from array import array

from .errors import TokenizerError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"
MAX_TOKENS = 1 << 22  # a vocabulary larger than this (4M entries) is not a real one


class SpmTokenizer:
    def __init__(self, tokens: list[str], scores: list[float], types: list[int], bos_id: int | None = None,
                 eos_ids=(), add_bos: bool = True, add_space_prefix: bool = False, where: str = "vocabulary"):
        n = len(tokens)
        if not 0 < n <= MAX_TOKENS:
            raise TokenizerError(f"{where}: tokenizer.ggml.tokens has {n} entries (1..{MAX_TOKENS} allowed)")
        if len(scores) != n or len(types) != n:
            raise TokenizerError(f"{where}: tokenizer.ggml.scores ({len(scores)}) and token_type ({len(types)}) "
                                 f"must have one entry per token ({n})")
        for name, i in (("bos_token_id", bos_id), *(("eos_token_id", e) for e in eos_ids)):
            if i is not None and not 0 <= i < n:
                raise TokenizerError(f"{where}: tokenizer.ggml.{name} {i} is outside the vocabulary [0, {n})")
        # scores as float32 (llama.cpp's type) and types in arrays: 262k Python floats were 8 MB
        try:
            self.scores, self.types = array("f", scores), array("q", types)
        except (TypeError, OverflowError) as e:
            raise TokenizerError(f"{where}: tokenizer.ggml.scores must be numbers and token_type integers "
                                 f"within int64 ({e})") from None
        self.tokens = tokens if type(tokens) is list else list(tokens)  # (never written: the reader's list, shared)
        self.bos_id, self.eos_ids = bos_id, list(eos_ids)
        self.add_bos, self.add_space_prefix = add_bos, add_space_prefix
        self.lookup = {t: i for i, t in enumerate(self.tokens)}  # a repeated text maps to its last id, as llama.cpp
        self._bytes = [self.lookup.get(f"<0x{b:02X}>", self.lookup.get(chr(b))) for b in range(256)]
        # (longest first; one length keeps id order): the tokens the partition step cuts out
        # (an empty token text is never cut: it would match between every two characters)
        cut = [i for i, ty in enumerate(self.types)
               if ty in (CONTROL, USER_DEFINED, UNKNOWN) and self.tokens[i]]
        cut.sort(key=lambda i: -len(self.tokens[i].encode("utf-8")))
        self._user = [i for i in cut if self.types[i] == USER_DEFINED]
        self._special = cut

    @classmethod
    def from_gguf_metadata(cls, md: dict, where: str = "gguf") -> "SpmTokenizer":
        kind = md.get("tokenizer.ggml.model")
        if kind != "llama":
            raise TokenizerError(f"{where}: tokenizer.ggml.model is {kind!r}; this tokenizer reads 'llama' (SPM)")
        tokens = md.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise TokenizerError(f"{where}: tokenizer.ggml.tokens must be an array of strings")
        n = len(tokens)
        eos = md.get("tokenizer.ggml.eos_token_id")
        return cls(tokens, md.get("tokenizer.ggml.scores", [0.0] * n), md.get("tokenizer.ggml.token_type", [NORMAL] * n),
                   bos_id=md.get("tokenizer.ggml.bos_token_id"), eos_ids=[] if eos is None else [int(eos)],
                   add_bos=bool(md.get("tokenizer.ggml.add_bos_token", True)),
                   add_space_prefix=bool(md.get("tokenizer.ggml.add_space_prefix", True)), where=where)

    # ------------------------------------------------------------------ encode

    def encode(self, text: str, bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids of text; bos=None follows the file's add_bos_token. special=True also turns control
        tokens written in the text (e.g. '<start_of_turn>') into their ids, as llama.cpp's parse_special."""
        out = [self.bos_id] if (self.add_bos if bos is None else bos) and self.bos_id is not None else []
        prev_special = True
        for piece in partition(text, self.tokens, self._special if special else self._user):
            if isinstance(piece, int):
                out.append(piece)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                piece = " " + piece
            out.extend(self._spm(piece.replace(" ", SPACE)))
            prev_special = False
        return out

    def _spm(self, text: str) -> list[int]:
        """llm_tokenizer_spm_session.tokenize: score-ordered merges of adjacent symbols, then resegment."""
        sym = list(text)                                   # symbol texts; "" once merged away
        nxt = list(range(1, len(sym))) + [-1]
        prev = list(range(-1, len(sym) - 1))
        heap = []
        lookup, scores = self.lookup, self.scores

        def add(left, right):
            if left < 0 or right < 0:
                return
            s = sym[left] + sym[right]
            tid = lookup.get(s)
            if tid is None:
                return
            heapq.heappush(heap, (-scores[tid], left, right, len(s)))  # best score first, then leftmost

        for i in range(1, len(sym)):
            add(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if not sym[left] or not sym[right] or len(sym[left]) + len(sym[right]) != size:
                continue
            sym[left], sym[right] = sym[left] + sym[right], ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add(prev[left], left)
            add(left, nxt[left])
        out: list[int] = []
        i = 0 if sym else -1
        while i != -1:
            self._resegment(sym[i], out, text)
            i = nxt[i]
        return out

    def _resegment(self, s: str, out: list, text: str):
        # every merge forms a vocabulary entry, so a final symbol is one or a single character that is not
        # (llama.cpp's split along rev_merge never finds more to do): its UTF-8 bytes' tokens
        tid = self.lookup.get(s)
        if tid is not None:
            out.append(tid)
            return
        for b in s.encode("utf-8"):
            bt = self._bytes[b]
            if bt is None:
                raise TokenizerError(f"ember: the vocabulary has no byte token <0x{b:02X}> for {s!r} in {text[:40]!r}")
            out.append(bt)

    # ------------------------------------------------------------------ decode

    def piece(self, tid: int) -> bytes:
        """token_to_piece with special=False: control/unknown -> b'', user-defined as written, normal with
        U+2581 -> ' ', byte tokens -> their byte."""
        if not 0 <= tid < len(self.tokens):
            raise TokenizerError(f"ember: token id {tid} is outside the vocabulary [0, {len(self.tokens)})")
        ty, t = self.types[tid], self.tokens[tid]
        if ty in (CONTROL, UNKNOWN, UNUSED):
            return b""
        if ty == BYTE:
            return bytes([int(t[3:5], 16)])
        if ty == USER_DEFINED:
            return t.encode("utf-8")
        return t.replace(SPACE, " ").encode("utf-8")

    def token_bytes(self, tid: int) -> bytes | None:
        """The bytes a token adds to the text, or None for a control/unknown/unused token."""
        return None if self.types[tid] in (CONTROL, UNKNOWN, UNUSED) else self.piece(tid)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return b"".join(self.piece(int(i)) for i in ids).decode("utf-8", errors="replace")

    def decode_stream(self, skip_special_tokens: bool = True) -> "StreamDecoder":
        return StreamDecoder(self)

    def vocab_size(self) -> int:
        return len(self.tokens)



def partition(text: str, tokens: list[str], cut: list[int]) -> list:
    """tokenizer_st_partition: text -> [str | token id], each of `cut`'s tokens (longest first) cut out of the
    remaining text, every occurrence becoming its id."""
    parts: list = [text] if text else []
    for tid in cut:
        t = tokens[tid]
        if not any(isinstance(p, str) and t in p for p in parts):
            continue
        nxt = []
        for p in parts:
            if isinstance(p, int) or t not in p:
                nxt.append(p)
                continue
            for j, s in enumerate(p.split(t)):
                if j:
                    nxt.append(tid)
                if s:
                    nxt.append(s)
        parts = nxt
    return parts

class StreamDecoder:
    """.step(id) -> the text completed by this token, or None; an incomplete UTF-8 sequence is held back
    until its continuation bytes arrive, and bytes that can never form a character become U+FFFD at once
    (an invalid byte must not hold back everything after it)."""

    def __init__(self, tok: SpmTokenizer):
        self.tok = tok
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, tid: int) -> str | None:
        return self._utf8.decode(self.tok.piece(int(tid))) or None
