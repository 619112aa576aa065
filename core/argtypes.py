"""argparse types shared by the `ember` subcommands (and `ember train-llama`, which lives in the models layer):
a bad value is a usage error (exit 2) before any model loads."""
from __future__ import annotations

import argparse
import os


def _number(text: str, cast, what: str):
    try:
        v = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return v


def _at_least(cast, least, what: str, strict: bool = False):
    def parse(text: str):
        v = _number(text, cast, what)
        if v < least or (strict and v == least):
            raise argparse.ArgumentTypeError(f"must be {'greater than' if strict else 'at least'} {least}, got {v}")
        return v
    return parse


positive_int = _at_least(int, 1, "a positive integer")
non_negative_int = _at_least(int, 0, "an integer >= 0")
non_negative_float = _at_least(float, 0, "a number >= 0")
positive_float = _at_least(float, 0, "a number > 0", strict=True)


def unit_interval(text: str) -> float:
    v = _number(text, float, "a number between 0 and 1")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {v}")
    return v


def existing_file(text: str) -> str:
    """An input file that is missing fails before the model is loaded."""
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return text


def existing_folder(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such folder: {text}")
    return text


def writable_file(text: str) -> str:
    """An output file whose folder exists, so a long run does not fail only when it writes."""
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text}: folder {folder} does not exist")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"cannot write {text}: it is a folder")
    return text


def add_sampling_arguments(p, max_new_tokens: int, temperature: float, top_p: float):
    """The generation flags `ember llama` and `ember generate` share."""
    p.add_argument("-n", "--max-new-tokens", type=positive_int, default=max_new_tokens,
                   help="at most this many new tokens (also capped by the model's context length)")
    p.add_argument("--temperature", type=non_negative_float, default=temperature, help="0 = greedy")
    p.add_argument("--top-k", type=non_negative_int, default=0, help="0 = off")
    p.add_argument("--top-p", type=unit_interval, default=top_p)
    p.add_argument("--repetition-penalty", type=positive_float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
