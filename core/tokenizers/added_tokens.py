"""Added (and special) tokens: matched in the text before the model sees it.

Follows tokenizers' AddedVocabulary: tokens with normalized=false are found in the raw text,
the others in the normalized remainder; leftmost-longest matching; single_word, lstrip and
rstrip as upstream; an added token's id is the model's id when the model already has it.
"""
from __future__ import annotations

import re

from .errors import TokenizerError
from .normalized import Piece
from .unicode_regex import is_whitespace, is_word_char as _is_word


class AddedVocabulary:
    def __init__(self, specs: list, model, normalizer, where="added_tokens"):
        self.by_content: dict[str, int] = {}
        self.by_id: dict[int, dict] = {}
        self.special: set[str] = set()
        order, top = [], None  # top: the largest id given so far (kept, not recomputed: linear in the tokens)
        for i, spec in enumerate(specs):
            if not isinstance(spec, dict) or not isinstance(spec.get("content"), str):
                raise TokenizerError(f"tokenizer.json {where}[{i}]: expected an object with a "
                                     f"string \"content\", got {str(spec)[:80]!r}")
            token = {"content": spec["content"], "single_word": bool(spec.get("single_word")),
                     "lstrip": bool(spec.get("lstrip")), "rstrip": bool(spec.get("rstrip")),
                     "normalized": bool(spec.get("normalized", not spec.get("special"))),
                     "special": bool(spec.get("special"))}
            if not token["content"] or self.by_id.get(self.by_content.get(token["content"])) == token:
                continue
            tid = self.by_content.get(token["content"], model.vocab.get(token["content"]))
            if tid is None:  # a new id: after the model's ids and after any added before
                size = len(model.vocab_r)
                tid = top + 1 if top is not None and (top >= size or size == 0) else size
            self.by_content[token["content"]] = tid
            top = tid if top is None or tid > top else top
            self.by_id[tid] = token
            if token["special"]:
                self.special.add(token["content"])
            order.append(token)
        self.raw = self._matcher([t for t in order if not t["normalized"]], None)
        self.normalized = self._matcher([t for t in order if t["normalized"]], normalizer)

    def _matcher(self, tokens, normalizer):
        """A Literals search finding the leftmost-longest of `tokens`, and pattern text -> token."""
        if not tokens:
            return None
        table = {}
        for t in tokens:
            text = t["content"]
            if normalizer is not None:
                piece = Piece.original(text)
                normalizer(piece)
                text = piece.text
            if text:
                table.setdefault(text, t)
        return (Literals(table), table) if table else None

    def _find(self, text: str, matcher) -> list[tuple[int, int, int | None]]:
        if matcher is None or not text:
            return [(0, len(text), None)]
        literals, table = matcher
        out, done = [], 0
        for start, stop, found in literals.finditer(text):
            token = table[found]
            if token["single_word"]:
                if (start > 0 and _is_word(text[start - 1])) or \
                        (stop < len(text) and _is_word(text[stop])):
                    continue
            if start < done:  # overlaps what an rstrip already took
                continue
            if token["lstrip"]:
                s = start
                while s > 0 and is_whitespace(text[s - 1]):
                    s -= 1
                start = max(s, done)
            if token["rstrip"]:
                while stop < len(text) and is_whitespace(text[stop]):
                    stop += 1
            if done < start:
                out.append((done, start, None))
            out.append((start, stop, self.by_content[token["content"]]))
            done = stop
        if done != len(text):
            out.append((done, len(text), None))
        return out

    def split(self, text: str, normalizer) -> list[tuple[Piece, int | None]]:
        """The input as pieces: (added-token piece, id) or (normalized text piece, None)."""
        out = []
        for s, e, tid in self._find(text, self.raw):
            piece = Piece.original(text[s:e], s)
            if tid is not None:
                out.append((piece, tid))
                continue
            if normalizer is not None:
                normalizer(piece)
            for ns, ne, ntid in self._find(piece.text, self.normalized):
                if ne > ns:
                    out.append((piece.slice(ns, ne), ntid))
        return out


class Literals:
    """Leftmost-longest search for many literal strings (what a regex alternation of them, longest first,
    finds; building that regex is quadratic-ish in the token count: 32k added tokens took seconds). A class of
    their first characters finds the candidate positions; at one, the token lengths starting with that
    character are tried longest first against a set."""

    def __init__(self, strings):
        self.strings = set(strings)
        lengths = {}
        for t in self.strings:
            lengths.setdefault(t[0], set()).add(len(t))
        self.lengths = {c: sorted(ls, reverse=True) for c, ls in lengths.items()}
        self.first = re.compile("[" + "".join(map(re.escape, sorted(self.lengths))) + "]")

    def finditer(self, text: str):
        """(start, stop, matched string) of each non-overlapping leftmost-longest match."""
        pos, strings = 0, self.strings
        while (m := self.first.search(text, pos)) is not None:
            i = m.start()
            for n in self.lengths[text[i]]:
                if text[i:i + n] in strings:
                    yield i, i + n, text[i:i + n]
                    pos = i + n
                    break
            else:
                pos = i + 1
