"""JSON numbers parsed bit-for-bit like the Rust `tokenizers` package parses them."""
import re

_NUMBER = re.compile(r"(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$")
_U64_MAX = 2**64 - 1


def serde_json_float(text: str) -> float:
    """A JSON number read the way serde_json (without float_roundtrip) reads it, which is what
    `tokenizers` does: the digits as a u64 rounded to f64, then one multiply/divide by 10^k.
    With 17 significant digits that double rounding can land one ulp away from Python's exact
    parse, and Unigram's Viterbi sums then break near-ties differently."""
    sign, whole, frac, exp = _NUMBER.match(text).groups()
    significand, exponent, overflow = 0, int(exp or 0), False
    for d in whole:
        if not overflow and significand * 10 + int(d) <= _U64_MAX:
            significand = significand * 10 + int(d)
        else:  # serde_json keeps counting integer digits into the exponent
            overflow, exponent = True, exponent + 1
    for d in frac or "":
        if overflow or significand * 10 + int(d) > _U64_MAX:
            break  # ... and drops further fraction digits
        significand, exponent = significand * 10 + int(d), exponent - 1
    value = float(significand)
    while value != 0.0:
        if abs(exponent) <= 308:
            value = value * float(f"1e{exponent}") if exponent >= 0 else value / float(f"1e{-exponent}")
            break
        if exponent > 0:
            return float("-inf") if sign else float("inf")
        value, exponent = value / 1e308, exponent + 308
    return -value if sign else value
