"""Text corpora for language-model training: text -> token ids (ember's tokenizers) -> fixed-length
blocks. Block i is ids[i*T : i*T + T + 1]: inputs are its first T ids, targets the last T, so consecutive
blocks share one id and every id past the first is a target exactly once per epoch."""
from __future__ import annotations

import os

import numpy as np

from .dataset import Dataset, IterableDataset


def encode_text(text: str, tokenizer, add_special_tokens: bool = False) -> np.ndarray:
    """Token ids (int64) of `text` under `tokenizer` (an ember Tokenizer or anything with
    encode(text).ids / encode(text) -> list)."""
    enc = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    return np.asarray(getattr(enc, "ids", enc), np.int64)


def read_text(paths, encoding: str = "utf-8") -> str:
    """One corpus from text files (a path or a list), joined by blank lines."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    parts = []
    for p in paths:
        with open(p, encoding=encoding) as f:
            parts.append(f.read())
    return "\n\n".join(parts)


class TokenBlocks(Dataset):
    """`ds[i]` = (inputs (T,), targets (T,)) int64 from a token stream packed into blocks of T + 1."""

    def __init__(self, ids, block_size: int):
        self.ids = np.asarray(ids, np.int64)
        self.block_size = int(block_size)
        if self.block_size < 1:
            raise ValueError(f"ember: block_size must be positive, got {block_size}")
        if len(self.ids) < self.block_size + 1:
            raise ValueError(f"ember: the corpus has {len(self.ids)} tokens, too few for one block of "
                             f"{self.block_size + 1}")

    @classmethod
    def from_text(cls, text: str, tokenizer, block_size: int):
        return cls(encode_text(text, tokenizer), block_size)

    def __len__(self):
        return (len(self.ids) - 1) // self.block_size

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f"ember: block {index} out of range for {len(self)} blocks")
        s = (index % len(self)) * self.block_size
        w = self.ids[s:s + self.block_size + 1]
        return w[:-1], w[1:]


class TokenStream(IterableDataset):
    """Streaming variant for corpora read piece by piece: tokenizes each text from `texts` (an iterable of
    strings, e.g. lines of a big file) and yields (inputs, targets) blocks as the ids accumulate."""

    def __init__(self, texts, tokenizer, block_size: int):
        self.texts, self.tokenizer, self.block_size = texts, tokenizer, int(block_size)

    def __iter__(self):
        buf = np.zeros(0, np.int64)
        T = self.block_size
        for text in self.texts:
            buf = np.concatenate([buf, encode_text(text, self.tokenizer)])
            while len(buf) >= T + 1:
                yield buf[:T], buf[1:T + 1]
                buf = buf[T:]
