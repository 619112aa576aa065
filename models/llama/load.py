"""Load a Llama and its tokenizer from a Hugging Face folder (config.json + safetensors, sharded with
model.safetensors.index.json too, + tokenizer.json), a llama2.c checkpoint (.bin + tokenizer.bin) or a
GGUF file — by local path, URL, or hub id (https://huggingface.co/<id>/resolve/main/<file>; the host
follows $HF_ENDPOINT). Downloads are cached under ~/.cache/ember/hub/.

    model, tok = load_llama("models/llama/demo")          # or "stories15M.bin", "x.gguf", "owner/name"
"""
from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request

import ember

from . import names
from .config import LlamaConfig
from .model import Llama
from .tokenizer import LlamaTokenizer

DEMO_DIR = os.path.join(os.path.dirname(__file__), "demo")


# ============================================================================ sources: path, URL, hub id

class Source:
    """A folder-like place files are read from: a local directory or an http(s) base URL."""

    def __init__(self, base: str, remote: bool):
        self.base, self.remote = base, remote

    def path(self, name: str, required: bool = True) -> str | None:
        """Local path of `name` (downloaded into the cache first when remote); None if absent and optional."""
        if not self.remote:
            p = os.path.join(self.base, name)
            if os.path.exists(p):
                return p
            if required:
                raise FileNotFoundError(f"ember: {p} not found")
            return None
        return _download(self.base.rstrip("/") + "/" + name, required)


def _cache_dir() -> str:
    return os.path.join(os.environ.get("EMBER_CACHE", os.path.expanduser("~/.cache/ember")), "hub")


def _download(url: str, required: bool) -> str | None:
    dest = os.path.join(_cache_dir(), hashlib.sha256(url.encode()).hexdigest()[:24], os.path.basename(url))
    if os.path.exists(dest):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(dest + ".part", "wb") as f:
            while chunk := r.read(1 << 20):
                f.write(chunk)
    except urllib.error.HTTPError as e:
        if e.code == 404 and not required:
            return None
        raise FileNotFoundError(f"ember: cannot fetch {url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        raise ConnectionError(f"ember: cannot fetch {url}: {getattr(e, 'reason', e)}") from None
    os.replace(dest + ".part", dest)
    return dest


def resolve(src: str) -> tuple[Source, str | None]:
    """src -> (where its files are, the single file's name for .bin/.gguf sources, else None)."""
    src = os.fspath(src)
    if src.startswith(("http://", "https://")):
        if src.endswith((".gguf", ".bin")):
            base, name = src.rsplit("/", 1)
            return Source(base, True), name
        return Source(src, True), None
    if os.path.isdir(src):
        return Source(src, False), None
    if os.path.isfile(src):
        return Source(os.path.dirname(os.path.abspath(src)), False), os.path.basename(src)
    parts = src.split("/")
    if len(parts) in (2, 3) and not src.startswith((".", "/")) and all(parts):
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
        repo, name = "/".join(parts[:2]), (parts[2] if len(parts) == 3 else None)
        return Source(f"{endpoint}/{repo}/resolve/main", True), name
    raise FileNotFoundError(f"ember: llama model {src!r} is neither a file, a folder, a URL nor a hub id (owner/name)")


# ============================================================================ loaders

def load_llama(src: str | None = None, device=None, tokenizer: str | None = None) -> tuple[Llama, LlamaTokenizer]:
    """(model in eval mode, tokenizer) from any supported source; None -> the shipped demo model."""
    source, name = resolve(src or DEMO_DIR)
    if name is not None and name.endswith(".gguf"):
        from .gguf import load_gguf
        model, tok = load_gguf(source.path(name))
    elif name is not None and name.endswith(".bin"):
        from .llama2c import load_llama2c
        tok_path = tokenizer or source.path("tokenizer.bin", required=False)
        model, tok = load_llama2c(source.path(name), tok_path)
    else:
        model, tok = load_hf(source, tokenizer)
    if device is not None:
        model = model.to(device)
    # inference: parameters that do not require grad let the functional layer take its fused paths
    return model.eval().requires_grad_(False), tok


def load_hf(source: Source, tokenizer: str | None = None) -> tuple[Llama, LlamaTokenizer]:
    with open(source.path("config.json"), encoding="utf-8") as f:
        config = LlamaConfig.from_hf(json.load(f))
    index = source.path("model.safetensors.index.json", required=False)
    if index is not None:
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        sd = {}
        for s in shards:
            sd.update(ember.load(source.path(s)))
    else:
        sd = ember.load(source.path("model.safetensors"))
    model = from_hf_state_dict(sd, config, source=f"{source.base} safetensors")
    tok_path = tokenizer or source.path("tokenizer.json", required=False)
    tok = None
    if tok_path is not None:
        with open(tok_path, encoding="utf-8") as f:
            tok = LlamaTokenizer.from_json(f.read(), config.bos_token_id, config.eos_token_ids)
    return model, tok


def from_hf_state_dict(sd: dict, config: LlamaConfig, source: str = "checkpoint") -> Llama:
    """A Llama holding HF-named weights (any float dtype is computed in float32)."""
    sd = {k: (v.float() if v.dtype is not ember.float32 else v) for k, v in sd.items()}
    model = Llama(config)
    model.load_state_dict(names.from_hf(sd, config, source))
    return model


def save_pretrained(model: Llama, out_dir: str, tokenizer_json: str | None = None, dtype: str = "float32"):
    """Write config.json + model.safetensors (HF names, loadable by transformers) [+ tokenizer.json]."""
    os.makedirs(out_dir, exist_ok=True)
    c = model.config
    sd = names.to_hf({k: v.detach() for k, v in model.state_dict().items()}, c)
    sd = {k: v.to(dtype).contiguous() for k, v in sd.items()}
    ember.save(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**c.to_hf(), "torch_dtype": dtype}, f, indent=1)
    if tokenizer_json is not None:
        with open(tokenizer_json, encoding="utf-8") as src, \
                open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as dst:
            dst.write(src.read())
