"""Checkpoints: model weights, optimizer state, schedule and loop counters in one safetensors file, so a
run stopped at any step resumes with the loss curve it would have had.

Layout: `model.<name>` the model's state dict, `optimizer.<param index>.<name>` each optimizer state
tensor, `master.<param index>` the float32 master weights under mixed precision; the safetensors
metadata key `ember.checkpoint` holds the rest as JSON (step, param groups, scalar state, scheduler,
trainer counters, user `extra`). ember.io's safetensors writer goes through a temporary file and a
rename, so a crash mid-write leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import os

from ..errors import FormatError

META_KEY = "ember.checkpoint"


def _jsonable(v):
    if isinstance(v, tuple):
        return list(v)
    return v


def save_checkpoint(path, model=None, optimizer=None, scheduler=None, trainer=None, mixed_precision=None,
                    step: int | None = None, extra: dict | None = None) -> str:
    """Write a checkpoint; -> its path. `trainer` (a Trainer) brings its model, optimizer, scheduler and
    mixed precision unless given, and its counters."""
    from ..io.safetensors import save
    if trainer is not None:
        model = model or trainer.model
        optimizer = optimizer or trainer.optimizer
        scheduler = scheduler or trainer.scheduler
        mixed_precision = mixed_precision or trainer.mp
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    meta = {"step": step if step is not None else (trainer.step if trainer is not None else 0),
            "extra": extra or {}}
    if optimizer is not None:
        sd = optimizer.state_dict()
        scalars = {}
        for i, st in sd["state"].items():
            for k, v in st.items():
                if hasattr(v, "shape") and hasattr(v, "numpy"):
                    tensors[f"optimizer.{i}.{k}"] = v
                else:
                    scalars.setdefault(str(i), {})[k] = v
        meta["optimizer"] = {"param_groups": [{k: _jsonable(v) for k, v in g.items()} for g in sd["param_groups"]],
                             "scalars": scalars}
    if scheduler is not None:
        meta["scheduler"] = {k: _jsonable(v) for k, v in scheduler.state_dict().items()}
    if trainer is not None:
        meta["trainer"] = trainer.state_dict()
    if mixed_precision is not None:
        meta["mixed_precision"] = mixed_precision.state_dict()
        for i, m in enumerate(mixed_precision.master):
            tensors[f"master.{i}"] = m.detach()
    path = os.fspath(path)
    save({k: v.detach() for k, v in tensors.items()}, path, metadata={META_KEY: json.dumps(meta)})  # atomic
    return path


def load_checkpoint(path, model=None, optimizer=None, scheduler=None, trainer=None, mixed_precision=None) -> dict:
    """Restore what save_checkpoint wrote into the given objects (strict for the model); -> the metadata
    dict (step, extra, ...)."""
    from ..io.safetensors import load, metadata
    path = os.fspath(path)
    meta_raw = (metadata(path) or {}).get(META_KEY)
    if meta_raw is None:
        raise FormatError(f"ember: {path}: not an ember checkpoint (no {META_KEY!r} metadata)")
    try:
        meta = json.loads(meta_raw)
    except ValueError as e:
        raise FormatError(f"ember: {path}: {META_KEY} metadata is not JSON ({e})") from None
    if trainer is not None:
        model = model or trainer.model
        optimizer = optimizer or trainer.optimizer
        scheduler = scheduler or trainer.scheduler
        mixed_precision = mixed_precision or trainer.mp
    tensors = load(path, mmap=False)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=True, source=path)
    if optimizer is not None:
        if "optimizer" not in meta:
            raise FormatError(f"ember: {path}: the checkpoint holds no optimizer state")
        state: dict[int, dict] = {}
        for k, v in tensors.items():
            if k.startswith("optimizer."):
                _, i, name = k.split(".", 2)
                state.setdefault(int(i), {})[name] = v
        for i, sc in meta["optimizer"]["scalars"].items():
            state.setdefault(int(i), {}).update(sc)
        optimizer.load_state_dict({"state": state, "param_groups": meta["optimizer"]["param_groups"]})
    if scheduler is not None and "scheduler" in meta:
        scheduler.load_state_dict(meta["scheduler"])
    if trainer is not None and "trainer" in meta:
        trainer.load_state_dict(meta["trainer"])
    if mixed_precision is not None:
        for i, m in enumerate(mixed_precision.master):
            key = f"master.{i}"
            if key not in tensors:
                raise FormatError(f"ember: {path}: no {key} (saved without mixed precision?)")
            m._data = tensors[key].to(device=m.device, dtype="float32")._data
        mixed_precision.load_state_dict(meta["mixed_precision"])
        mixed_precision.sync_from_master()
    return meta
