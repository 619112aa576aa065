"""The result of encoding one text (same attribute names as tokenizers.Encoding), with
truncation and padding as tokenizer.json configures them."""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import TokenizerError


@dataclass
class Encoding:
    ids: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    offsets: list[tuple[int, int]] = field(default_factory=list)  # character spans in the input
    type_ids: list[int] = field(default_factory=list)
    attention_mask: list[int] = field(default_factory=list)
    special_tokens_mask: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"Encoding(num_tokens={len(self.ids)}, ids={self.ids[:8]}{'...' if len(self) > 8 else ''})"

    def append(self, tid: int, token: str, offsets, type_id: int = 0, special: int = 0) -> None:
        self.ids.append(tid)
        self.tokens.append(token)
        self.offsets.append(offsets)
        self.type_ids.append(type_id)
        self.attention_mask.append(1)
        self.special_tokens_mask.append(special)

    def extend(self, other: Encoding) -> None:
        for name in _FIELDS:
            getattr(self, name).extend(getattr(other, name))

    def truncate(self, max_length: int, direction: str = "Right") -> None:
        if len(self.ids) <= max_length:
            return
        cut = slice(0, max_length) if direction == "Right" else slice(len(self.ids) - max_length, None)
        for name in _FIELDS:
            setattr(self, name, getattr(self, name)[cut])

    def pad(self, length: int, pad_id: int, pad_type_id: int, pad_token: str,
            direction: str = "Right") -> None:
        n = length - len(self.ids)
        if n <= 0:
            return
        fills = {"ids": pad_id, "tokens": pad_token, "offsets": (0, 0), "type_ids": pad_type_id,
                 "attention_mask": 0, "special_tokens_mask": 1}
        for name in _FIELDS:
            pad = [fills[name]] * n
            old = getattr(self, name)
            setattr(self, name, old + pad if direction == "Right" else pad + old)


_FIELDS = ("ids", "tokens", "offsets", "type_ids", "attention_mask", "special_tokens_mask")


def truncate_pair(first: Encoding, second: Encoding | None, params: dict, n_added: int) -> None:
    """tokenizers' truncate_encodings: LongestFirst / OnlyFirst / OnlySecond (no overflow kept)."""
    max_length = params["max_length"] - n_added
    if max_length < 0:
        raise TokenizerError(f"truncation max_length {params['max_length']} is smaller than the "
                             f"{n_added} special tokens the post-processor adds")
    if params.get("stride", 0):
        raise TokenizerError("truncation with a stride (overflowing windows) is not supported "
                             "by ember's tokenizer runtime")
    direction, strategy = params.get("direction", "Right"), params.get("strategy", "LongestFirst")
    total = len(first) + (len(second) if second is not None else 0)
    if total <= max_length:
        return
    if second is None or strategy == "OnlyFirst":
        target = first
    elif strategy == "OnlySecond":
        target = second
    elif strategy == "LongestFirst":
        n1, n2 = len(first), len(second)
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > max_length else max(n1, max_length - n1)
        if n1 + n2 > max_length:
            n1 = max_length // 2
            n2 = n1 + max_length % 2
        if swap:
            n1, n2 = n2, n1
        first.truncate(n1, direction)
        second.truncate(n2, direction)
        return
    else:
        raise TokenizerError(f"truncation strategy {strategy!r} is not LongestFirst, OnlyFirst "
                             f"or OnlySecond")
    other = total - len(target)
    if max_length - other < 0:
        raise TokenizerError(f"truncation: the other sequence alone ({other} tokens) exceeds "
                             f"max_length {max_length}")
    target.truncate(max_length - other, direction)


def pad_batch(encodings: list[Encoding], params: dict) -> None:
    strategy = params.get("strategy", "BatchLongest")
    if isinstance(strategy, dict) and "Fixed" in strategy:
        length = int(strategy["Fixed"])
    elif strategy == "BatchLongest":
        length = max((len(e) for e in encodings), default=0)
    else:
        raise TokenizerError(f"padding strategy {strategy!r} is not BatchLongest or {{Fixed: n}}")
    multiple = params.get("pad_to_multiple_of")
    if multiple and length % multiple:
        length += multiple - length % multiple
    for e in encodings:
        e.pad(length, params.get("pad_id", 0), params.get("pad_type_id", 0),
              params.get("pad_token", "[PAD]"), params.get("direction", "Right"))
