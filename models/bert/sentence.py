"""Sentence embeddings as sentence-transformers computes them from a model folder: modules.json's
Transformer -> Pooling (1_Pooling/config.json: mean / cls / max / mean-sqrt-len) -> Normalize, with
sentence_bert_config.json's max_seq_length and the folder's tokenizer.json (its own fixed padding replaced by
padding to the longest text of each batch, as sentence-transformers pads).

    enc = SentenceEncoder("path/to/all-MiniLM-L6-v2", device="cpu")
    vecs = enc.encode(["a text", "another"])          # (2, 384) float32, unit length
"""
from __future__ import annotations

import json

import numpy as np

import ember
from ember.errors import FormatError

POOLING_MODES = ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                 "pooling_mode_mean_sqrt_len_tokens")


def _json(source, name):
    p = source.path(name, required=False)
    if p is None:
        return None
    with open(p, encoding="utf-8") as f:
        return json.load(f)


def pool(hidden, mask, modes) -> np.ndarray:
    """hidden (B, T, dim) numpy, mask (B, T) 0/1 -> (B, len(modes) * dim) as sentence-transformers concatenates."""
    m = mask[..., None].astype(np.float32)                                    # (B, T, 1)
    out = []
    for mode in modes:
        if mode == "pooling_mode_cls_token":
            out.append(hidden[:, 0])
        elif mode == "pooling_mode_max_tokens":
            out.append(np.where(m > 0, hidden, -1e9).max(1))
        else:
            n = np.maximum(m.sum(1), 1e-9)                                    # (B, 1)
            s = (hidden * m).sum(1)
            out.append(s / n if mode == "pooling_mode_mean_tokens" else s / np.sqrt(n))
    return np.concatenate(out, -1).astype(np.float32)


class SentenceEncoder:
    """Loads once (model, tokenizer, pooling); encode(texts) -> (N, dim) float32 numpy."""

    def __init__(self, source, device=None, dtype=None, batch_size: int = 32):
        from ember import hub
        from ember.tokenizers import Tokenizer

        from ..common.hf_folder import read_config, read_state_dict
        from .load import build_from_hf
        src = hub.resolve(source)
        config = read_config(src)
        if config["model_type"] not in ("bert", "roberta", "distilbert"):
            raise FormatError(f"ember: {src.base}: model_type {config['model_type']!r} is not a BERT family "
                              f"encoder (bert, roberta, distilbert)")
        model = build_from_hf(config, read_state_dict(src), str(src.base))
        if device is not None or dtype is not None:
            model = model.to(*([device] if device is not None else []),
                             **({"dtype": dtype} if dtype is not None else {}))
        self.model = model.eval().requires_grad_(False)
        tok_path = src.path("tokenizer.json", required=False)
        if tok_path is None:
            raise FormatError(f"ember: {src.base} has no tokenizer.json")
        self.tokenizer = Tokenizer.from_file(tok_path)
        modules = _json(src, "modules.json") or []
        kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
        pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
        cfg = _json(src, f"{pooling['path']}/config.json") if pooling and pooling.get("path") else None
        self.modes = [k for k in POOLING_MODES if (cfg or {"pooling_mode_mean_tokens": True}).get(k)]
        if not self.modes:
            raise FormatError(f"ember: {src.base}: the pooling config names no mode ember knows ({POOLING_MODES})")
        self.normalize = "Normalize" in kinds if modules else True
        st = _json(src, "sentence_bert_config.json") or {}
        self.max_len = int(st.get("max_seq_length") or self.model.config.max_positions)
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        self.batch_size = batch_size

    def encode(self, texts, batch_size: int | None = None) -> np.ndarray:
        texts = [texts] if isinstance(texts, str) else list(texts)
        bs = batch_size or self.batch_size
        out = []
        with ember.no_grad():
            for i in range(0, len(texts), bs):
                encs = self.tokenizer.encode_batch(texts[i:i + bs])
                T = max(len(e.ids) for e in encs)
                ids = np.zeros((len(encs), T), np.int64)
                mask = np.zeros((len(encs), T), np.int64)
                types = np.zeros((len(encs), T), np.int64)
                for r, e in enumerate(encs):
                    ids[r, :len(e.ids)], mask[r, :len(e.ids)], types[r, :len(e.ids)] = e.ids, 1, e.type_ids
                hidden = self.model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
                out.append(pool(hidden.float().numpy(), mask, self.modes))               # (b, dim)
        v = np.concatenate(out, 0) if out else np.zeros((0, self.model.config.dim), np.float32)
        if self.normalize:
            v = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
        return v.astype(np.float32)

    __call__ = encode
