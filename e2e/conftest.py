"""Shared fixtures for the browser tests: a `build-web` site, a plain static server that logs requests,
Debian's Chromium under Playwright (never `playwright install`), and the fixed inputs.

The site is built once per session into a temporary folder. A Llama demo model is taken from
models/llama/demo when its trainer has shipped one; otherwise a small seeded Llama with a BPE tokenizer
trained on CPython's help texts is written for the test (parity does not need trained weights).
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
CACHE = Path.home() / ".cache" / "ember" / "e2e"
ARTIFACTS = Path(__file__).with_name("artifacts")
READY_S = 240      # Pyodide start under heavy load took ~15-30 s; generous, but it fails clearly
RUN_S = 420        # one model run on the CPU in wasm (Whisper tiny.en or YOLOv8s: ~100 s here)
SPEECH = "The quick brown fox jumps over the lazy dog."


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long parity runs (run once, not per parameter)")


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
            subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(dest)], check=True)
    return dest


@pytest.fixture(scope="session")
def bus_png() -> Path:
    """bus.jpg from the ultralytics wheel, re-encoded losslessly as PNG. Why not the JPEG itself: Pyodide's
    Pillow 10.2 and the native Pillow decode JPEG differently (18 % of bus.jpg's pixels differ, by up to
    46 levels), so a JPEG would compare two different images; PNG decodes bit-identically in both."""
    from PIL import Image

    from ember.models.yolo.fetch import ensure_file
    dest = CACHE / "bus.png"
    if not dest.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        with Image.open(ensure_file("bus.jpg")) as im:
            im.convert("RGB").save(dest)
    return dest


# ---------------------------------------------------------------------------- the site

def _test_llama(folder: Path) -> Path:
    """A small seeded Llama in Hugging Face layout (the stand-in when no demo model is shipped)."""
    import ember
    from ember.models.llama.config import LlamaConfig
    from ember.models.llama.corpus import build_corpus, train_tokenizer
    from ember.models.llama.load import save_pretrained
    from ember.models.llama.model import Llama
    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "src-tokenizer.json").write_text(train_tokenizer(build_corpus()[:200_000], 512))
    ember.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, dim=64, hidden_dim=172, n_layers=2, n_heads=4, n_kv_heads=2,
                      max_seq_len=512, bos_token_id=0, eos_token_ids=[1])
    save_pretrained(Llama(cfg), str(folder), tokenizer_json=str(folder / "src-tokenizer.json"))
    (folder / "src-tokenizer.json").unlink()
    return folder


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    from ember.wasm.serve import ROOT, build_site, demo_models
    models = demo_models()
    if "llama" not in models:
        d = _test_llama(CACHE / "llama-test")
        models["llama"] = {"id": "llama-test", "label": "Llama test model (seeded, untrained)",
                           "files": {n: d / n for n in ("config.json", "model.safetensors", "tokenizer.json")}}
    assert {"whisper", "yolo", "llama"} <= models.keys(), f"demo models missing: {models.keys()} ({ROOT})"
    return build_site(tmp_path_factory.mktemp("site"), models=models)


class Server:
    """python's http.server over the site (a plain static host), logging every path requested. /hub/ maps to
    a second folder laid out like the Hugging Face hub (<id>/resolve/main/<file>)."""

    def __init__(self, root: Path, hub: Path):
        from ember.wasm.serve import Handler
        self.requests: list[str] = []
        log = self.requests

        class Logged(Handler):
            def translate_path(self, path):
                if path.startswith("/hub/"):
                    return str(hub / path[len("/hub/"):].split("?")[0])
                return super().translate_path(path)

            def do_GET(self):
                log.append(self.path)
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Logged, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def hub_dir(tmp_path_factory, site) -> Path:
    """A hub-layout copy of the Llama demo under ember-test/llama/resolve/main/."""
    hub = tmp_path_factory.mktemp("hub")
    main = hub / "ember-test" / "llama" / "resolve" / "main"
    main.mkdir(parents=True)
    demo = next((site / "models").glob("llama-*"))
    for f in demo.iterdir():
        shutil.copy(f, main / f.name)
    with open(hub / "huge.safetensors", "wb") as f:  # 2 GiB, sparse: costs no disk
        f.truncate(2 << 30)
    return hub


@pytest.fixture(scope="session")
def server(site, hub_dir):
    s = Server(site, hub_dir)
    yield s
    s.close()


# ---------------------------------------------------------------------------- the browser

class App:
    """One page of the app in a fresh Chromium profile, with its console errors collected."""

    def __init__(self, pw, url: str):
        self.profile = tempfile.mkdtemp(prefix="ember-e2e-")
        self.ctx = pw.chromium.launch_persistent_context(self.profile, executable_path=CHROMIUM, headless=True,
                                                         args=ARGS, viewport={"width": 1200, "height": 900})
        self.page = self.ctx.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url
        self.open()

    def open(self):
        t0 = time.perf_counter()
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready=true]", timeout=READY_S * 1000)
        self.ready_s = time.perf_counter() - t0

    def wait_result(self, selector: str, timeout_s: float = RUN_S) -> dict | None:
        """The JSON result the app put on `selector`, or None when it showed a message instead."""
        import json
        self.page.wait_for_function(
            f"document.querySelector('{selector}').dataset.json !== undefined || !document.querySelector('#message').hidden",
            timeout=timeout_s * 1000)
        raw = self.page.eval_on_selector(selector, "e => e.dataset.json")
        return None if raw is None else json.loads(raw)

    def message(self) -> str:
        return "" if self.page.is_hidden("#message") else self.page.inner_text("#message .text")

    def set_range(self, selector: str, value):
        self.page.eval_on_selector(selector, f"e => {{ e.value = '{value}'; e.dispatchEvent(new Event('input')); }}")

    def generate(self, prompt: str, max_tokens: int, temperature=0, seed=0):
        self.page.click("#tab-llama")
        self.page.fill("#prompt", prompt)
        self.set_range("#temperature", temperature)
        self.page.fill("#max-tokens", str(max_tokens))
        self.page.fill("#seed", str(seed))
        self.page.click("#generate")

    def screenshot(self, name: str):
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    def close(self):
        self.ctx.close()
        shutil.rmtree(self.profile, ignore_errors=True)


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


def whisper_reference(native_whisper, wav: Path) -> dict:
    """What `ember whisper --json --timestamps` prints, via the Python API."""
    from ember.models.whisper.transcribe import transcribe
    model, tok = native_whisper
    r = transcribe(model, tok, str(wav), timestamps=True)
    return {"text": r["text"].strip(), "segments": [{k: s[k] for k in ("start", "end", "text", "tokens")}
                                                    for s in r["segments"]]}


def llama_reference(native_llama, prompt: str, max_tokens: int) -> dict:
    """What `ember llama PROMPT --temperature 0 --seed 0 -n N --json` prints, via the Python API."""
    from ember.models.llama.generate import SamplingParams, TextStream, generate
    model, tok = native_llama
    ids = tok.encode(prompt, bos=True)
    stream = TextStream(generate(model, ids, max_tokens, SamplingParams(0.0, 0, 0.9, 1.0, 0), tok.eos_ids), tok)
    text = "".join(stream)
    return {"prompt_tokens": ids, "tokens": list(stream.stats.tokens), "text": text}


def yolo_reference(native_yolo, image: Path) -> list[dict]:
    """What `ember yolo IMAGE --json` prints, via the Python API."""
    from ember.models.yolo.cli import _rounded
    from ember.models.yolo.predict import detect
    return [_rounded(d) for d in detect(native_yolo, str(image))]


def assert_same_detections(got: list[dict], ref: list[dict]):
    """Same boxes, classes and order; numbers within float32 summation-order noise (wasm numpy has no
    BLAS, so sums run in another order than native numpy's)."""
    assert [d["label"] for d in got] == [d["label"] for d in ref], (got, ref)
    assert [d["class"] for d in got] == [d["class"] for d in ref]
    for g, r in zip(got, ref):
        assert abs(g["score"] - r["score"]) < 2e-3, (g, r)
        assert max(abs(a - b) for a, b in zip(g["box"], r["box"])) < 0.5, (g, r)
