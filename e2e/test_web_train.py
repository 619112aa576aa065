"""The training tool in Chromium on the CPU (numpy in wasm): one epoch of the digits CNN, paused after a
few steps and resumed from the page's buttons, ends with the loss and test accuracy of the same seeded,
uninterrupted run in native Python (wasm/tools/train.py on the site's own digits file); a digit drawn with
the mouse is classified as the native model classifies the same 8x8 pixels."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from web_app import RUN_S, App

CONFIG = {"epochs": 1, "batch_size": 64, "lr": 0.01, "seed": 0}


@pytest.fixture(scope="module")
def app(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=cpu#train")  # a #train link opens the tool
    yield a
    a.close()


def call(worker_api, op, args):
    """worker_api.handle in a thread of its own (Playwright's sync API keeps an event loop in this one)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(lambda: asyncio.run(worker_api.handle(op, args))).result()


@pytest.fixture(scope="module")
def native(site):
    """The same run in CPython, through the worker's own Python entry point, on the bundled data file."""
    from ember.wasm import worker_api
    from ember.wasm.tools import train as train_tool
    folder = site / "models" / "digits"
    assert (folder / "digits.csv.gz").is_file(), sorted((site / "models").iterdir())
    call(worker_api, "load", {"tool": "train", "folder": str(folder)})
    steps = []
    r = call(worker_api, "run", {"tool": "train", "opts": CONFIG, "on_partial": steps.append})["ok"]
    yield r, steps, worker_api
    train_tool._STATE.update(data=None, session=None)


def test_one_epoch_paused_and_resumed_matches_native(app, native):
    ref, ref_steps, _ = native
    page = app.page
    page.wait_for_selector("#panel-train", state="visible", timeout=60_000)  # opened by the #train link
    page.click("#tab-train")
    assert page.is_visible("#panel-train") and page.is_hidden("#panel-whisper")
    app.train_until_step(CONFIG, 3)
    assert app.message() == ""
    page.click("#train-pause")
    paused = app.wait_result("#train-plot")
    assert paused is not None and paused["stopped"] == "paused" and 3 <= paused["step"] < 23, paused
    assert page.inner_text("#train-pause") == "▶ Resume" and "Paused" in page.inner_text("#train-stats")
    page.click("#train-pause")                                  # resume
    page.wait_for_function("!document.querySelector('#train-start').disabled", timeout=RUN_S * 1000)
    got = app.wait_result("#train-plot")
    assert got is not None, app.message()
    assert got["stopped"] == "done" and got["step"] == ref["step"] == 23 and len(got["history"]) == 1
    mine, theirs = got["history"][0], ref["history"][0]
    # float32 sums in another order (wasm SIMD GEMM vs BLAS) over 23 Adam steps: equal to a few 1e-4
    for k in ("loss", "val_loss"):
        assert mine[k] == pytest.approx(theirs[k], rel=2e-3), k
    for k in ("accuracy", "val_accuracy"):
        assert abs(mine[k] - theirs[k]) <= 2 / 360, k
    assert theirs["val_accuracy"] > 0.85                       # and it learned: one epoch is ~90 %+
    rows = page.eval_on_selector_all("#train-epochs-table tbody tr", "rs => rs.length")
    assert rows == 1 and "Done after 23 steps" in page.inner_text("#train-stats")
    app.screenshot("train-cpu.png")


def test_drawn_digit_is_classified_like_native(app, native):
    _, _, worker_api = native
    page = app.page
    page.locator("#train-draw").scroll_into_view_if_needed()  # the mouse only reaches what is on screen
    box = page.locator("#train-draw").bounding_box()
    at = lambda fx, fy: (box["x"] + fx * box["width"], box["y"] + fy * box["height"])  # noqa: E731
    page.mouse.move(*at(0.5, 0.17))
    page.mouse.down()
    for a in np.linspace(0, 2 * np.pi, 40):                    # an oval: a "0"
        page.mouse.move(*at(0.5 + 0.25 * np.sin(a), 0.5 - 0.33 * np.cos(a)))
    page.mouse.up()
    page.wait_for_function("document.querySelector('#train-probs').dataset.json !== undefined",
                           timeout=RUN_S * 1000)
    got = json.loads(page.eval_on_selector("#train-probs", "e => e.dataset.json"))
    pixels = page.evaluate("async () => Array.from((await import('./train.js')).digitPixels("
                           "document.querySelector('#train-draw')))")
    assert len(pixels) == 64 and 0 < sum(pixels) and max(pixels) <= 1
    ref = call(worker_api, "run", {"tool": "train", "input": np.float32(pixels).tobytes(),
                                   "opts": {"predict": True}})["ok"]
    assert got["class"] == ref["class"] == 0, (got, ref)
    np.testing.assert_allclose(got["probs"], ref["probs"], atol=2e-3)
    assert app.errors == []
