"""The training tool: train the digits CNN (ember.models.digits) step by step in the worker, report every
step to the page, pause and resume, and classify a drawn digit.

web/ember.js `train(config, onStep)` and `predictDigit(pixels)` (opts {"predict": true}) run it. Its data is
the digits file bundled into the site by `ember build-web` (demos() below: scikit-learn's digits.csv.gz, from
its PyPI wheel at build time), loaded like a model. Between steps the loop awaits checkpoint(), so the page's
cancel() lands at once: the run returns "paused" and keeps its state; train({..., resume: true}) continues
from the next step with the loss curve an uninterrupted run has (same seeded loader, same optimizer state).
Runs unchanged in CPython, which is how the e2e test gets its reference numbers.
"""
from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from . import WorkerError, checkpoint

DATA_FILE = "digits.csv.gz"
FILES = [[DATA_FILE]]
BESIDE: dict = {}
PACKAGES = ()
BUNDLES = "data"
_STATE: dict = {"data": None, "session": None}   # data: (x, y) arrays; session: a paused/finished run


# The digits file of scikit-learn's wheel on PyPI (any platform's wheel: the data file is the same bytes in
# each), so the light `--app` install, which has no scikit-learn, still bundles the training data.
DIGITS_WHEEL = ("scikit-learn", "1.9.1")
DIGITS_MEMBER = "sklearn/datasets/data/" + DATA_FILE
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"  # 57523 bytes


def digits_file():
    """digits.csv.gz: fetched once from scikit-learn's PyPI wheel into the ember cache (ember.hub, checked
    against DIGITS_SHA256), else an installed scikit-learn's copy; FileNotFoundError naming both otherwise."""
    from pathlib import Path

    from ember import hub
    from ember.data import sklearn_data_file
    try:
        return hub.fetch_pypi_member(*DIGITS_WHEEL, DIGITS_MEMBER, member_sha256=DIGITS_SHA256)
    except hub.HubError as e:
        from_pypi = str(e)
    try:
        return Path(sklearn_data_file(DATA_FILE))
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{from_pypi}; and {e}") from None


def demos(extra: bool = True) -> list[dict]:
    """The site's bundled training data [{"id", "label", "files"}]; [] with a warning when digits_file() finds
    none."""
    import sys
    try:
        path = digits_file()
    except FileNotFoundError as e:
        print(f"ember: no training data for the page ({e})", file=sys.stderr)
        return []
    return [{"id": "digits", "label": "scikit-learn digits (1797 8x8 images, BSD-3-Clause)",
             "files": {DATA_FILE: path}}]


def load(folder: str, device: str) -> dict:
    """Read the digits file the worker wrote into `folder`; the model is built when a run starts, on the
    device its config names."""
    from ember.models.digits.recipe import digits_arrays
    path = os.path.join(folder, DATA_FILE)
    if not os.path.isfile(path):
        raise WorkerError(f"ember: the training data needs {DATA_FILE}; got {sorted(os.listdir(folder))}",
                          "unsupported_file")
    try:
        x, y = digits_arrays(path)
    except ValueError as e:
        raise WorkerError(str(e), "unsupported_file") from None
    _STATE["data"] = (x, y)
    return {"device": "cpu", "parameters": 0, "bytes": int(x.nbytes + y.nbytes),
            "samples": int(len(y))}


def _config(opts: dict):
    from ember.models.digits import TrainConfig
    opts = {k: v for k, v in dict(opts or {}).items() if k != "resume"}
    try:
        cfg = TrainConfig.from_dict(opts)
        cfg = TrainConfig(epochs=int(cfg.epochs), batch_size=int(cfg.batch_size), lr=float(cfg.lr),
                          weight_decay=float(cfg.weight_decay), warmup=int(cfg.warmup), seed=int(cfg.seed),
                          device=str(cfg.device))
    except (TypeError, ValueError) as e:
        raise WorkerError(str(e) if str(e).startswith("ember") else f"ember: bad training option ({e})",
                          "bad_request") from None
    for name, v, lo, hi in (("epochs", cfg.epochs, 1, 100), ("batch_size", cfg.batch_size, 1, 1437),
                            ("seed", cfg.seed, 0, 2 ** 31 - 1)):
        if not lo <= v <= hi:
            raise WorkerError(f"ember: {name} must be between {lo} and {hi}, got {v}", "bad_request")
    if not 0 < cfg.lr <= 1:
        raise WorkerError(f"ember: lr must be in (0, 1], got {cfg.lr}", "bad_request")
    return cfg


