"""Texts -> vectors over a dataset: `text` -> `embedding` (float32 (dim,) per row; a failed row is NaN).

Which model embeds is a family in a small registry: `register_embedder(name, load)` where
`load(source, device)` returns `embed(texts: list[str]) -> (n, dim) float32`. The family is the
`family=` argument, else the source's config.json `model_type`. Built in:

- "bert", "roberta", "distilbert": a sentence-transformers folder (ember.models.bert.sentence.SentenceEncoder: its
  pooling and normalization), e.g. all-MiniLM-L6-v2 (`ember.models.bert.fetch.fetch_minilm()`); the real
  sentence embeddings `ember embed` gives.
- "llama": mean of a Llama's input token embeddings (its `embed_tokens` rows) over the tokens of each text,
  L2-normalized: a bag-of-tokens vector, the simplest use of a model ember ships (the demo Llama, the
  default: it needs no download).

`embed_fn=` takes any callable with the `embed` signature instead, for a model of your own.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .batch import BatchMapper, failure

EMBEDDERS: dict = {}  # family -> load(source, device) -> embed(texts) -> (n, dim) float32


def register_embedder(family: str, load) -> None:
    EMBEDDERS[family] = load


def family_of(source) -> str | None:
    """config.json's model_type for a local folder (or a file beside one), else None."""
    if source is None:
        return None
    path = Path(os.fspath(source))
    cfg = (path if path.is_dir() else path.parent) / "config.json"
    if cfg.is_file():
        return json.loads(cfg.read_text(encoding="utf-8")).get("model_type")
    return None


def _load_llama_tokens(source, device):
    import ember
    from ember.models.llama.load import load_llama
    model, tok = load_llama(None if source is None else os.fspath(source), device=device)
    table = model.model.embed_tokens.weight                                        # (vocab_size, dim)

    def embed(texts):
        out = []
        for text in texts:
            ids = tok.encode(str(text), bos=False)
            if not ids:
                raise ValueError("ember: the text has no tokens to embed")
            with ember.no_grad():
                v = table.index_select(0, ember.tensor(ids)).float().mean(0)      # (dim,)
                out.append((v / v.norm().clamp(min=1e-12)).numpy())
        return np.stack(out).astype(np.float32)                                    # (n, dim)
    return embed


register_embedder("llama", _load_llama_tokens)


def _load_sentence_encoder(source, device):
    from ember.models.bert.fetch import fetch_minilm
    from ember.models.bert.sentence import SentenceEncoder
    return SentenceEncoder(fetch_minilm() if source is None else os.fspath(source), device=device).encode


for _family in ("bert", "roberta", "distilbert"):
    register_embedder(_family, _load_sentence_encoder)


class Embedder(BatchMapper):
    inputs = ("text",)
    outputs = {"embedding": None}

    def __init__(self, model=None, device: str = "cpu", family: str | None = None, embed_fn=None):
        """model: the family's source (folder, file, URL, hub id; None: the family's default, for "llama"
        the bundled demo) or an ObjectRef from Embedder.share(); family: a registered name (default:
        the folder's model_type, else "llama"); embed_fn: a ready `embed(texts) -> (n, dim)` instead."""
        self.family, self.embed_fn = family, embed_fn
        super().__init__(model, device)

    @classmethod
    def local_path(cls, model):
        if model is None:
            from ember.models.llama.load import DEMO_DIR
            return DEMO_DIR
        return model

    def load(self, model):
        if self.embed_fn is not None:
            self.embed = self.embed_fn
            return
        family = self.family or family_of(model) or "llama"
        if family not in EMBEDDERS:
            raise ValueError(f"ember: no embedder registered for family {family!r} (registered: "
                             f"{', '.join(sorted(EMBEDDERS))}); ember.ray.register_embedder({family!r}, load) adds one")
        self.embed = EMBEDDERS[family](model, self.device)

    def run_rows(self, items, name):
        """The whole batch in one embed() call; when it fails, item by item, so only bad rows fail."""
        try:
            vecs = np.asarray(self.embed([self._text(t) for t in items]), np.float32)   # (n, dim)
            return [{"embedding": v, "error": ""} for v in vecs]
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 (find the rows that fail)
            pass
        rows, dim = [], None
        for item in items:
            try:
                v = np.asarray(self.embed([self._text(item)]), np.float32)[0]
                dim = v.shape[0]
                rows.append({"embedding": v, "error": ""})
            except MemoryError:
                raise
            except Exception as e:  # noqa: BLE001
                rows.append({"embedding": None, "error": failure(item, e)})
        for r in rows:  # failed rows: NaN vectors of the batch's width, so the column stays one tensor
            if r["embedding"] is None:
                r["embedding"] = np.full(dim or 0, np.nan, np.float32)
        return rows

    @staticmethod
    def _text(item) -> str:
        if isinstance(item, bytes):
            return item.decode("utf-8")
        if not isinstance(item, str):
            raise TypeError(f"ember: Embedder's text column holds {type(item).__name__}, not str")
        return item

    def __call__(self, batch):
        out = super().__call__(batch)
        out["embedding"] = np.stack(list(out["embedding"])) if len(out["embedding"]) else np.zeros((0, 0), np.float32)
        return out
