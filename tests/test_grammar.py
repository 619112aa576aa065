"""ember.grammar without a model: regex DFAs against Python's re, integer ranges exhaustively, JSON schemas by
sampling texts from their automata (every sampled text must parse and validate with `jsonschema`), token masks
against a brute-force walk of every token, constraints over SmolLM2's real vocabulary with random logits, and the
errors and bounds of what cannot be compiled."""
from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from ember.grammar import (GrammarError, compile_choices, compile_json_object, compile_json_schema, compile_regex,
                           from_response_format)
from ember.grammar.automaton import compile_dfa
from ember.grammar.mask import TokenMasks, Vocabulary
from ember.grammar.regex import parse
from ember.grammar.schema import integer_range
from json_schemas import SCHEMAS

jsonschema = pytest.importorskip("jsonschema")

PATTERNS = [r"[a-z]+@[a-z]+\.(com|org)", r"\d{3}-\d{4}", r"(ab|cd)*e?", r"[^abc]{2,4}", r"héllo|wörld|日本",
            r"\w+\s\w+", r".{3}", r"[A-Z][a-z]{1,5}( [A-Z][a-z]{1,5})?", r"^x+$", r"\D\S\W", r"a|b|", r"(?:x|y){2}z*",
            r"[\d\-]+", r"\u00e9+\x41", r"[^\n]{0,2}", r"(?P<name>q)+?", r"[😀-😂]{1,2}"]
ALPHABET = "abcdeé日本@.-_ 0123456789xyzqABCZ\t\n٣wörld😀😁"


def sample(dfa, rng, max_len=300):
    """A random text the DFA accepts: random live transitions, stopping at accepting states now and then; past
    max_len bytes the walk heads for the nearest accepting state."""
    live = dfa.live()
    n = dfa.n_states
    dist = np.where(dfa.accept, 0, 10 ** 9)  # bytes to the nearest accepting state
    for _ in range(n):
        nxt = np.minimum(dist, 1 + dist[dfa.table].min(axis=1))
        nxt[0] = 10 ** 9
        if (nxt == dist).all():
            break
        dist = nxt
    byte_of = {}
    for b in range(256):
        byte_of.setdefault(int(dfa.classes[b]), []).append(b)
    s, out = dfa.start, bytearray()
    while True:
        if dfa.accept[s] and (rng.random() < 0.15 or len(out) > max_len):
            return bytes(out)
        moves = [(k, int(t)) for k, t in enumerate(dfa.table[s]) if t and live[t]]
        if not moves:
            return bytes(out)
        if len(out) > max_len:
            moves = [min(moves, key=lambda m: dist[m[1]])]
        k, s = rng.choice(moves)
        out.append(rng.choice(byte_of[k]))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_accepts_only_what_re_matches(pattern):
    dfa = compile_dfa(parse(pattern), 20000, 20)
    rx, rng = re.compile(pattern), random.Random(0)
    for _ in range(2000):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))
        if dfa.matches(s.encode()):
            assert rx.fullmatch(s), (pattern, s)
    for _ in range(200):  # texts drawn from the automaton itself
        text = sample(dfa, rng).decode("utf-8")
        assert rx.fullmatch(text), (pattern, text)
    for s in ("abc@def.com", "123-4567", "ababe", "xy", "héllo", "ab cd", "a\tb", "Abc Def", "xxx", "a|b"):
        if rx.fullmatch(s) and not re.search(r"\\[dwsDWS]|\.|\[\^", pattern):
            assert dfa.matches(s.encode()), (pattern, s)  # no narrowing in these patterns: re's language exactly


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 9), (7, 123), (-45, 17), (-1000, -3), (99, 1001), (None, -20),
                                   (-5, None), (1900, 2100), (0, None)])
def test_integer_ranges_exactly(lo, hi):
    dfa = compile_dfa(integer_range(lo, hi), 20000, 20)
    for n in range(-1200, 1200):
        want = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert dfa.matches(str(n).encode()) == want, (lo, hi, n)
    for bad in ("007", "-0", "+1", "1.0", "", "-"):
        assert not dfa.matches(bad.encode())


@pytest.mark.parametrize("name,schema,prompt", SCHEMAS, ids=[s[0] for s in SCHEMAS])
def test_every_text_a_schema_accepts_validates(name, schema, prompt):
    g = compile_json_schema(schema)
    rng = random.Random(1)
    for _ in range(150):
        text = sample(g.dfa, rng).decode("utf-8")
        jsonschema.validate(json.loads(text), schema)


