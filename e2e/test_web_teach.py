"""The text tool's Teach panel in Chromium on the CPU (numpy and ember's C kernels in wasm), on the site's demo
Llama: LoRA fine-tuning on pasted text, paused after a few steps and resumed from the page's buttons, gives the
per-step losses of the same uninterrupted run in native CPython (wasm/tools/llama_teach.py through the worker's
own entry point); the adapted model then completes a prompt greedily with native's tokens; the downloaded adapter
(PEFT layout) loads into ember.train.lora with native's weights."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from web_app import RUN_S, App

TEXT = "The city of Varnholt was founded in 1742 by the river guild. Varnholt is known for its blue bridges. " * 2
OPTS = {"steps": 8, "rank": 4, "lr": 0.003, "block": 16, "seed": 3}
PROMPT = "The city of Varnholt was"


def call(worker_api, op, args):
    """worker_api.handle in a thread of its own (Playwright's sync API keeps an event loop in this one)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(lambda: asyncio.run(worker_api.handle(op, args))).result()


@pytest.fixture(scope="module")
def native(site):
    """The uninterrupted run, a greedy completion and the exported adapter in CPython on the site's demo files."""
    from ember.wasm import worker_api
    from ember.wasm.tools import llama
    folder = next((site / "models").glob("llama-*"))
    call(worker_api, "load", {"tool": "llama", "folder": str(folder)})
    r = call(worker_api, "run", {"tool": "llama", "input": TEXT, "opts": {**OPTS, "teach": "train"}})["ok"]
    gen = call(worker_api, "run", {"tool": "llama", "input": PROMPT,
                                   "opts": {"max_new_tokens": 12, "temperature": 0, "seed": 0}})["ok"]
    from ember.train import lora
    weights = {k: p.numpy().copy() for k, p in lora.adapter_tensors(llama._STATE["model"]).items()}
    yield r, gen, weights
    call(worker_api, "run", {"tool": "llama", "input": None, "opts": {"teach": "reset"}})
    llama._STATE.clear()


@pytest.fixture(scope="module")
def app(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=cpu#llama")
    yield a
    a.close()


def test_teach_paused_resumed_matches_native_then_generates_and_downloads(app, native, tmp_path):
    ref, ref_gen, ref_weights = native
    assert ref["losses"][-1] < ref["losses"][0] - 0.3, ref["losses"]  # it learns the text
    page = app.page
    page.click("#tab-llama")
    page.click("#teach summary")
    page.fill("#teach-text", TEXT)
    for k, v in OPTS.items():
        page.fill(f"#teach-{k}", str(v))
    page.click("#teach-start")
    page.wait_for_function("/step [2-8]\\//.test(document.querySelector('#teach-stats').textContent)"
                           " || !document.querySelector('#message').hidden", timeout=RUN_S * 1000)
    assert app.message() == ""
    page.click("#teach-pause")
    paused = app.wait_result("#teach-plot")
    assert paused is not None and paused["stopped"] in ("paused", "done"), app.message()
    if paused["stopped"] == "paused":
        assert page.inner_text("#teach-pause") == "▶ Resume" and "Paused" in page.inner_text("#teach-stats")
        page.click("#teach-pause")                                            # resume
        page.wait_for_function("!document.querySelector('#teach-start').disabled && "
                               "document.querySelector('#teach-plot').dataset.json !== undefined",
                               timeout=RUN_S * 1000)
    got = app.wait_result("#teach-plot")
    assert got is not None and got["stopped"] == "done" and got["step"] == OPTS["steps"], (got, app.message())
    # float32 sums in another order (wasm kernels vs native BLAS) through 8 Adam steps
    np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-4)
    assert "Done after 8 of 8 steps" in page.inner_text("#teach-stats")
    rel = max(abs(a - b) / b for a, b in zip(got["losses"], ref["losses"]))
    print(f"\nteach: page losses {got['losses'][0]:.4f} -> {got['losses'][-1]:.4f}, max relative difference from "
          f"native {rel:.2e}; {got['steps_per_s']:.2f} steps/s in the page after resuming, native {ref['steps_per_s']:.2f}")

    # the adapted model completes greedily as native's does
    app.generate(PROMPT, 12, temperature=0, seed=0)
    page.wait_for_function("document.querySelector('#llama-output').dataset.json !== undefined"
                           " || !document.querySelector('#message').hidden", timeout=RUN_S * 1000)
    gen = json.loads(page.eval_on_selector("#llama-output", "e => e.dataset.json"))
    assert gen["tokens"] == ref_gen["tokens"], (gen["text"], ref_gen["text"])

    # the adapter downloads in PEFT's layout and loads into ember with native's weights
    downloads = []
    page.on("download", lambda d: downloads.append(d))
    page.click("#teach-download")
    for _ in range(600):
        if len(downloads) == 2:
            break
        page.wait_for_timeout(100)
    for d in downloads:
        d.save_as(tmp_path / d.suggested_filename)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    from ember.io import safetensors
    from ember.train import lora
    tensors = safetensors.load(str(tmp_path / "adapter_model.safetensors"))
    assert set(tensors) == set(ref_weights)
    for k, v in tensors.items():
        np.testing.assert_allclose(v.numpy(), ref_weights[k], atol=1e-4, err_msg=k)
    assert lora.read_config(tmp_path / "adapter_config.json").r == OPTS["rank"]
    page.click("#teach-reset")
    page.wait_for_function("/adapters are gone/.test(document.querySelector('#teach-stats').textContent)",
                           timeout=RUN_S * 1000)
    assert app.errors == []
