"""The page's kernel pool in Chromium (web/pool.js, core/backends/cpu_pool.py): Whisper tiny.en's transcript, YOLOv8s's
boxes, MiniLM's embeddings and Gemma 3 270M's tokens are the same bits on 1 and 3 threads (2, this machine's
default, is what the other e2e runs compare with native), and Gemma's tokens on 3 threads are native's; a page
that is not cross-origin isolated runs on one thread and says why (and from its next
visit its service worker isolates it, the headers added); a model URL on
another origin loads under isolation (a second server that sends CORS headers); a pool worker terminated mid-run
ends the run in an error (announced: at once; unannounced: within the pool's timeout), after which the page runs
on one thread with the same results; bad `threads` values are refused with a message.

Each runtime is a bare page of the site (its config.json) driving ember.js, as bench/bench_web.py does."""
from __future__ import annotations

import functools
import http.server
import shutil
import threading
import time

import pytest
from web_app import ARGS, CHROMIUM, Server

from expected_skips import missing

PROMPT = "The capital of France is"
SENTENCES = ["A man is eating food.", "A man is riding a horse.", "The new movie is awesome.",
             "Two men pushed carts through the woods.", "A monkey is playing drums."]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from ember.wasm.serve import build_site, demo_models
    from ember.wasm.tools.llama import cached_gemma_demo
    models = {k: v for k, v in demo_models(extra=False).items() if k in ("whisper", "yolo", "embed")}
    gemma = cached_gemma_demo()
    if gemma is None:
        missing("Gemma 3 270M GGUF not fetched (ember.models.gemma3.fetch)")
    models["llama"] = [gemma]
    assert set(models) == {"whisper", "yolo", "embed", "llama"}, models.keys()
    return build_site(tmp_path_factory.mktemp("threads-site"), models=models, quiet=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, clip_wav, bus_png):
    d = tmp_path_factory.mktemp("threads-hub")
    shutil.copy(clip_wav, d / "fox.wav")
    shutil.copy(bus_png, d / "bus.png")
    return d


@pytest.fixture(scope="module")
def server(site, inputs):
    s = Server(site, inputs)
    yield s
    s.close()


@pytest.fixture()
def page(playwright_session, tmp_path):
    ctx = playwright_session.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                                headless=True, args=ARGS)
    p = ctx.new_page()
    p.set_default_timeout(900_000)
    yield p
    ctx.close()


def _open(page, url):
    page.goto(url + "config.json")  # a bare page of the site
    page.evaluate("async () => { window.__m = await import('./ember.js'); }")


START = """async (opts) => { window.__e = await window.__m.createEmber({device: 'cpu', ...opts});
  return {threads: __e.threads, reason: __e.threadsReason}; }"""
JOBS = """() => __e._pool ? Atomics.load(new Int32Array(__e._pool.memory.buffer, __e._pool.ctlAt, 16), 13) : 0"""
RUN_ALL = """async ({sentences, prompt}) => {
  const e = window.__e, out = {};
  await e.loadModel('whisper', 'demo');
  const t = await e.transcribe(await (await fetch('hub/fox.wav')).blob());
  out.whisper = {text: t.text, tokens: t.segments.map((s) => s.tokens)};
  await e.loadModel('yolo', 'demo');
  out.yolo = Array.from(await e.detect(await (await fetch('hub/bus.png')).blob()));
  await e.loadModel('embed', 'demo');
  out.embed = (await e.embed(sentences)).map((v) => Array.from(v));
  await e.loadModel('llama', 'demo');
  const g = await e.generate(prompt, {temperature: 0, max_new_tokens: 6});
  out.llama = {prompt_tokens: g.prompt_tokens, tokens: g.tokens};
  return out; }"""


def test_results_are_the_same_bits_on_1_and_3_threads(page, server, site):
    # (2 threads, this machine's default, is what every other e2e run compares with native)
    got = {}
    for n in (1, 3):
        _open(page, server.url)
        info = page.evaluate(START, {"threads": n})
        assert info["threads"] == n, info
        got[n] = page.evaluate(RUN_ALL, {"sentences": SENTENCES, "prompt": PROMPT})
        got[n]["jobs"] = page.evaluate(JOBS)
        page.evaluate("() => __e.terminate()")
    assert got[1]["jobs"] == 0 and got[3]["jobs"] > 100  # the pool ran them
    for tool in ("whisper", "yolo", "embed", "llama"):
        assert got[3][tool] == got[1][tool], tool  # JSON floats: float32 values compare exactly
    assert got[1]["whisper"]["text"].strip() and got[1]["yolo"] and len(got[1]["embed"]) == len(SENTENCES)
    # Gemma on 3 threads: native's tokens (the decode step's bits are native's: tests/test_pool_pyodide.py)
    from ember.models.common.generate import SamplingParams, generate
    from ember.models.text import load_text_model
    model, tok = load_text_model(str(next((site / "models").glob("gemma-*")) / "gemma-3-270m-q4_k_m.gguf"))
    ids = tok.encode(PROMPT, bos=True)
    assert got[3]["llama"] == {"prompt_tokens": ids,
                               "tokens": list(generate(model, ids, 6, SamplingParams(temperature=0), tok.eos_ids))}


