"""llama2.c's tokenizer.bin and its SentencePiece-style encode/decode (karpathy/llama2.c run.c).

File: int32 max_token_length, then per token: float32 score, int32 length, the UTF-8 bytes.
Ids 0, 1, 2 are <unk>, <s> (BOS), </s> (EOS); ids 3..258 are the byte tokens <0x00>..<0xFF>.
"""
from __future__ import annotations

import heapq
import os
import struct

from .errors import TokenizerError

BOS, EOS = 1, 2
BYTE_OFFSET = 3  # id of <0x00>


class Llama2cTokenizer:
    def __init__(self, pieces: list[bytes], scores: list[float], max_token_length: int):
        self.pieces, self.scores, self.max_token_length = pieces, scores, max_token_length
        self.lookup: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            self.lookup.setdefault(p, i)
        if b" " not in self.lookup:
            raise TokenizerError("tokenizer.bin: the vocabulary has no ' ' piece, which llama2.c's "
                                 "encode needs for its dummy prefix")

    @classmethod
    def from_bytes(cls, data: bytes, vocab_size: int | None = None,
                   source: str = "tokenizer.bin") -> Llama2cTokenizer:
        """Read all tokens (or the first `vocab_size`, which run.c takes from the model)."""
        if len(data) < 4:
            raise TokenizerError(f"{source}: {len(data)} bytes, too short for the header")
        (max_len,) = struct.unpack_from("<i", data, 0)
        pos, pieces, scores = 4, [], []
        while pos < len(data) and (vocab_size is None or len(pieces) < vocab_size):
            if pos + 8 > len(data):
                raise TokenizerError(f"{source}: truncated at token {len(pieces)} (byte {pos})")
            score, n = struct.unpack_from("<fi", data, pos)
            pos += 8
            if n < 0 or pos + n > len(data):
                raise TokenizerError(f"{source}: token {len(pieces)} claims {n} bytes at byte "
                                     f"{pos}, past the end ({len(data)})")
            pieces.append(bytes(data[pos:pos + n]))
            scores.append(score)
            pos += n
        if vocab_size is not None and len(pieces) < vocab_size:
            raise TokenizerError(f"{source}: holds {len(pieces)} tokens, expected {vocab_size}")
        if len(pieces) < BYTE_OFFSET + 256:
            raise TokenizerError(f"{source}: {len(pieces)} tokens; llama2.c needs at least 259 "
                                 f"(<unk>, <s>, </s> and 256 byte tokens)")
        return cls(pieces, scores, max_len)

    @classmethod
    def from_file(cls, path, vocab_size: int | None = None) -> Llama2cTokenizer:
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(), vocab_size, os.fspath(path))

    def get_vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_token(self, tid: int) -> str:
        return self.pieces[tid].decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ encode

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """run.c's encode: dummy-prefix ' ', one token per code point (byte tokens when a
        code point is missing), then repeatedly merge the adjacent pair whose concatenation
        is the best-scoring piece (leftmost on ties) - with a heap instead of rescans."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode: text must be a str, got {type(text).__name__}")
        ids = [BOS] if bos else []
        if text:
            ids.append(self.lookup[b" "])
            for i, c in enumerate(text):
                try:
                    raw = c.encode("utf-8")
                except UnicodeEncodeError:
                    raise TokenizerError(f"encode: text holds a lone surrogate {c!r} at character "
                                         f"{i}, which is not valid Unicode text") from None
                tid = self.lookup.get(raw)
                ids.extend([tid] if tid is not None else [b + BYTE_OFFSET for b in raw])
        ids = self._merge(ids)  # BOS takes part, as in run.c (its piece "\n<s>\n" never merges)
        return ids + [EOS] if eos else ids

    def _merge(self, ids: list[int]) -> list[int]:
        n = len(ids)
        if n < 2:
            return ids
        pieces, lookup, scores = self.pieces, self.lookup, self.scores
        nxt, prev = list(range(1, n + 1)), list(range(-1, n - 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []

        def push(pos: int) -> None:
            right = nxt[pos]
            tid = lookup.get(pieces[ids[pos]] + pieces[ids[right]])
            if tid is not None and scores[tid] > -1e10:  # run.c starts from best_score = -1e10
                heapq.heappush(heap, (-scores[tid], pos, ids[pos], ids[right], tid))

        for pos in range(n - 1):
            push(pos)
        while heap:
            _, pos, left, right_id, tid = heapq.heappop(heap)
            right = nxt[pos]
            if not alive[pos] or right == -1 or ids[pos] != left or ids[right] != right_id:
                continue  # stale: one side was merged since this pair was queued
            ids[pos] = tid
            alive[right] = False
            nxt[pos] = nxt[right]
            if nxt[pos] != -1:
                prev[nxt[pos]] = pos
                push(pos)
            if prev[pos] != -1:
                push(prev[pos])
        return [ids[i] for i in range(n) if alive[i]]

    # ------------------------------------------------------------------ decode

    def piece_bytes(self, prev_id: int, tid: int) -> bytes:
        """run.c's decode of one token: a leading space is dropped after BOS, and <0xXX>
        pieces become their byte."""
        if not 0 <= tid < len(self.pieces):
            raise TokenizerError(f"decode: id {tid} is out of range (vocabulary size "
                                 f"{len(self.pieces)})")
        piece = self.pieces[tid]
        if prev_id == BOS and piece.startswith(b" "):
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            try:
                return bytes([int(piece[3:5], 16)])
            except ValueError:
                pass
        return piece

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        out, prev = bytearray(), None
        for tid in ids:
            tid = int(tid)
            if not (skip_special_tokens and tid in (BOS, EOS)):
                out += self.piece_bytes(prev, tid)
            prev = tid
        return out.decode("utf-8", errors="replace")

    def decode_stream(self, skip_special_tokens: bool = True):
        from .tokenizer import DecodeStream
        return DecodeStream(self, skip_special_tokens)
