"""Tokenizer regexes in bounded time: which patterns Python's re may run (regex_cost.py), and the linear-time
matcher for the rest (regex_vm.py) against re itself on random patterns and texts."""
import random
import re
import time

import pytest

from ember.tokenizers import TokenizerError
from ember.tokenizers.regex_cost import cost, parse
from ember.tokenizers.regex_vm import LinearPattern
from ember.tokenizers.unicode_regex import compile_onig, translate

# the pre-tokenizer patterns of real models: each must stay on re (C speed)
REAL = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
             r"\s+(?!\S)|\s+",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "deepseek": r"[\r\n]|\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕ]+|"
                r"\s?[!-/:-~！-／：-～‘-‟　-。]+|\s+$|[一-龥ࠀ-一가-퟿]+|\p{N}+",
    "digits": r"\p{N}{1,3}",
    "whitespace": r"\w+|[^\w\s]+",
}
COSTLY = {"(a+)+$": "nested", "(a|a)*$": "nested", r"\w*" * 12 + "x": "degree 12", "(?:x*)*y": "nested",
          "a?" * 30 + "a" * 30: "factor 2^30", r"\w*\w*x": "degree 2", r"(\s*\w*)*\w": "nested"}


@pytest.mark.parametrize("name", list(REAL))
def test_real_patterns_run_on_re(name):
    assert isinstance(compile_onig(REAL[name]), re.Pattern), cost(parse(translate(REAL[name])))


@pytest.mark.parametrize("pattern", list(COSTLY))
def test_costly_patterns_run_on_the_linear_matcher(pattern):
    rx = compile_onig(pattern)
    assert isinstance(rx, LinearPattern)
    text = "a" * 20_000 + "!"  # re would not finish
    t0 = time.perf_counter()
    spans = [m.span() for m in rx.finditer(text)]
    assert time.perf_counter() - t0 < 30
    short = "aaaa!"  # where re finishes: the same spans
    assert [m.span() for m in rx.finditer(short)] == [m.span() for m in re.finditer(translate(pattern), short)]
    assert all(0 <= s <= e <= len(text) for s, e in spans)


@pytest.mark.parametrize("pattern, feature", [(r"(a+)+\1", "a backreference"), ("(?:a*)*(?<=ab)", "a lookaround"),
                                              (r"(?:a*)*(?=ab)", "a lookaround"), (r"\w*+\w*\w*x", "a possessive")])
def test_a_costly_pattern_the_matcher_cannot_run_is_refused(pattern, feature):
    with pytest.raises(TokenizerError, match=f"uses {feature}"):
        compile_onig(pattern)


# (\s, \w, \d become Unicode classes of hundreds of ranges, as \p{..} do: parsing them is most of the time)
ATOMS = ["a", "b", "c", "x", ".", "[ab]", "[^a]", r"\s", r"\w", r"\d", r"\W", "[a-c]", " ", "A", "[A-Z]", r"\b", "^",
         "$", r"\n", "é", "[^\n]", "[a-zé]"]


def _random_pattern(rng, depth=0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(ATOMS)
    if r < 0.55:
        return "".join(_random_pattern(rng, depth + 1) for _ in range(rng.randint(2, 4)))
    if r < 0.7:
        return "(?:" + "|".join(_random_pattern(rng, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    return "(?:" + _random_pattern(rng, depth + 1) + ")" + rng.choice(["*", "+", "?", "{1,3}", "{2}", "*?", "+?",
                                                                       "??", "{0,2}?"])


def _bounded_repeat_of_empty(tree) -> bool:
    """A counted repeat ({m,n}, n > 1) of a part that can match empty: the one place re's rule for empty
    iterations differs from a Pike VM's (Oniguruma's differs from both)."""
    from ember.tokenizers.regex_cost import C, END, seq
    for op, av in tree:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            if av[1] != C.MAXREPEAT and av[1] > 1 and seq(av[2], END, 0).nullable:
                return True
            if _bounded_repeat_of_empty(av[2]):
                return True
        elif op == C.SUBPATTERN and _bounded_repeat_of_empty(av[-1]):
            return True
        elif op == C.BRANCH and any(_bounded_repeat_of_empty(b) for b in av[1]):
            return True
    return False


def test_the_linear_matcher_finds_what_re_finds():
    rng, cases, compared = random.Random(36), 0, 0
    while cases < 800:
        p = _random_pattern(rng)
        if rng.random() < 0.15:
            p = "(?i)" + p
        if rng.random() < 0.1:
            p += rng.choice(["(?!b)", "(?=a)", r"(?!\S)", "(?<=a)"])
        t = translate(p)
        try:
            rx = re.compile(t)
        except re.error:
            continue
        cases += 1
        tree = parse(t)
        if _bounded_repeat_of_empty(tree):
            continue
        lp = LinearPattern(t, tree)
        for _ in range(5):
            s = "".join(rng.choice("aabcx AB1\né") for _ in range(rng.randint(0, 12)))
            assert [m.span() for m in lp.finditer(s)] == [m.span() for m in rx.finditer(s)], (p, s)
            compared += 1
    assert compared > 3000
