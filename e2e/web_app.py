"""Helpers for the browser tests and bench/bench_web.py: the static server that logs requests, one app page in
Debian's Chromium under Playwright (never `playwright install`), the seeded Llama stand-in, and the native
references each page result is compared with (the Python API doing what the CLI's --json prints)."""
from __future__ import annotations

import contextlib
import functools
import json
import shutil
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from ember.hub import cache_dir

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
CACHE = cache_dir("e2e")
ARTIFACTS = Path(__file__).with_name("artifacts")
READY_S = 240      # Pyodide start under heavy load took ~15-30 s; generous, but it fails clearly
RUN_S = 420        # one model run on the CPU in wasm (Whisper tiny.en, YOLOv8s: ~10 s idle, ~110 s at load 15)
SPEECH = "The quick brown fox jumps over the lazy dog."
FAKE_MEDIA = ("--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream", "--autoplay-policy=no-user-gesture-required")
AXE_VERSION = "4.10.3"  # npm axe-core: the accessibility audit the e2e tests run in the page



def axe_source() -> Path:
    """axe.min.js of npm's axe-core AXE_VERSION, fetched once with `npm pack` into the e2e cache."""
    import subprocess
    import tarfile
    dest = CACHE / f"axe-core-{AXE_VERSION}" / "axe.min.js"
    if not dest.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", f"axe-core@{AXE_VERSION}", "--silent"], cwd=tmp, check=True,
                           capture_output=True, timeout=300)
            with tarfile.open(Path(tmp) / f"axe-core-{AXE_VERSION}.tgz") as tar:
                data = tar.extractfile("package/axe.min.js").read()
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.with_suffix(".tmp").write_bytes(data)
        dest.with_suffix(".tmp").replace(dest)
    return dest


def axe_violations(page, context: str = "document") -> list[dict]:
    """axe-core's serious and critical violations on the page as it is now: [{id, impact, nodes: [selector]}]."""
    if not page.evaluate("() => typeof axe === 'object'"):
        page.add_script_tag(path=str(axe_source()))
    return page.evaluate(f"""async () => (await axe.run({context}, {{resultTypes: ['violations']}})).violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => ({{id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' '))}}))""")


def seeded_llama_folder(folder: Path) -> Path:
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


# what a host sends to make the page cross-origin isolated (SharedArrayBuffer: Python's interrupt buffer)
ISOLATED = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}


