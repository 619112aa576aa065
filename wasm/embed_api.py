"""The worker's semantic-search side: load a sentence-transformers folder (all-MiniLM-L6-v2) from Pyodide's
file system, embed texts into unit vectors, split a document into passages. web/worker.js reaches it
through worker_api.handle("embed", ...); ember.js exposes it as `embed(texts) -> Float32Array[]`.

Vectors travel back as one little-endian float32 buffer (N * dim) plus dim: one copy, no per-element
conversion into JS numbers."""
from __future__ import annotations

import json
import os
import re

import numpy as np

MAX_TEXTS = 4096          # one request; the page embeds a document's passages in batches below this
MAX_CHARS = 100_000       # per text: longer ones are refused (the model reads 256 tokens anyway)
_ENCODER: dict = {}


def _unflatten(folder: str) -> list[str]:
    """worker.js writes flat file names (1_Pooling/config.json arrives as 1_Pooling_config.json): put each module
    config modules.json names back where SentenceEncoder reads it; -> the folders made (removed after loading)."""
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


def load(folder: str, device: str = "cpu") -> dict:
    from ember.models.bert.sentence import SentenceEncoder
    _ENCODER.clear()
    made = _unflatten(folder)
    try:
        enc = SentenceEncoder(folder, device=device)
    finally:  # the worker frees the folder's files after loading; leave it as flat as it wrote it
        for d in made:
            os.replace(os.path.join(d, "config.json"), f"{d}_config.json")
            os.rmdir(d)
    _ENCODER["enc"] = enc
    params = list(enc.model.parameters())
    return {"tool": "embed", "device": device, "parameters": int(sum(p.numel() for p in params)),
            "bytes": int(sum(p.numel() * p.dtype.itemsize for p in params)), "dim": int(enc.model.config.dim)}


def embed(texts) -> dict:
    """texts: a list of str -> {"dim", "count", "vectors": bytes of (count, dim) float32}."""
    if "enc" not in _ENCODER:
        raise ValueError("ember: no embedding model loaded yet; load one first")
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts or len(texts) > MAX_TEXTS or not all(isinstance(t, str) and len(t) <= MAX_CHARS for t in texts):
        raise ValueError(f"ember: embed takes 1 to {MAX_TEXTS} strings of at most {MAX_CHARS} characters")
    v = _ENCODER["enc"].encode(texts)
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
