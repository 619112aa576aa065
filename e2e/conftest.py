"""Shared fixtures for the browser tests: a `build-web` site, a plain static server that logs requests,
Debian's Chromium under Playwright (never `playwright install`), and the fixed inputs.

The site is built once per session into a temporary folder. A Llama demo model is taken from
models/llama/demo when its trainer has shipped one; otherwise a small seeded Llama with a BPE tokenizer
trained on CPython's help texts is written for the test (parity does not need trained weights).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from web_app import CACHE, CHROMIUM, SPEECH, Server, seeded_llama_folder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import expected_skips  # noqa: E402  (tests/expected_skips.py: under CI=true an unlisted skip fails)


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("ember-skips"):
        config.pluginmanager.register(expected_skips, "ember-skips")


# ---------------------------------------------------------------------------- inputs

@pytest.fixture(scope="session")
def clip_wav() -> Path:
    """An espeak-ng sentence as 16 kHz mono 16-bit WAV."""
    dest = CACHE / "fox.wav"
    if not dest.is_file():
        if not (shutil.which("espeak-ng") and shutil.which("sox")):
            pytest.fail("e2e needs espeak-ng and sox (apt-get install espeak-ng sox)")
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw.wav"
            subprocess.run(["espeak-ng", "-w", str(raw), SPEECH], check=True)
            subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(dest)], check=True)
    return dest


@pytest.fixture(scope="session")
def long_clip() -> Path:
    """~46 s of espeak-ng speech (the Harvard sentences of tests/test_whisper_decode.py)."""
    dest = CACHE / "harvard.wav"
    if not dest.is_file():
        raw = CACHE / "harvard-raw.wav"
        text = ("The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
                "It is easy to tell the depth of a well. These days a chicken leg is a rare dish. "
                "Rice is often served in round bowls. The juice of lemons makes fine punch. "
                "The box was thrown beside the parked truck. The hogs were fed chopped corn and garbage. "
                "Four hours of steady work faced us. A large size in stockings is hard to sell.")
        subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
        subprocess.run(["sox", "-R", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(dest)], check=True)
        raw.unlink()
    return dest


@pytest.fixture(scope="session")
def bus_png() -> Path:
    """bus.jpg from the ultralytics wheel, re-encoded losslessly as PNG: it decodes bit-identically
    everywhere. (Pyodide's Pillow 10.2 and the native Pillow decode the JPEG differently, 18 % of bus.jpg's
    pixels by up to 46 levels; the app therefore decodes images with the browser, whose JPEG pixels equal
    native Pillow's: e2e/test_web_app_use.py runs the JPEG itself.)"""
    from PIL import Image

    from ember.models.yolo.fetch import ensure_file
    dest = CACHE / "bus.png"
    if not dest.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        with Image.open(ensure_file("bus.jpg")) as im:
            im.convert("RGB").save(dest)
    return dest


# ---------------------------------------------------------------------------- the site

@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    from ember.wasm.serve import ROOT, build_site, demo_models
    models = demo_models(extra=False)  # one demo per tool, the small ones (Gemma 3: e2e/test_web_gemma.py)
    if "llama" not in models:
        d = seeded_llama_folder(CACHE / "llama-test")
        models["llama"] = {"id": "llama-test", "label": "Llama test model (seeded, untrained)",
                           "files": {n: d / n for n in ("config.json", "model.safetensors", "tokenizer.json")}}
    assert {"whisper", "yolo", "llama"} <= models.keys(), f"demo models missing: {models.keys()} ({ROOT})"
    return build_site(tmp_path_factory.mktemp("site"), models=models, docs="auto")  # the book where mkdocs is


@pytest.fixture(scope="session")
def hub_dir(tmp_path_factory, site) -> Path:
    """A hub-layout copy of the Llama demo under ember-test/llama/resolve/main/, and the Whisper demo with
    q8_0 GGUF weights under ember-test/whisper-q8/resolve/main/."""
    hub = tmp_path_factory.mktemp("hub")
    main = hub / "ember-test" / "llama" / "resolve" / "main"
    main.mkdir(parents=True)
    demo = next((site / "models").glob("llama-*"))
    for f in demo.iterdir():
        shutil.copy(f, main / f.name)
    with open(hub / "huge.safetensors", "wb") as f:  # 2 GiB, sparse: costs no disk
        f.truncate(2 << 30)
    from ember.models.whisper.gguf import convert_to_gguf  # and tiny.en quantized: a model.gguf folder
    convert_to_gguf(next((site / "models").glob("whisper-*")), hub / "ember-test" / "whisper-q8" / "resolve" / "main",
                    "q8_0")
    return hub


@pytest.fixture(scope="session")
def server(site, hub_dir):
    s = Server(site, hub_dir)
    yield s
    s.close()


# ---------------------------------------------------------------------------- the browser

@pytest.fixture(scope="session")
def playwright_session():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"e2e needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        yield pw


# ---------------------------------------------------------------------------- native references

@pytest.fixture(scope="session")
def native_whisper(site):
    from ember.models.whisper.load import load_whisper
    model, _, tok = load_whisper(next((site / "models").glob("whisper-*")))
    return model, tok


@pytest.fixture(scope="session")
def native_llama(site):
    from ember.models.llama.load import load_llama
    return load_llama(str(next((site / "models").glob("llama-*"))))


@pytest.fixture(scope="session")
def native_yolo(site):
    from ember.models.yolo.load import load_model
    return load_model(next((site / "models").glob("yolov8s-*")) / "model.safetensors")


