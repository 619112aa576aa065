"""Load Whisper from a Hugging Face layout (config.json, generation_config.json, model.safetensors,
tokenizer.json with WhisperForConditionalGeneration names) by local folder, URL or hub id. The weights
may instead be model.gguf: the same names in GGUF, quantized linear weights staying quantized (QLinear);
`ember convert whisper-gguf SRC OUT --qtype q8_0` makes such a folder.

    model, config, tokenizer = load_whisper("openai/whisper-tiny.en")   # hub id
    load_whisper("https://host/path/to/folder")                          # any server with that layout
    load_whisper("/local/folder")                                        # or a folder on disk
    load_whisper("/ct2/folder")           # CTranslate2 (model.bin): converted once into the cache
    load_whisper(None)                                                   # bundled demo: tiny.en

Downloads go through urllib to ~/.cache/ember/hub/<host>/<path>/<file>, written to a temporary
name and renamed when complete, with a progress callback (file, bytes_done, bytes_total | None).
"""
from __future__ import annotations

import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import ember

from .config import WhisperConfig
from .model import Whisper

HUB_ENDPOINT = "https://huggingface.co"
REQUIRED = ("config.json", "tokenizer.json")
WEIGHTS = ("model.safetensors", "model.gguf")  # one of them, the first found wins
OPTIONAL = ("generation_config.json",)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class WhisperLoadError(ValueError):
    """A Whisper source could not be fetched, or its files do not make a Whisper model."""


def hub_cache() -> Path:
    return Path.home() / ".cache" / "ember" / "hub"


def resolve(source: str | os.PathLike | None, cache: str | os.PathLike | None = None, progress=None,
            revision: str = "main", endpoint: str | None = None) -> Path:
    """A local folder holding REQUIRED (plus OPTIONAL when the source has them) for `source`:
    None (bundled tiny.en), a folder, an http(s) URL of a folder, or a hub id 'owner/name'."""
    if source is None:
        from .fetch import ensure_tiny_en
        return ensure_tiny_en()
    text = os.fspath(source)
    if text.startswith(("http://", "https://")):
        return _download_folder(text.rstrip("/"), cache, progress)
    if os.path.isdir(text):
        folder = Path(text)
        if (folder / "model.bin").is_file() and not any((folder / w).is_file() for w in WEIGHTS):
            return _converted_ct2(folder, cache)
        return folder
    if _HUB_ID.match(text) and not os.path.exists(text):
        base = (endpoint or os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")
        return _download_folder(f"{base}/{text}/resolve/{revision}", cache, progress)
    raise WhisperLoadError(f"ember: Whisper model {text!r} is neither a folder, an http(s) URL nor a hub id "
                           f"like 'openai/whisper-tiny.en'")


def _converted_ct2(folder: Path, cache) -> Path:
    """A CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json), converted once to
    Hugging Face layout under <cache>/ct2/<folder path>."""
    from .ct2 import convert_ct2_whisper
    root = Path(cache) if cache is not None else hub_cache().parent / "ct2"
    dest = root.joinpath(*[re.sub(r"[^\w.-]", "_", p) for p in folder.resolve().parts[1:]])
    stamp = dest / ".ember-complete"
    if not stamp.is_file() or stamp.stat().st_mtime < (folder / "model.bin").stat().st_mtime:
        convert_ct2_whisper(folder, dest)
        stamp.write_text(str(folder.resolve()))
    return dest


def _download_folder(base_url: str, cache, progress) -> Path:
    parts = urllib.parse.urlsplit(base_url)
    # one cache folder per URL: host (with port) and path, made filesystem-safe
    rel = [re.sub(r"[^\w.-]", "_", p) for p in [parts.netloc, *parts.path.split("/")] if p not in ("", ".", "..")]
    folder = Path(cache) if cache is not None else hub_cache()
    folder = folder.joinpath(*rel)
    for name in REQUIRED + OPTIONAL:
        download(f"{base_url}/{name}", folder / name, progress, required=name in REQUIRED)
    if any((folder / name).is_file() for name in WEIGHTS):  # cached already: no request (works offline)
        return folder
    if not any(download(f"{base_url}/{name}", folder / name, progress, required=False) for name in WEIGHTS):
        raise WhisperLoadError(f"ember: {base_url} has none of {', '.join(WEIGHTS)}")
    return folder


def download(url: str, dest: Path, progress=None, required: bool = True, chunk: int = 1 << 20) -> Path | None:
    """GET url into dest unless dest exists; None when an optional file answers 404."""
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:
            total = resp.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            done = 0
            if progress:
                progress(dest.name, 0, total)
            while True:
                block = resp.read(chunk)
                if not block:
                    break
                out.write(block)
                done += len(block)
                if progress:
                    progress(dest.name, done, total)
        if total is not None and done != total:
            raise WhisperLoadError(f"ember: {url}: connection closed after {done} of {total} bytes")
    except urllib.error.HTTPError as e:
        tmp.unlink(missing_ok=True)
        if e.code == 404 and not required:
            return None
        raise WhisperLoadError(f"ember: {url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise WhisperLoadError(f"ember: cannot download {url}: {getattr(e, 'reason', e)}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, dest)
    return dest


def load_state(model: Whisper, path: Path) -> None:
    """Copy model.safetensors or model.gguf (HF names) into `model`, upcast to its dtype (quantized GGUF
    linear weights stay quantized: those layers become QLinear); a missing, extra or mis-shaped tensor
    is a WhisperLoadError naming it and the file."""
    try:
        raw = ember.load(path)
    except (OSError, ValueError) as e:
        raise WhisperLoadError(f"ember: {path}: cannot read weights ({e})") from None
    state = {}
    for name, t in raw.items():
        if name == "proj_out.weight":  # tied to the token embedding; HF drops it too
            continue
        state[name[len("model."):] if name.startswith("model.") else name] = t
    own = model.state_dict()
    missing = [f"model.{k}" for k in own if k not in state]
    extra = [k for k in raw if k != "proj_out.weight" and k.removeprefix("model.") not in own]
    shapes = [f"model.{k} {tuple(state[k].shape)} (model wants {tuple(v.shape)})" for k, v in own.items()
              if k in state and tuple(state[k].shape) != tuple(v.shape)]
    problems = ([f"missing tensor {', '.join(missing)}"] if missing else []) + \
               ([f"unexpected tensor {', '.join(extra)}"] if extra else []) + \
               ([f"wrong shape: {', '.join(shapes)}"] if shapes else [])
    if problems:
        raise WhisperLoadError(f"ember: {path}: not a Whisper checkpoint for its config.json: "
                               + "; ".join(problems))
    from ember.quant import QTensor, load_quantized
    for name, t in state.items():
        if not isinstance(t, QTensor) and not t.dtype.is_float:
            raise WhisperLoadError(f"ember: {path}: tensor {name} has dtype {t.dtype}, expected a float type")
    if any(isinstance(t, QTensor) for t in state.values()):
        load_quantized(model, state, strict=True)
    else:
        model.load_state_dict(state, strict=True)


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
    model = Whisper(config.dims)
    if dtype is not None:
        model.to(dtype)
    load_state(model, weights_file(folder))
    model.to(device).eval()
    tokenizer = WhisperTokenizer(folder / "tokenizer.json", config, backend=tokenizer_backend)
    return model, config, tokenizer
