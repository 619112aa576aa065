"""Grammars for constrained decoding: a JSON schema, any JSON object, a list of choices or a regex compiled to a
DFA over UTF-8 bytes, then to token masks over a model's vocabulary; generate() samples only the tokens a mask
allows, so the text always matches (a JSON schema's output always parses and validates).

    g = ember.grammar.from_response_format({"type": "json_schema", "json_schema": {"schema": schema}})
    reply = engine.reply(messages, constraint=g.constraint(tokenizer))

regex.py (pattern -> tree over code points), schema.py (JSON Schema -> tree), automaton.py (tree -> byte DFA,
bounded by budget.grammar_states and budget.grammar_seconds), mask.py (per-state token masks; Constraint). What
cannot be compiled is a GrammarError naming the keyword or construct.
"""
from __future__ import annotations

import functools
import json

from .automaton import DFA, compile_dfa
from .errors import GrammarError
from .mask import Constraint, TokenMasks, Vocabulary
from .regex import alt, literal, parse
from .schema import json_object_tree, schema_tree

MAX_SCHEMA_CHARS = 256 << 10
MAX_CHOICES = 4096


class Grammar:
    """A compiled grammar: its DFA, and its token masks per vocabulary (made on first use)."""

    def __init__(self, dfa: DFA, description: str):
        self.dfa, self.description = dfa, description
        self._masks: dict[int, TokenMasks] = {}

    def constraint(self, tokenizer) -> Constraint:
        """A fresh Constraint for one reply with this tokenizer's vocabulary."""
        vocab = Vocabulary.of(tokenizer)
        masks = self._masks.get(id(vocab))
        if masks is None or masks.vocab is not vocab:
            masks = self._masks[id(vocab)] = TokenMasks(self.dfa, vocab)
        return Constraint(masks, self.description)

    def matches(self, text: str) -> bool:
        return self.dfa.matches(text.encode("utf-8"))


def _compile(tree, description) -> Grammar:
    from ember.limits import budget
    return Grammar(compile_dfa(tree, budget.grammar_states, budget.grammar_seconds), description)


@functools.lru_cache(maxsize=32)
def _cached(kind: str, key: str) -> Grammar:
    if kind == "regex":
        return _compile(parse(key), "regex")
    if kind == "choices":
        return _compile(alt(*[literal(c) for c in json.loads(key)]), "choices")
    if kind == "json_object":
        return _compile(json_object_tree(), "JSON object")
    return _compile(schema_tree(json.loads(key)), "JSON schema")


def compile_regex(pattern: str) -> Grammar:
    if not isinstance(pattern, str) or len(pattern) > MAX_SCHEMA_CHARS:
        raise GrammarError("ember: a regex must be a string of at most 256 KiB")
    return _cached("regex", pattern)


def compile_choices(choices) -> Grammar:
    if not isinstance(choices, (list, tuple)) or not choices or len(choices) > MAX_CHOICES or \
            not all(isinstance(c, str) and c for c in choices):
        raise GrammarError(f"ember: choices must be a list of 1..{MAX_CHOICES} non-empty strings")
    return _cached("choices", json.dumps(list(choices)))


def compile_json_schema(schema) -> Grammar:
    try:
        key = json.dumps(schema)  # property order matters: it is the order written
    except (TypeError, ValueError) as e:
        raise GrammarError(f"ember: the JSON schema is not JSON ({e})") from None
    if len(key) > MAX_SCHEMA_CHARS:
        raise GrammarError(f"ember: the JSON schema has {len(key):,} characters (at most {MAX_SCHEMA_CHARS:,})")
    return _cached("schema", key)


def compile_json_object() -> Grammar:
    return _cached("json_object", "")


def from_response_format(rf) -> Grammar | None:
    """OpenAI's response_format: {"type": "text"} (None), {"type": "json_object"}, or {"type": "json_schema",
    "json_schema": {"name": ..., "schema": {...}, "strict": ...}}."""
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise GrammarError("ember: response_format must be an object")
    kind = rf.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return compile_json_object()
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or "schema" not in js:
            raise GrammarError("ember: response_format json_schema needs {'json_schema': {'schema': {...}}}")
        return compile_json_schema(js["schema"])
    raise GrammarError(f"ember: response_format type {kind!r} is not one of text, json_object, json_schema")


__all__ = ["Constraint", "Grammar", "GrammarError", "Vocabulary", "compile_choices", "compile_json_object",
           "compile_json_schema", "compile_regex", "from_response_format"]
