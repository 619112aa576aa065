"""The page's training tool, run in CPython as the worker runs it (wasm/tools/train.py through
worker_api.handle): the bundled data file, step events, pause (the page's cancel) and resume giving the
uninterrupted loss curve, the drawn-digit prediction, and refusals of bad requests."""
from __future__ import annotations

import asyncio
import importlib.util
import shutil

import numpy as np
import pytest

from ember.wasm import worker_api
from ember.wasm.tools import train as train_tool


@pytest.fixture()
def loaded(tmp_path):
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn is not installed (pip install scikit-learn): its digits file is the fixture")
    data = train_tool.demos()[0]
    shutil.copy(data["files"]["digits.csv.gz"], tmp_path / "digits.csv.gz")
    r = asyncio.run(worker_api.handle("load", {"tool": "train", "folder": str(tmp_path), "device": "cpu"}))
    assert r["ok"]["samples"] == 1797
    yield
    train_tool._STATE.update(data=None, session=None)


def run(opts, on_step=None):
    return asyncio.run(worker_api.handle("run", {"tool": "train", "opts": opts, "on_partial": on_step}))


def predict(pixels: bytes) -> dict:
    """What ember.js's predictDigit(pixels) asks the worker."""
    return asyncio.run(worker_api.handle("run", {"tool": "train", "input": pixels, "opts": {"predict": True}}))


def test_pause_and_resume_give_the_uninterrupted_curve(loaded):
    opts = {"epochs": 1, "batch_size": 256, "seed": 3}
    whole = []
    done = run(opts, whole.append)["ok"]
    assert done["stopped"] == "done" and done["step"] == 6 and len(done["history"]) == 1
    steps = [e for e in whole if e["kind"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, 7)) and whole[-1]["kind"] == "epoch"
    assert 0 <= whole[-1]["val_accuracy"] <= 1 and steps[-1]["loss"] < steps[0]["loss"]

    part = []

    def pause_after_5(ev):
        part.append(ev)
        if ev["step"] == 2:
            worker_api.cancel()                       # what the page's cancel() does mid-run
    first = run(opts, pause_after_5)["ok"]
    assert first["stopped"] == "paused" and first["step"] == 2 and first["history"] == []
    second = run({**opts, "resume": True}, part.append)["ok"]
    assert second["stopped"] == "done" and second["step"] == 6
    assert [e["loss"] for e in part if e["kind"] == "step"] == [e["loss"] for e in steps]
    assert second["history"][0]["val_accuracy"] == done["history"][0]["val_accuracy"]
    # a new config starts afresh even with resume
    assert run({**opts, "seed": 4, "epochs": 1, "resume": True})["ok"]["step"] == 6


def test_predict_a_drawn_digit(loaded):
    from ember.models.digits.recipe import digits_arrays
    run({"epochs": 2, "batch_size": 64})
    x, y = digits_arrays()
    hits = 0
    for i in range(20):
        r = predict(x[i, 0].astype(np.float32).tobytes())["ok"]
        assert len(r["probs"]) == 10 and abs(sum(r["probs"]) - 1) < 1e-4
        hits += r["class"] == y[i]
    assert hits >= 16


def test_bad_requests_are_refused(loaded):
    assert run({"epochs": 0})["error"] == "bad_request"
    assert run({"lr": "fast"})["error"] == "bad_request"
    assert "unknown training option" in run({"optimizer": "sgd"})["message"]
    r = predict(b"\0" * 12)
    assert r["error"] in ("bad_request", "not_loaded")
    train_tool._STATE["data"] = None
    assert run({})["error"] == "not_loaded"
