"""Hostile tokenizer.json (issue #17): a malformed file fails when it is loaded, with an ember error naming
the file and the field, in both runtimes; unbounded lengths and catastrophic regexes are refused."""
import json
import re

import pytest

import ember
from ember.tokenizers import Tokenizer, TokenizerError
from ember.tokenizers.unicode_regex import nested_quantifier

tokenizers = pytest.importorskip("tokenizers")

BASE = {"version": "1.0", "truncation": None, "padding": None, "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
        "added_tokens": [{"id": 0, "content": "[PAD]", "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3, "##a": 4}}}
BACKENDS = ["python", "native"]


def config(**edits):
    c = json.loads(json.dumps(BASE))
    c.update(edits)
    return json.dumps(c)


def test_the_base_file_loads_and_matches_tokenizers():
    ours, ref = Tokenizer.from_str(config(), backend="python"), tokenizers.Tokenizer.from_str(config())
    assert ours.encode("a b aa ba").ids == ref.encode("a b aa ba").ids


PADDING = {"strategy": {"Fixed": 10 ** 9}, "direction": "Right", "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_fixed_1e9_is_a_limit_error_at_load(backend):
    with pytest.raises(ember.LimitError, match=r"padding.strategy.Fixed is 1000000000 tokens, over the limit") as e:
        Tokenizer.from_str(config(padding=PADDING), backend=backend)
    assert e.value.setting == "max_tokens"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("edit,message", [
    ({"truncation": {"max_length": "x"}}, "truncation.max_length: expected an integer, got 'x'"),
    ({"truncation": {"max_length": 8, "direction": "Up"}}, "truncation.direction: 'Up' is not one of Left, Right"),
    ({"padding": {**PADDING, "strategy": "Longest"}}, "padding.strategy: 'Longest' is not"),
    ({"padding": {**PADDING, "strategy": {"Fixed": -1}}}, "padding.strategy.Fixed: must be at least 0, got -1"),
    ({"padding": {**PADDING, "strategy": "BatchLongest", "pad_to_multiple_of": 0}},
     "padding.pad_to_multiple_of: must be at least 1"),
    ({"padding": {**PADDING, "strategy": "BatchLongest", "pad_token": 5}}, "padding.pad_token: expected a string"),
    ({"padding": [1]}, "padding: expected an object or null, got list"),
])
def test_truncation_and_padding_are_checked_at_load(backend, edit, message):
    with pytest.raises(TokenizerError, match=re.escape(message)):
        Tokenizer.from_str(config(**edit), backend=backend)


CATASTROPHIC = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_quantifier_regex_is_refused_at_load(backend):
    # the pattern takes seconds on 26 a's and a '!' in Python's re (doubling per character) and in Oniguruma;
    # (a|a)*$ (found by the fuzzer) took 50 s on the same text
    with pytest.raises(TokenizerError, match=re.escape("regex '(a+)+$': the group '(a+)+' repeats a repetition")):
        Tokenizer.from_str(config(pre_tokenizer=CATASTROPHIC), backend=backend)


@pytest.mark.parametrize("pattern,group", [
    ("(a+)+$", "(a+)+"), ("(?:x*y?)*z", "(?:x*y?)*"), ("((a)+)+", "((a)+)+"), (r"(?:\p{N}{1,3})+", r"(?:\p{N}{1,3})+"),
    ("(a{2,}){3}", "(a{2,}){3}"), ("([^)]+)+", "([^)]+)+"),
    # the pre-tokenizer patterns of real models have none
    (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", None),  # GPT-2
    (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
     None),  # Llama 3
    (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?", None),
    ("(a|a)*$", "(a|a)*"), ("(?:\\r\\n|\\n)+", "(?:\\r\\n|\\n)+"),
    ("(\\s+)?x", None), ("(ab){2}+", None), (r"(a\+)+", None), ("[(]a+[)]+", None), ("(?:'s|'t)?x", None),
])
def test_nested_quantifier_detection(pattern, group):
    assert nested_quantifier(pattern) == group


def test_overlong_regex_is_a_limit_error():
    spec = {**CATASTROPHIC, "pattern": {"Regex": "a" * 5000}}
    with pytest.raises(ember.LimitError, match="over the limit of 4096 characters"):
        Tokenizer.from_str(config(pre_tokenizer=spec), backend="python")


@pytest.mark.parametrize("field,value,message", [
    # each raised a TypeError/AttributeError/ValueError from inside the runtime, most only at encode time
    ("normalizer", {"type": "Sequence", "normalizers": 5}, "normalizer"),
    ("normalizer", {"type": "Replace", "pattern": {"String": 5}, "content": "x"}, "Replace"),
    ("normalizer", {"type": "Prepend", "prepend": None}, "normalizer"),
    ("pre_tokenizer", {"type": "Metaspace", "replacement": 7}, "pre_tokenizer"),
    ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [None, 3]}, "pre_tokenizer"),
    ("decoder", {"type": "Strip", "content": None, "start": "x", "stop": 0}, "decoder"),
    ("decoder", {"type": "Sequence", "decoders": {"a": 1}}, "decoder"),
    ("post_processor", {"type": "TemplateProcessing", "single": 5, "pair": [], "special_tokens": {}}, "post_processor"),
    ("added_tokens", [{"id": "x", "content": 5}], "added_tokens"),
])
def test_malformed_components_fail_at_load_naming_the_field(field, value, message):
    with pytest.raises(TokenizerError) as e:
        Tokenizer.from_str(config(**{field: value}), backend="python", source="bad/tokenizer.json")
    assert str(e.value).startswith("ember: ") and message in str(e.value), str(e.value)


def test_deep_json_is_a_tokenizer_error():
    text = config()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    for backend in BACKENDS:
        with pytest.raises(TokenizerError, match="JSON"):
            Tokenizer.from_str(text, backend=backend)


def test_native_runtime_errors_are_tokenizer_errors():
    """tokenizers raises bare Exceptions (and pyo3 PanicException, a BaseException) at encode: wrapped."""
    cfg = json.loads(config())
    cfg["model"]["unk_token"] = "[NOPE]"  # loads in tokenizers, fails at the first unknown word
    tok = Tokenizer.from_str(json.dumps(cfg), backend="native")
    with pytest.raises(TokenizerError, match=r"tokenizer.json: encode failed \(Exception: WordPiece error"):
        tok.encode("zzz")
