"""Deterministic mutators: byte-level (flips, overwrites, truncation, insertion, deletion) and structure-aware
for JSON (replace/delete/duplicate a node with hostile values: huge numbers, wrong types, deep nesting)."""
from __future__ import annotations

import copy
import json
import re

SPECIAL_BYTES = [0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord('"'), ord("9"), ord("-"), ord("["), ord("]")]
HOSTILE_VALUES = [None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, -(2 ** 63), 10 ** 9, 1e308, -0.5, 1.5, "", "x",
                  "(a+)+$", "\\p{L}+" * 3, [], {}, [1, 2], {"a": 1}, "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
                  "𝔘" * 5, "9" * 40]


def mutate_bytes(rng, raw: bytes, lo: int = 0) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        if len(b) <= lo:
            break
        i, kind = rng.randrange(lo, len(b)), rng.random()
        if kind < 0.35:
            b[i] ^= 1 << rng.randrange(8)
        elif kind < 0.65:
            b[i] = rng.choice(SPECIAL_BYTES) if rng.random() < 0.5 else rng.randrange(256)
        elif kind < 0.72:
            del b[i:]
        elif kind < 0.86:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del b[i:i + rng.randint(1, 8)]
    return bytes(b)


def _nodes(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):
            yield from _nodes(v, path + (i,))


def mutate_json(rng, obj):
    """A copy of obj with 1-3 structural edits at random nodes."""
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        nodes = [p for p, _ in _nodes(obj) if p]
        if not nodes:
            break
        path = rng.choice(nodes)
        parent = obj
        for k in path[:-1]:
            parent = parent[k]
        key, kind = path[-1], rng.random()
        if kind < 0.55:
            parent[key] = copy.deepcopy(rng.choice(HOSTILE_VALUES))  # a copy: later edits must not reach the list
        elif kind < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif kind < 0.8:  # deep nesting, spliced in as text by dumps (json.dumps itself would recurse)
            parent[key] = f"{DEEP}{rng.choice([50, 2000, 100_000])}"
        elif kind < 0.9 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            parent[key] = parent[key] * rng.choice([-1, 10 ** 6, 2 ** 40]) + rng.choice([0, 1, -1])
        elif isinstance(parent[key], str):
            parent[key] = parent[key] * rng.choice([2, 1000]) if len(parent[key]) < 100 else ""
        else:
            parent[key] = copy.deepcopy(rng.choice([v for _, v in _nodes(obj)]))  # a node copied elsewhere
    return obj


DEEP = "\x00deep:"
_DEEP = re.compile(r'"\\u0000deep:(\d+)"')


def dumps(obj) -> bytes:
    """json.dumps, with each DEEP marker replaced by that many nested lists."""
    return _DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), json.dumps(obj)).encode()


def json_bytes(rng, obj) -> bytes:
    """Structure-aware most of the time, raw byte damage of the serialised text otherwise."""
    if rng.random() < 0.7:
        return dumps(mutate_json(rng, obj))
    return mutate_bytes(rng, json.dumps(obj).encode())
