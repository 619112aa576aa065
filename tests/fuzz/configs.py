"""config.json through every family loader, for the fuzzer and tests/test_hostile_config_fields.py: a family's
folder (tests/family_folders.py made it) is copied once, its config.json replaced by the input, and the folder
loaded the way ember loads that family; causal LMs and BERT then run a forward on a few tokens, whose output
must be finite (NaN logits from a config that passed the checks are a finding, raised as SilentNaN)."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np


class SilentNaN(Exception):
    """A config that loaded and ran but gave non-finite outputs (not an ember error: a finding)."""


_COPIES: dict[str, str] = {}


def scratch(family: str, folder: str) -> str:
    """A private copy of the family's folder (the weights linked, not copied), made once per process and removed
    when it exits."""
    if family not in _COPIES:
        dst = tempfile.mkdtemp(prefix=f"fuzz-config-{family}-")
        atexit.register(shutil.rmtree, dst, True)
        for name in os.listdir(folder):
            src = os.path.join(folder, name)
            try:
                os.link(src, os.path.join(dst, name))
            except OSError:
                shutil.copy(src, os.path.join(dst, name))
        os.unlink(os.path.join(dst, "config.json"))
        _COPIES[family] = dst
    return _COPIES[family]


def _causal(model):
    out = model(input_ids=np.array([[1, 2, 3, 4]])).logits.numpy()
    return out


def _text(folder):
    from ember.models.text.load import load_text_model
    model, _ = load_text_model(folder)
    return _causal(model)


def _auto(folder, forward=None):
    from ember.models.auto import from_pretrained
    model = from_pretrained(folder)
    return forward(model) if forward else None


def _bert(model):
    return model(np.array([[1, 2, 3, 4]])).last_hidden_state.numpy()


def _whisper(folder):
    import json
    from ember.models.whisper.config import ModelDimensions
    from ember.models.whisper.load import load_state
    from ember.models.whisper.model import Whisper
    from pathlib import Path
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        try:
            config = json.load(f)
        except (ValueError, RecursionError):
            return None  # not JSON: the fuzzer's other families cover the reader
    if not isinstance(config, dict):
        return None
    model = Whisper(ModelDimensions.from_hf(config, os.path.join(folder, "config.json")))
    load_state(model, Path(folder) / "model.safetensors")
    return None


LOADERS = {
    "llama": _text, "llama3": _text, "gemma3": _text,
    **{f: (lambda folder: _auto(folder, _causal)) for f in ("mistral", "qwen2", "qwen3", "gpt2", "gpt_bigcode", "phi3",
                                                            "phi", "gemma", "glm", "starcoder2", "falcon")},
    "bert": lambda folder: _auto(folder, _bert), "distilbert": lambda folder: _auto(folder, _bert),
    "t5": _auto, "vit": _auto, "clip": _auto, "whisper": _whisper,
}


def load(family: str, folder: str, raw: bytes):
    """Load `family` from a copy of `folder` whose config.json is raw; SilentNaN when its output is not finite."""
    d = scratch(family, folder)
    with open(os.path.join(d, "config.json"), "wb") as f:
        f.write(raw)
    with np.errstate(all="ignore"):
        out = LOADERS[family](d)
    if out is not None and not np.isfinite(out).all():
        raise SilentNaN(f"{family}: config.json loaded and ran, but the output is not finite")
    return out