class Server:
    """ember serve's bounded http.server over the site (a plain static host), logging every path requested. /hub/
    maps to a second folder laid out like the Hugging Face hub (<id>/resolve/main/<file>). isolate=False: without
    the cross-origin isolation headers `ember serve` sends (a host that cannot set them). headers: sent with every
    response besides (those isolation already sends are not sent twice: a repeated COEP is no policy);
    slow_bps: paths with /slow/ in them trickle at that many bytes per second."""

    def __init__(self, root: Path, hub: Path, isolate: bool = True, headers: dict | None = None,
                 slow_bps: float | None = None):
        from ember.httpd import BoundedServer
        from ember.wasm.serve import ISOLATION_HEADERS, Handler
        self.requests: list[str] = []
        log, isolate_headers = self.requests, isolate
        headers = {k: v for k, v in (headers or {}).items() if not (isolate and k in ISOLATION_HEADERS)}

        class Logged(Handler):
            isolate = isolate_headers

            def resolve(self, url_path):  # (SiteHandler's: the site's regular files, and the hub folder's)
                if url_path.startswith("/hub/"):
                    f = hub / urllib.parse.unquote(url_path[len("/hub/"):].split("?")[0])
                    return str(f) if f.is_file() else None
                return super().resolve(url_path)

            def do_GET(self):
                log.append(self.path)
                super().do_GET()

            def end_headers(self):
                for k, v in headers.items():
                    self.send_header(k, v)
                super().end_headers()

            def copyfile(self, source, outputfile):
                if not (slow_bps and "/slow/" in self.path):
                    return super().copyfile(source, outputfile)
                try:
                    for block in iter(lambda: source.read(1 << 16), b""):
                        outputfile.write(block)
                        time.sleep(len(block) / slow_bps)
                except (BrokenPipeError, ConnectionResetError):  # the page cancelled the download
                    pass

        self.httpd = BoundedServer(("127.0.0.1", 0), functools.partial(Logged, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class App:
    """One page of the app in a fresh Chromium profile, with its console errors collected. args: Chromium
    switches beyond ARGS (FAKE_MEDIA: a fake camera and microphone, allowed without asking)."""

    def __init__(self, pw, url: str, args: tuple[str, ...] = ()):
        self.profile = tempfile.mkdtemp(prefix="ember-e2e-")
        self.ctx = pw.chromium.launch_persistent_context(self.profile, executable_path=CHROMIUM, headless=True,
                                                         args=ARGS + list(args), viewport={"width": 1200, "height": 900})
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

    def train_until_step(self, config: dict, step: int, timeout_s: float = RUN_S):
        """Start the training tool with `config` (epochs, batch_size, lr, seed) and return once it reports a
        step >= `step` (single digit) or shows a message; the caller pauses, stops or waits."""
        page = self.page
        for field, key in (("#train-epochs", "epochs"), ("#train-batch", "batch_size"), ("#train-lr", "lr"),
                           ("#train-seed", "seed")):
            page.fill(field, str(config[key]))
        page.click("#train-start")
        page.wait_for_function(f"/step [{step}-9]\\//.test(document.querySelector('#train-stats').textContent)"
                               " || !document.querySelector('#message').hidden", timeout=timeout_s * 1000)

    def wait_result(self, selector: str, timeout_s: float = RUN_S) -> dict | None:
        """The JSON result the app put on `selector`, or None when it showed a message instead."""
        self.page.wait_for_function(
            f"document.querySelector('{selector}').dataset.json !== undefined || !document.querySelector('#message').hidden",
            timeout=timeout_s * 1000)
        raw = self.page.eval_on_selector(selector, "e => e.dataset.json")
        return None if raw is None else json.loads(raw)

    def load_hub(self, tool: str, hub_id: str):
        """Load `tool`'s model from a hub id through its picker; returns once it is loaded or a message shows."""
        picker = f"#picker-{tool}"
        self.page.select_option(f"{picker} .kind", "hub")
        self.page.fill(f"{picker} .hub", hub_id)
        self.page.click(f"{picker} .load")
        self.page.wait_for_function(f"/Loaded/.test(document.querySelector('{picker} .model-status').textContent)"
                                    " || !document.querySelector('#message').hidden", timeout=RUN_S * 1000)

    def message(self) -> str:
        return "" if self.page.is_hidden("#message") else self.page.inner_text("#message .text")

    def set_range(self, selector: str, value):
        self.page.eval_on_selector(selector, f"e => {{ e.value = '{value}'; e.dispatchEvent(new Event('input')); }}")

    def generate(self, prompt: str, max_tokens: int, temperature=0, seed=0, top_k=None):
        self.page.click("#tab-llama")
        self.page.fill("#prompt", prompt)
        self.set_range("#temperature", temperature)
        if top_k is not None:  # else the page's default
            self.page.fill("#top-k", str(top_k))
        self.page.fill("#max-tokens", str(max_tokens))
        self.page.fill("#seed", str(seed))
        self.page.click("#generate")

    def screenshot(self, name: str):
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    def wait_idle(self, timeout_s: float = RUN_S):
        """Until no tool's job runs (guard.js)."""
        self.page.wait_for_function("window.emberApp && !window.emberApp.busy()", timeout=timeout_s * 1000)

    def close(self):
        self.ctx.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def tiled_wav(dest: Path, clip: Path, seconds: int) -> Path:
    """`clip` (16 kHz mono 16-bit) repeated with 1 s of silence between copies, cut to `seconds`."""
    import wave

    import numpy as np
    if dest.is_file():
        return dest
    with wave.open(str(clip)) as w:
        one = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    unit = np.concatenate([one, np.zeros(16000, "<i2")])
    pcm = np.resize(unit, seconds * 16000)
    with wave.open(str(dest), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(pcm.tobytes())
    return dest


@contextlib.contextmanager
def site_page(pw, models: dict, query: str = "?device=cpu"):
    """(App, Server) over a `build-web` site bundling just `models` ({tool: [demo entries]}) in a temporary
    folder, with no hub behind it: how a test or bench gets a large cached demo (Gemma 3, Whisper base) offline."""
    from ember.wasm.serve import build_site
    with tempfile.TemporaryDirectory(prefix="ember-site-") as tmp:
        site = build_site(Path(tmp) / "site", models=models, quiet=True)
        (Path(tmp) / "hub").mkdir()
        server = Server(site, Path(tmp) / "hub")
        try:
            app = App(pw, server.url + query)
            try:
                yield app, server
            finally:
                app.close()
        finally:
            server.close()


def assert_same_segments(got: list, ref: list):
    """The page's Whisper segments equal the desktop's bit for bit, but for the words' probabilities: a softmax
    through each side's numpy exp (Pyodide's and the desktop's differ in the last bit), not the shared C kernels;
    those agree to 1e-6."""
    import numpy as np

    def fields(segments):
        return [{**s, "words": [{**w, "probability": None} for w in s.get("words", [])]} for s in segments]
    assert fields(got) == fields(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose([w["probability"] for w in a.get("words", [])],
                                   [w["probability"] for w in b.get("words", [])], rtol=1e-6, atol=0)


def whisper_reference(native_whisper, wav: Path, words: bool = True) -> dict:
    """What `ember whisper --json --timestamps --word-timestamps --deterministic` prints, via the Python API (the
    page transcribes in deterministic mode, with word timestamps for its highlighting)."""
    from ember.backends.cpu_matmul import set_deterministic
    from ember.models.whisper.transcribe import transcribe
    model, tok = native_whisper
    was = set_deterministic(True)
    try:
        r = transcribe(model, tok, str(wav), timestamps=True, word_timestamps=words)
    finally:
        set_deterministic(was)
    keys = ("start", "end", "text", "tokens") + (("words",) if words else ())
    return {"text": r["text"].strip(), "segments": [{k: s[k] for k in keys} for s in r["segments"]]}


def llama_reference(native_llama, prompt: str, max_tokens: int) -> dict:
    """What `ember llama PROMPT --temperature 0 --seed 0 -n N --json` prints, via the Python API."""
    from ember.models.common.generate import SamplingParams, TextStream, generate
    model, tok = native_llama
    ids = tok.encode(prompt, bos=True)
    stream = TextStream(generate(model, ids, max_tokens, SamplingParams(0.0, 0, 0.9, 1.0, 0), tok.eos_ids), tok)
    text = "".join(stream)
    return {"prompt_tokens": ids, "tokens": list(stream.stats.tokens), "text": text}


def yolo_reference(native_yolo, image: Path, conf: float = 0.25) -> list[dict]:
    """What `ember yolo IMAGE --conf CONF --json` prints, via the Python API."""
    from ember.models.yolo.predict import detect, rounded
    return [rounded(d) for d in detect(native_yolo, str(image), conf=conf)]


def assert_same_detections(got: list[dict], ref: list[dict]):
    """Same boxes, classes and order; numbers within float32 summation-order noise (wasm numpy has no
    BLAS, so sums run in another order than native numpy's)."""
    assert [d["label"] for d in got] == [d["label"] for d in ref], (got, ref)
    assert [d["class"] for d in got] == [d["class"] for d in ref]
    for g, r in zip(got, ref):
        assert abs(g["score"] - r["score"]) < 2e-3, (g, r)
        assert max(abs(a - b) for a, b in zip(g["box"], r["box"])) < 0.5, (g, r)
