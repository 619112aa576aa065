"""Gemma 3 270M (the real Q4_K_M GGUF, 253 MB) in the app on the CPU in Chromium, from a `build-web` site that
bundles it from ember's cache as the text tool's main demo: the tokens equal native CPython's for the same
prompt and seed (sampled with the page's top-k and without, and greedy, a few tokens to keep CI short), they stream with a tokens/s figure, and a
reload takes the weights from the Cache API instead of downloading them again."""
from __future__ import annotations

import pytest
from web_app import App, Server

from expected_skips import missing

PROMPT = "The capital of France is"
N = 4


@pytest.fixture(scope="module")
def gemma_site(tmp_path_factory):
    from ember.wasm.tools.llama import cached_gemma_demo
    from ember.wasm.serve import build_site
    demo = cached_gemma_demo()
    if demo is None:
        missing("Gemma 3 270M GGUF not fetched (ember.models.gemma3.fetch)")
    return build_site(tmp_path_factory.mktemp("gemma-site"), models={"llama": [demo]}, quiet=True), demo


@pytest.fixture(scope="module")
def gemma_server(gemma_site, tmp_path_factory):
    s = Server(gemma_site[0], tmp_path_factory.mktemp("no-hub"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def app(playwright_session, gemma_server):
    a = App(playwright_session, f"{gemma_server.url}?device=cpu")
    yield a
    a.close()


@pytest.fixture(scope="module")
def native(gemma_site):
    from ember.models.gemma3.load import load_gguf
    return load_gguf(next(iter(gemma_site[1]["files"].values())))


def _reference(native, temperature, seed, top_k=0):
    from ember.models.common.generate import SamplingParams, TextStream, generate
    model, tok = native
    ids = tok.encode(PROMPT, bos=True)
    stream = TextStream(generate(model, ids, N, SamplingParams(temperature, top_k, 0.9, 1.0, seed), tok.eos_ids), tok)
    text = "".join(stream)
    return {"prompt_tokens": ids, "tokens": list(stream.stats.tokens), "text": text}


def _generate(app, temperature, seed, top_k=None):
    app.page.eval_on_selector("#llama-output", "e => { delete e.dataset.json; }")
    app.generate(PROMPT, N, temperature=temperature, seed=seed, top_k=top_k)
    return app.wait_result("#llama-output", timeout_s=600)


def test_gemma_is_the_main_text_demo(app):
    app.page.click("#tab-llama")
    first = app.page.eval_on_selector("#picker-llama .demo", "s => s.options[0].textContent")
    assert first.startswith("Gemma 3 270M") and "253 MB" in first


def test_sampled_and_greedy_tokens_match_native(app, native, gemma_server):
    got = _generate(app, 0.8, 7)  # the page's default top-k (40): only the rows that can be among them computed
    assert got is not None, app.message()
    topk_tps = got["tokens_per_s"]
    ref = _reference(native, 0.8, 7, top_k=40)
    assert got["prompt_tokens"] == ref["prompt_tokens"] and got["tokens"] == ref["tokens"]
    assert app.page.inner_text("#llama-output .gen") == ref["text"]
    got = _generate(app, 0.8, 7, top_k=0)  # top-p alone: every logit and the sampler
    assert got is not None, app.message()
    sampled_tps = got["tokens_per_s"]
    assert got["tokens"] == _reference(native, 0.8, 7)["tokens"]
    assert "tokens/s" in app.page.inner_text("#llama-stats")
    assert "M parameters" in app.page.inner_text("#picker-llama .model-status")
    got = _generate(app, 0, 0)
    assert got is not None, app.message()
    assert got["tokens"] == _reference(native, 0.0, 0)["tokens"]
    print(f"\nGemma 3 270M in Chromium (CPU): {got['tokens_per_s']} tok/s greedy decode, {topk_tps} sampled "
          f"(top-k 40), {sampled_tps} sampled (top-p alone, every logit)")
    app.screenshot("gemma-cpu.png")
    assert sum("gemma-3-270m-q4_k_m.gguf" in r for r in gemma_server.requests) == 1
    assert not app.errors, app.errors


def test_reload_reads_the_gguf_from_the_cache(app, gemma_server):
    app.open()
    got = _generate(app, 0, 0)
    assert got is not None, app.message()
    assert sum("gemma-3-270m-q4_k_m.gguf" in r for r in gemma_server.requests) == 1  # still the first download
