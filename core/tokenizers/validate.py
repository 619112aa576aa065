"""Load-time checks of a tokenizer.json for ember's Python runtime: truncation and padding fields are typed
and bounded (ember.limits), each component is built under its own name, and a sample text is run through
every stage, so a malformed file fails when it is loaded (naming the file and the field) rather than at the
first encode with a TypeError from deep inside the runtime."""
from __future__ import annotations

import re

from ..errors import EmberError, LimitError
from ..limits import budget
from .errors import TokenizerError

# What a broken component may raise from plain Python code; ember errors pass through unchanged.
RUNTIME_ERRORS = (TypeError, AttributeError, ValueError, KeyError, IndexError, RecursionError, MemoryError,
                  OverflowError, UnicodeError, ZeroDivisionError, re.error)

# Exercises normalizers, pre-tokenizers (spaces, digits, punctuation, CJK, emoji), byte fallback and decoders.
SAMPLE = "Hello, world! It's 2024: naïve café 日本語 👍🏽 x=1+2\n\ttabs  and  spaces "


def _int(v, where, field, lo=0):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TokenizerError(f"{where} {field}: expected an integer, got {v!r}"[:200])
    if v < lo:
        raise TokenizerError(f"{where} {field}: must be at least {lo}, got {v}")
    if v > budget.max_tokens:
        raise LimitError(where, field, v, budget.max_tokens, "max_tokens", " tokens")
    return v


def _choice(v, where, field, allowed):
    if v not in allowed:
        raise TokenizerError(f"{where} {field}: {v!r} is not one of {', '.join(allowed)}"[:300])
    return v


def check_truncation(spec, where: str):
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise TokenizerError(f"{where} truncation: expected an object or null, got {type(spec).__name__}")
    _int(spec.get("max_length"), where, "truncation.max_length")
    _int(spec.get("stride", 0), where, "truncation.stride")
    _choice(spec.get("strategy", "LongestFirst"), where, "truncation.strategy", ("LongestFirst", "OnlyFirst", "OnlySecond"))
    _choice(spec.get("direction", "Right"), where, "truncation.direction", ("Left", "Right"))
    return spec


def check_padding(spec, where: str):
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise TokenizerError(f"{where} padding: expected an object or null, got {type(spec).__name__}")
    strategy = spec.get("strategy", "BatchLongest")
    if isinstance(strategy, dict) and set(strategy) == {"Fixed"}:
        _int(strategy["Fixed"], where, "padding.strategy.Fixed")  # `Fixed: 1e9` would pad every text to 1e9
    elif strategy != "BatchLongest":
        raise TokenizerError(f"{where} padding.strategy: {strategy!r} is not \"BatchLongest\" or {{\"Fixed\": n}}"[:300])
    if spec.get("pad_to_multiple_of") is not None:
        _int(spec["pad_to_multiple_of"], where, "padding.pad_to_multiple_of", lo=1)
    _int(spec.get("pad_id", 0), where, "padding.pad_id")
    if spec.get("pad_type_id", 0) is not None:
        _int(spec.get("pad_type_id", 0), where, "padding.pad_type_id")
    if not isinstance(spec.get("pad_token", "[PAD]"), str):
        raise TokenizerError(f"{where} padding.pad_token: expected a string, got {spec['pad_token']!r}"[:200])
    _choice(spec.get("direction", "Right"), where, "padding.direction", ("Left", "Right"))
    return spec


def check_ids(vocab: dict, where: str, field: str):
    """Every id in a token -> id map is a non-negative integer (a string id would surface at decode)."""
    for token, tid in vocab.items():
        if type(tid) is not int or tid < 0:
            raise TokenizerError(f"{where} {field}: the id of {token!r} is {tid!r}, not a non-negative integer"[:300])


def build(where: str, field: str, make, *args):
    """make(*args), with a runtime error from a malformed component reported as `where field`."""
    try:
        return make(*args)
    except EmberError:
        raise
    except RUNTIME_ERRORS as exc:
        raise TokenizerError(f"{where} {field}: malformed ({type(exc).__name__}: {str(exc)[:200]})") from None


def probe(tok, where: str):
    """Run SAMPLE through every stage of a freshly built PythonTokenizer and decode what it gives; a stage
    that fails with a runtime error is named (its configuration is what is wrong: the text is ordinary).
    An ember error (an unsupported option, say) stops the probe: encode reports it when it is used."""
    from .normalized import Piece
    piece = Piece.original(SAMPLE)
    try:
        build(where, "normalizer", tok.normalizer, piece) if tok.normalizer else None
        words = build(where, "pre_tokenizer", tok.pre_tokenizer, [piece]) if tok.pre_tokenizer else [piece]
        for w in words:
            build(where, "model", lambda t: list(tok.model.tokenize(t)), w.text)
        enc = build(where, "post_processor / truncation / padding", tok.encode, SAMPLE)
        build(where, "decoder", tok.decode, enc.ids, False)
    except TokenizerError as e:
        if "malformed (" in str(e):
            raise


def check_for_native(config, where: str):
    """What the Rust `tokenizers` would accept but ember refuses: unbounded padding/truncation lengths and
    regexes Oniguruma (a backtracking engine) could take polynomial or exponential time on."""
    from .unicode_regex import check_backtracking
    if not isinstance(config, dict):
        return
    check_truncation(config.get("truncation"), where)
    check_padding(config.get("padding"), where)
    model = config.get("model")
    skip = {id(model.get(k)) for k in ("vocab", "merges")} if isinstance(model, dict) else set()
    stack = [config]
    while stack:  # iterative: the JSON nesting is the file's to choose
        node = stack.pop()
        if node.__class__ is dict:
            if isinstance(node.get("Regex"), str):
                check_backtracking(node["Regex"])
            stack.extend(v for v in node.values() if (v.__class__ is dict or v.__class__ is list) and id(v) not in skip)
        elif node.__class__ is list:
            stack.extend(v for v in node if v.__class__ is dict or v.__class__ is list)
