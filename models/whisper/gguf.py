"""A Whisper folder with GGUF weights: config.json, generation_config.json and tokenizer.json copied, and
model.safetensors written as model.gguf with the same (Hugging Face) tensor names, 2-d weights quantized.

GGUF has no Whisper convention of its own (whisper.cpp uses its older ggml format), so the names and the
config stay Hugging Face's; load.py reads the folder like any other, and quantized linear weights stay
quantized (QLinear). The bundled tiny.en: 75.5 MB float16 -> 41.4 MB q8_0 / 23.2 MB q4_0.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .load import OPTIONAL, REQUIRED, WhisperLoadError


def convert_to_gguf(src, dst, qtype: str = "q8_0") -> Path:
    """SRC folder (HF layout with model.safetensors) -> DST folder with model.gguf of `qtype`."""
    from ember.quant.convert import safetensors_to_gguf
    src, dst = Path(src), Path(dst)
    if not (src / "model.safetensors").is_file():
        raise WhisperLoadError(f"ember: {src / 'model.safetensors'} not found; convert a Hugging Face Whisper folder")
    dst.mkdir(parents=True, exist_ok=True)
    for name in REQUIRED + OPTIONAL:
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
        elif name in REQUIRED:
            raise WhisperLoadError(f"ember: {src / name} not found")
    # the position tables stay float: they are added, never multiplied, and quantizing them buys little
    keep_float = ("embed_positions.weight", "proj_out.weight")
    tmp = dst / "model.gguf.part"
    safetensors_to_gguf(src / "model.safetensors", tmp, qtype, include=lambda name, shape: not name.endswith(keep_float))
    tmp.replace(dst / "model.gguf")
    return dst