def _new_session(cfg) -> dict:
    from ember.models.digits import make_trainer
    trainer = make_trainer(cfg, arrays=_STATE["data"])
    return {"cfg": cfg, "trainer": trainer, "seconds": 0.0}


def _event(ev: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in ev.items()}


async def run_train(opts: dict | None = None, on_step=None) -> dict:
    """Train (or, with opts["resume"], continue the paused run of the same config); -> {"history": one dict
    per finished epoch, "stopped": "done" | "paused", "step", "epoch", "batch", "steps_per_s", "seconds",
    "device"}. on_step(event) after every step ({"kind": "step", "step", "epoch", "batch", "batches",
    "loss", "accuracy", "lr"}) and every epoch ({"kind": "epoch", "loss", "accuracy", "val_loss",
    "val_accuracy", ...})."""
    if _STATE["data"] is None:
        raise WorkerError("ember: no training data loaded yet; load the digits first", "not_loaded")
    opts = dict(opts or {})
    cfg = _config(opts)
    s = _STATE["session"]
    if not (opts.get("resume") and s is not None and s["cfg"] == cfg):
        s = _STATE["session"] = _new_session(cfg)
    trainer = s["trainer"]
    stopped, t0, steps0 = "done", time.perf_counter(), trainer.step
    try:
        for ev in trainer.steps(cfg.epochs):
            if on_step is not None:
                on_step(_event(ev))
            await checkpoint()
    except asyncio.CancelledError:
        stopped = "paused"
    secs = time.perf_counter() - t0
    s["seconds"] += secs
    return {"history": [_event(h) for h in trainer.history], "stopped": stopped, "step": trainer.step,
            "epoch": trainer.epoch, "batch": trainer.batch, "device": cfg.device, "seconds": round(s["seconds"], 3),
            "steps_per_s": round((trainer.step - steps0) / secs, 3) if secs > 0 else 0.0}


def predict(pixels) -> dict:
    """64 pixel values in [0, 1] (an 8x8 image, row-major; float32 bytes or a list) -> {"class", "probs"}
    from the current (or paused) run's model."""
    from ember.models.digits import predict as predict_probs
    if _STATE["session"] is None:
        raise WorkerError("ember: train the model first, then draw a digit", "not_loaded")
    if isinstance(pixels, (bytes, bytearray, memoryview)):
        if len(pixels) != 64 * 4:
            raise WorkerError(f"ember: a digit is 64 float32 values (256 bytes), got {len(pixels)} bytes",
                              "bad_request")
        x = np.frombuffer(bytes(pixels), np.float32)
    else:
        x = np.asarray(pixels, np.float32).reshape(-1)
    if x.size != 64 or not np.isfinite(x).all():
        raise WorkerError(f"ember: a digit is 8x8 = 64 finite values, got {x.size}", "bad_request")
    probs = predict_probs(_STATE["session"]["trainer"].model, np.clip(x, 0, 1).reshape(1, 8, 8))[0]
    return {"class": int(probs.argmax()), "probs": [round(float(p), 6) for p in probs]}


async def run(input, opts: dict, on_partial=None, on_progress=None) -> dict:
    """opts["predict"]: classify the digit `input` (predict()); else train with opts as the config (run_train(),
    on_partial(event) per step and epoch)."""
    if opts.get("predict"):
        return predict(input)
    return await run_train(opts, on_partial)
