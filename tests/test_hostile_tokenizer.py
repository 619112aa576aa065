"""Hostile tokenizer.json: a malformed file fails when it is loaded, with an ember error naming
the file and the field, in both runtimes; unbounded lengths are refused, and so are regexes a backtracking
engine takes super-linear time on in the native runtime (the Python runtime runs them in linear time)."""
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


def test_nested_quantifier_regex_is_refused_for_the_native_runtime():
    # the pattern takes seconds on 26 a's and a '!' in Oniguruma (doubling per character); (a|a)*$ (found by the
    # fuzzer) took 50 s on the same text. The Python runtime runs it in linear time (below)
    with pytest.raises(TokenizerError, match=re.escape("regex '(a+)+$': the group '(a+)+' repeats a repetition")):
        Tokenizer.from_str(config(pre_tokenizer=CATASTROPHIC), backend="native")


POLYNOMIAL = "\\w*" * 12 + "x"  # 12 \w* then x: n^12 steps per start on a word without an x


def test_polynomial_regex_is_refused_for_the_native_runtime():
    spec = {**CATASTROPHIC, "pattern": {"Regex": POLYNOMIAL}}
    with pytest.raises(TokenizerError, match="12 unbounded repetitions in a row"):
        Tokenizer.from_str(config(pre_tokenizer=spec), backend="native")


SLOW = ["(a+)+$", "(a|a)*$", POLYNOMIAL, "(?:x*)*y", "((ab)*)*c", "a?" * 30 + "a" * 30, "(?:a|aa)+b",
        "\\s*\\s*\\s*[\\r\\n]+"]


@pytest.mark.parametrize("pattern", SLOW)
def test_backtracking_patterns_run_in_linear_time_in_python(pattern):
    """Patterns a backtracking engine takes polynomial or exponential time on: ember's Python runtime matches
    them with its linear-time matcher, and gives what tokenizers (Oniguruma) gives where Oniguruma finishes."""
    import time
    spec = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    text = config(pre_tokenizer=spec, normalizer=None)
    ours, ref = Tokenizer.from_str(text, backend="python"), tokenizers.Tokenizer.from_str(text)
    for short in ("aaaa!", "ab ab abc", "a" * 12, "xxxy", "  x a", "aaab aab", ""):  # (no \n: Onig's $ is per line)
        assert ours.encode(short).ids == ref.encode(short).ids, (pattern, short)
    t0 = time.perf_counter()
    ours.encode("a" * 2000 + "!" + " " * 200 + "b" * 300)  # minutes to centuries for Oniguruma / re
    assert time.perf_counter() - t0 < 20


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


# ---------------------------------------------------------------- blow-ups at load

def test_chained_replace_normalizers_are_bounded_at_load():
    # each Replace doubles every "a": 40 of them would make the load-time probe's sample 2^40 times longer
    doubling = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    spec = {"type": "Sequence", "normalizers": [doubling] * 40}
    with pytest.raises(ember.LimitError, match=r"normalizer.normalizers\[\d+\] \(Replace\): normalized text of \d+ "
                                               r"characters: length is \d+ characters, over the limit") as e:
        Tokenizer.from_str(config(normalizer=spec), backend="python")
    assert e.value.setting == "max_normalized_growth"
    # a few doublings are within the budget and give what tokenizers gives
    text = config(normalizer={"type": "Sequence", "normalizers": [doubling] * 3})
    ours, ref = Tokenizer.from_str(text, backend="python"), tokenizers.Tokenizer.from_str(text)
    assert ours.encode("a ba ab").ids == ref.encode("a ba ab").ids


def _many_added(n: int) -> str:
    added = [{"id": 5 + i, "content": f"<t{i}>", "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": i % 3 == 0, "special": i % 2 == 0} for i in range(n)]
    # prefixes of one another: leftmost-longest must pick the longest at a position
    added += [{"id": 5 + n + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True} for i, c in enumerate(["<t1", "<t12>x", "ab", "abab"])]
    return config(added_tokens=BASE["added_tokens"] + added)


def test_many_added_tokens_load_in_linear_time_and_match_tokenizers():
    import time
    t0 = time.perf_counter()
    tok = Tokenizer.from_str(_many_added(100_000), backend="python")
    # before: the id of each new token took a max over all earlier ones, then a regex alternation of all of
    # them was compiled (32k: 10-12 s, 100k: over 60 s); now ~2 s
    assert time.perf_counter() - t0 < 30
    small = _many_added(2000)
    ours, ref = Tokenizer.from_str(small, backend="python"), tokenizers.Tokenizer.from_str(small)
    for text in ("a <t12>x <t1 <t12> b<t1999>a", "ababab <t3><t0>a", "<t12>xab <t", "no tokens here"):
        assert ours.encode(text).ids == ref.encode(text).ids, text
    assert tok.encode("a <t99999> b").ids == [2, 100_004, 3]


def test_an_empty_user_defined_gguf_token_is_never_cut():
    # an empty user-defined token (type 4) made encode(special=True) raise ValueError('empty separator');
    # the same vocabulary with that entry made a plain token (which no merge can form) is the reference
    from ember.tokenizers.gguf_spm import SpmTokenizer
    tokens = ["<unk>", "<s>", "</s>", "", "<|user|>", "\u2581a", "\u2581b", "a", "b", "\u2581"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3, 4, 4, 1, 1, 1, 1, 1] + [6] * 256
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": [0.0, 0, 0, 0, 0, -1, -2, -3, -4, -5] + [0.0] * 256,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1}
    tok = SpmTokenizer.from_gguf_metadata(md, "x.gguf")
    ref = SpmTokenizer.from_gguf_metadata({**md, "tokenizer.ggml.token_type": [2, 3, 3, 1] + types[4:]}, "x.gguf")
    for text in ("a b<|user|>ab", "", "<s>a</s>", "ba"):
        for special in (False, True):
            assert tok.encode(text, special=special) == ref.encode(text, special=special), (text, special)
    assert tok.encode("a<|user|>b", special=True)[2] == 4


@pytest.mark.parametrize("field, value", [("tokenizer.ggml.scores", ["high"] + [0.0] * 3),
                                          ("tokenizer.ggml.token_type", [1, 1, 2 ** 70, 1]),
                                          ("tokenizer.ggml.token_type", [1, "control", 1, 1])])
def test_gguf_vocabulary_scores_and_types_must_be_numbers(field, value):
    from ember.tokenizers.gguf_spm import SpmTokenizer
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "<s>", "a", "b"],
          "tokenizer.ggml.scores": [0.0] * 4, "tokenizer.ggml.token_type": [2, 3, 1, 1], field: value}
    with pytest.raises(TokenizerError, match="x.gguf: tokenizer.ggml.scores must be numbers"):
        SpmTokenizer.from_gguf_metadata(md, "x.gguf")
