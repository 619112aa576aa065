"""Load Whisper from a Hugging Face layout (config.json, generation_config.json, model.safetensors,
tokenizer.json with WhisperForConditionalGeneration names) by local folder, URL or hub id. The weights
may instead be model.gguf: the same names in GGUF, quantized linear weights staying quantized (QLinear);
`ember convert whisper-gguf SRC OUT --qtype q8_0` makes such a folder.

    model, config, tokenizer = load_whisper("openai/whisper-tiny.en")   # hub id
    load_whisper("https://host/path/to/folder")                          # any server with that layout
    load_whisper("/local/folder")                                        # or a folder on disk
    load_whisper("/ct2/folder")           # CTranslate2 (model.bin): converted once into the cache
    load_whisper(None)                                                   # bundled demo: tiny.en

Remote files go through ember.hub (resume, atomic rename, progress callback (file, bytes_done,
bytes_total | None)) into its mirror of the folder, ember.hub.cache_dir("hub")/<host>/<path>/<file>.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import ember

from ...errors import FormatError
from .config import WhisperConfig
from .model import Whisper

REQUIRED = ("config.json", "tokenizer.json")
WEIGHTS = ("model.safetensors", "model.gguf")  # one of them, the first found wins
OPTIONAL = ("generation_config.json",)


class WhisperLoadError(FormatError):
    """A Whisper source could not be fetched, or its files do not make a Whisper model."""


def resolve(source: str | os.PathLike | None, cache: str | os.PathLike | None = None, progress=None,
            revision: str = "main", endpoint: str | None = None) -> Path:
    """A local folder holding REQUIRED (plus OPTIONAL when the source has them) for `source`:
    None (bundled tiny.en), a folder, an http(s) URL of a folder, or a hub id 'owner/name'."""
    from ember import hub
    if source is None:
        from .fetch import ensure_tiny_en
        return ensure_tiny_en()
    text = os.fspath(source)
    try:
        src = hub.resolve(text, cache, revision, endpoint)
    except hub.HubError:
        src = None
    if src is None or src.kind == "file" or src.file is not None:
        raise WhisperLoadError(f"ember: Whisper model {text!r} is neither a folder, an http(s) URL nor a hub id "
                               f"like 'openai/whisper-tiny.en'")
    if not src.remote:
        folder = src.local
        if (folder / "model.bin").is_file() and not any((folder / w).is_file() for w in WEIGHTS):
            return _converted_ct2(folder, cache)
        return folder
    try:
        return _download_folder(src, progress)
    except hub.HubError as e:
        raise WhisperLoadError(str(e)) from None


def _converted_ct2(folder: Path, cache) -> Path:
    """A CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json), converted once to
    Hugging Face layout under <cache>/ct2/<folder path>."""
    from .ct2 import convert_ct2_whisper
    from ember import hub
    root = Path(cache) if cache is not None else hub.cache_dir("ct2")
    dest = root.joinpath(*[re.sub(r"[^\w.-]", "_", p) for p in folder.resolve().parts[1:]])
    stamp = dest / ".ember-complete"
    if not stamp.is_file() or stamp.stat().st_mtime < (folder / "model.bin").stat().st_mtime:
        convert_ct2_whisper(folder, dest)
        stamp.write_text(str(folder.resolve()))
    return dest


def _download_folder(src, progress) -> Path:
    """Mirror REQUIRED, OPTIONAL (a 404 is fine) and the first of WEIGHTS the server has into the cache."""
    for name in REQUIRED + OPTIONAL:
        src.path(name, required=name in REQUIRED, progress=progress)
    if any(src.cached(name) for name in WEIGHTS):  # cached already: no request (works offline)
        return src.local
    if not any(src.path(name, required=False, progress=progress) for name in WEIGHTS):
        raise WhisperLoadError(f"ember: {src.base} has none of {', '.join(WEIGHTS)}")
    return src.local


def load_state(model: Whisper, path: Path) -> None:
    """Copy model.safetensors or model.gguf (HF names) into `model`, upcast to its dtype (quantized GGUF
    linear weights stay quantized: those layers become QLinear); a missing, extra or mis-shaped tensor
    is a WhisperLoadError naming it and the file."""
    try:
        raw = ember.load(path)
    except (OSError, ValueError) as e:
        raise WhisperLoadError(f"ember: {path}: cannot read weights ({e})") from None
    from ember.nn import StateDictError
    from ember.quant import QTensor, load_quantized
    state, file_name = {}, {}  # model name -> tensor, model name -> the name in the file
    for name, t in raw.items():
        if name == "proj_out.weight":  # tied to the token embedding; HF drops it too
            continue
        key = name[len("model."):] if name.startswith("model.") else name
        state[key], file_name[key] = t, name
    for name, t in state.items():
        if not isinstance(t, QTensor) and not t.dtype.is_float:
            raise WhisperLoadError(f"ember: {path}: tensor {file_name[name]} has dtype {t.dtype}, "
                                   f"expected a float type")
    try:
        if any(isinstance(t, QTensor) for t in state.values()):
            load_quantized(model, state, strict=True)
        else:
            model.load_state_dict(state, strict=True, source=path)
    except StateDictError as e:  # the same check, reported in the file's (HF) names
        shapes = [f"model.{k} {got} (model wants {want})" for k, want, got in e.mismatched]
        problems = ([f"missing tensor {', '.join(f'model.{k}' for k in e.missing)}"] if e.missing else []) + \
                   ([f"unexpected tensor {', '.join(file_name[k] for k in e.unexpected)}"] if e.unexpected else []) + \
                   ([f"wrong shape: {', '.join(shapes)}"] if shapes else [])
        raise WhisperLoadError(f"ember: {path}: not a Whisper checkpoint for its config.json: "
                               + "; ".join(problems)) from e
    except ValueError as e:  # a quantized weight that does not fit its Linear (load_quantized names it)
        raise WhisperLoadError(f"ember: {path}: not a Whisper checkpoint for its config.json: {e}") from e


def weights_file(folder: Path) -> Path:
    for name in WEIGHTS:
        if (folder / name).is_file():
            return folder / name
    raise WhisperLoadError(f"ember: {folder} has none of {', '.join(WEIGHTS)}; a Whisper folder needs one, "
                           f"plus {', '.join(REQUIRED)}")


def load_whisper(source=None, device: str = "cpu", dtype=None, cache=None, progress=None,
                 tokenizer_backend: str = "auto"):
    """-> (Whisper model in eval mode on `device`, WhisperConfig, WhisperTokenizer)."""
    from .tokenizer import WhisperTokenizer
    folder = resolve(source, cache, progress)
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise WhisperLoadError(f"ember: {folder / name} not found; a Whisper folder needs "
                                   f"{', '.join(REQUIRED)} and one of {', '.join(WEIGHTS)}")
    config = WhisperConfig.from_folder(folder)
    with ember.nn.init.skipped():  # every weight comes from the file
        model = Whisper(config.dims)
    if dtype is not None:
        model.to(dtype)
    load_state(model, weights_file(folder))
    model.to(device).eval()
    tokenizer = WhisperTokenizer(folder / "tokenizer.json", config, backend=tokenizer_backend)
    return model, config, tokenizer
