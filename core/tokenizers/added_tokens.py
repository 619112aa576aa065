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
        order = []
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
                top = max(self.by_content.values(), default=None)
                size = len(model.vocab_r)
                tid = top + 1 if top is not None and (top >= size or size == 0) else size
            self.by_content[token["content"]] = tid
            self.by_id[tid] = token
            if token["special"]:
                self.special.add(token["content"])
            order.append(token)
        self.raw = self._matcher([t for t in order if not t["normalized"]], None)
        self.normalized = self._matcher([t for t in order if t["normalized"]], normalizer)

    def _matcher(self, tokens, normalizer):
        """A regex finding the leftmost-longest of `tokens`, and pattern text -> token."""
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
        alternatives = sorted(table, key=len, reverse=True)  # longest first at one position
        return re.compile("|".join(map(re.escape, alternatives))), table

    def _find(self, text: str, matcher) -> list[tuple[int, int, int | None]]:
        if matcher is None or not text:
            return [(0, len(text), None)]
        regex, table = matcher
        out, done = [], 0
        for m in regex.finditer(text):
            start, stop = m.span()
            token = table[m.group()]
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