def test_json_object_mode_gives_objects():
    g, rng = compile_json_object(), random.Random(2)
    for _ in range(100):
        assert isinstance(json.loads(sample(g.dfa, rng).decode("utf-8")), dict)
    assert g.matches('{"a": [1, {"b": null}], "c": "d"}') and not g.matches("[1]") and not g.matches("{'a': 1}")


def test_response_format_shapes():
    assert from_response_format(None) is None and from_response_format({"type": "text"}) is None
    g = from_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMAS[0][1]}})
    assert g.matches('{"name": "Al", "age": 3}') and not g.matches('{"name": "Al"}')
    with pytest.raises(GrammarError, match="response_format type 'yaml'"):
        from_response_format({"type": "yaml"})
    with pytest.raises(GrammarError, match="json_schema"):
        from_response_format({"type": "json_schema"})


@pytest.mark.parametrize("schema,match", [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "'uniqueItems'"),
    ({"not": {"type": "string"}}, "'not'"),
    ({"type": "object", "properties": {"a": {"if": {}, "then": {}}}}, "/properties/a: the keyword 'if'"),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
     "recursive"),
    ({"$ref": "#/$defs/missing"}, "points nowhere"),
    ({"$ref": "https://example.com/schema.json"}, "only local references"),
    ({"type": "number", "minimum": 0.5}, "fractional bounds"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no integer lies"),
    ({"type": "teapot"}, "unknown type 'teapot'"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, r"required \['b'\]"),
    ({"type": "string", "pattern": "(a)\\1"}, "backreferences"),
    ({"type": "string", "pattern": "(?=a)a"}, "lookarounds"),
    ({"type": "array", "maxItems": 1000}, "maxItems past"),
    ({"type": "object", "properties": {"a": {"enum": []}}}, "enum must be a non-empty list"),
])
def test_schemas_it_cannot_compile_are_clear_errors(schema, match):
    with pytest.raises(GrammarError, match=match):
        compile_json_schema(schema)


def test_compile_is_bounded():
    from ember.limits import budget
    saved = budget.grammar_states
    budget.grammar_states = 200
    try:
        with pytest.raises(GrammarError, match="grammar_states"):
            compile_regex("[a-z]{50}[0-9]{50}x" * 3)
    finally:
        budget.grammar_states = saved
    deep = {"type": "integer"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarError, match="nested deeper"):
        compile_json_schema(deep)
    with pytest.raises(GrammarError, match="choices"):
        compile_choices([])


def test_token_masks_equal_a_brute_force_walk():
    rng = random.Random(3)
    vocab_bytes = [None, b""] + [bytes(rng.choice(b'{}[]":,0123456789abc \\') for _ in range(rng.randint(1, 5)))
                                 for _ in range(400)] + ["é".encode(), "é".encode()[:1], "é".encode()[1:]]
    vocab = Vocabulary(vocab_bytes)
    g = compile_json_schema(SCHEMAS[0][1])
    masks = TokenMasks(g.dfa, vocab)
    live = g.dfa.live()
    for state in range(1, g.dfa.n_states):
        if not live[state]:
            continue
        want = np.zeros(len(vocab_bytes), bool)
        for t, b in enumerate(vocab_bytes):
            if b:
                s = g.dfa.walk(state, b)
                want[t] = s != 0 and live[s]
        assert (masks.allowed(state) == want).all(), state


def test_constraint_over_smollm2_vocabulary_with_random_logits():
    """Sampling under the masks from random logits (no model): every text ends complete and validates."""
    from smollm2_assets import smollm2_gguf
    from ember.io.gguf import metadata
    from ember.tokenizers.gguf_bpe import BpeTokenizer
    tok = BpeTokenizer.from_gguf_metadata(metadata(smollm2_gguf()), "smollm2")
    rng = np.random.default_rng(0)
    for name, schema, _ in SCHEMAS[:8]:
        c = compile_json_schema(schema).constraint(tok)
        ids = []
        for _ in range(400):
            allowed = c.allowed(tok.vocab_size())
            if c.accepting() and (not allowed.any() or rng.random() < 0.3):
                break
            logits = np.where(allowed, rng.standard_normal(allowed.shape), -np.inf)
            t = int(np.argmax(logits))
            c.advance(t)
            ids.append(t)
        text = tok.decode(ids)
        assert text == c.text()
        jsonschema.validate(json.loads(text), schema)
