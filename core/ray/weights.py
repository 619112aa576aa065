"""A model's files as one value for Ray's object store, so a cluster downloads a model once.

`ModelFiles.read(path)` takes a file, or a folder's top-level files, as bytes; `ray.put` ships it to every
node once. An actor's `materialize()` writes it into `ember.hub.cache_dir("ray", <sha256>)` on its node
(a temp folder renamed into place, so actors on one node share one copy and never see half a folder) and
returns the path the family's loader reads.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

STAMP = ".ember-ray-complete"  # written last: a folder holding it is whole


@dataclass(frozen=True)
class ModelFiles:
    files: dict          # file name -> bytes
    entry: str | None    # the file the loader is given, or None: the loader is given the folder

    @classmethod
    def read(cls, path: str | os.PathLike) -> ModelFiles:
        path = Path(path)
        if path.is_file():
            return cls({path.name: path.read_bytes()}, path.name)
        if not path.is_dir():
            raise FileNotFoundError(f"ember: model {path} is neither a file nor a folder")
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file() and not p.name.startswith(".")}
        if not files:
            raise FileNotFoundError(f"ember: model folder {path} holds no files")
        return cls(files, None)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + len(self.files[name]).to_bytes(8, "little"))
            h.update(self.files[name])
        return h.hexdigest()

    def nbytes(self) -> int:
        return sum(len(b) for b in self.files.values())

    def materialize(self, cache: str | os.PathLike | None = None) -> Path:
        from ember import hub
        root = Path(cache) if cache is not None else hub.cache_dir("ray")
        dest = root / self.digest[:32]
        if not (dest / STAMP).is_file():
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
            for name, data in self.files.items():
                (tmp / name).write_bytes(data)
            (tmp / STAMP).write_text("ok\n")
            try:
                os.replace(tmp, dest)
            except OSError:  # another actor on this node got there first (or a stale partial copy is there)
                if not (dest / STAMP).is_file():
                    shutil.rmtree(dest, ignore_errors=True)
                    os.replace(tmp, dest)
                shutil.rmtree(tmp, ignore_errors=True)
        return dest / self.entry if self.entry else dest


def is_object_ref(value) -> bool:
    """True for a Ray ObjectRef, without importing Ray where the caller never did."""
    ray = sys.modules.get("ray")
    return ray is not None and isinstance(value, ray.ObjectRef)


def share(path: str | os.PathLike):
    """ray.put the model at `path` (a local file or folder) -> ObjectRef."""
    import ray
    return ray.put(ModelFiles.read(path))


def local_model(model):
    """`model=` as the loaders take it: an ObjectRef (of ModelFiles) is fetched and written on this node."""
    if is_object_ref(model):
        import ray
        model = ray.get(model)
    if isinstance(model, ModelFiles):
        return os.fspath(model.materialize())
    return model