def test_a_page_that_is_not_isolated_runs_on_one_thread_says_why_and_is_isolated_by_its_service_worker_next_visit(
        page, site, inputs):
    plain = Server(site, inputs, isolate=False)
    try:
        _open(page, plain.url)
        info = page.evaluate(START, {})
        assert info["threads"] == 1 and "not cross-origin isolated" in info["reason"], info
        page.evaluate("() => __e.terminate()")
        page.goto(plain.url)  # the app says it in its device line
        page.wait_for_selector("body[data-ready=true]", timeout=300_000)
        line = page.eval_on_selector(".device-line", "e => e.textContent")
        assert "on 1 thread (this page is not cross-origin isolated" in line, line
        # the service worker (sw.js) adds the headers the host did not send: the next visit is isolated, on the pool
        page.evaluate("async () => { await navigator.serviceWorker.ready; }")
        page.reload()
        page.wait_for_selector("body[data-ready=true]", timeout=300_000)
        assert page.evaluate("crossOriginIsolated")
        line = page.eval_on_selector(".device-line", "e => e.textContent")
        cores = page.evaluate("navigator.hardwareConcurrency")
        assert f"on {min(cores, 8)} threads" in line, line
    finally:
        plain.close()


class _CORS(http.server.SimpleHTTPRequestHandler):
    cors = True

    def end_headers(self):
        if self.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()

    def log_message(self, *a):
        pass


def test_a_model_url_on_another_origin_loads_under_isolation(page, server, site):
    folder = next((site / "models").glob("yolov8s-*"))
    servers = {}
    for cors in (True, False):
        handler = functools.partial(type("H", (_CORS,), {"cors": cors}), directory=str(folder))
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers[cors] = httpd
    try:
        _open(page, server.url)
        assert page.evaluate(START, {"threads": 2})["threads"] == 2
        assert page.evaluate("() => self.crossOriginIsolated")
        other = f"http://127.0.0.1:{servers[True].server_address[1]}/model.safetensors"
        load = """async (url) => { try { const m = await __e.loadModel('yolo', url); return {ok: m.parameters > 0}; }
                    catch (err) { return {code: err.code, message: err.message}; } }"""
        assert page.evaluate(load, other) == {"ok": True}
        boxes = page.evaluate("async () => Array.from(await __e.detect(await (await fetch('hub/bus.png')).blob()))")
        page.evaluate("async () => __e.loadModel('yolo', 'demo')")
        assert boxes and boxes == page.evaluate(
            "async () => Array.from(await __e.detect(await (await fetch('hub/bus.png')).blob()))")
        refused = page.evaluate(load, f"http://127.0.0.1:{servers[False].server_address[1]}/model.safetensors")
        assert refused["code"] == "download", refused  # no CORS headers: the browser refuses it, the page says so
    finally:
        for s in servers.values():
            s.shutdown()
            s.server_close()


LOSE = """async ({announced}) => {
  const e = window.__e;
  let first;
  const started = new Promise((r) => { first = r; });
  const run = e.generate('Once upon a time', {temperature: 0, max_new_tokens: 200}, () => first());
  await started;  // mid-run: the decode steps' jobs go on
  const t0 = performance.now();
  if (announced) e._pool.terminate(1); else e._pool.workers[1].terminate();
  try { const r = await run; return {done: r.tokens.length, ms: performance.now() - t0}; }
  catch (err) { return {code: err.code, message: err.message, ms: performance.now() - t0, threads: e.threads,
                        reason: e.threadsReason}; } }"""


@pytest.mark.parametrize("announced", [True, False])
def test_a_worker_lost_mid_run_ends_it_in_an_error_and_the_page_goes_on(page, server, announced):
    _open(page, server.url)
    page.evaluate(START, {"threads": 1})
    page.evaluate("async () => __e.loadModel('llama', 'demo')")
    again = "async () => (await __e.generate('The capital of France is', {temperature: 0, max_new_tokens: 5})).tokens"
    want = page.evaluate(again)
    page.evaluate("() => __e.terminate()")
    _open(page, server.url)
    timeout_ms = 10_000 if announced else 3000  # announced: the loss is seen at once, not after the timeout
    assert page.evaluate(START, {"threads": 2, "poolTimeoutMs": timeout_ms})["threads"] == 2
    page.evaluate("async () => __e.loadModel('llama', 'demo')")
    t0 = time.perf_counter()
    got = page.evaluate(LOSE, {"announced": announced})
    assert time.perf_counter() - t0 < 300  # no hang
    if announced or "code" in got:  # (unannounced, a worker that was idle is never waited for: the run completes)
        assert got["code"] == "pool_lost", got
        assert "of the kernel pool" in got["message"] and "one thread from now on" in got["message"]
        assert got["threads"] == 1 and got["reason"], got
        assert got["ms"] < (timeout_ms / 2 if announced else timeout_ms + 10_000), got  # (a loaded machine: slack)
    assert page.evaluate(again) == want  # the runtime goes on, with the same results


def test_bad_thread_counts_are_refused_with_a_message(page, server):
    _open(page, server.url)
    check = """async (threads) => { try { await window.__m.createEmber({threads}); return null; }
               catch (e) { return {code: e.code, message: e.message}; } }"""
    for bad, words in ((0, "from 1 to 64"), (-1, "got -1"), (10 ** 6, "got 1000000"), ("x", 'got "x"'),
                       (2.5, "whole number")):
        got = page.evaluate(check, bad)
        assert got is not None and got["code"] == "bad_request" and words in got["message"], (bad, got)
