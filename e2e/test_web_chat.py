"""SmolLM2-135M-Instruct (the real Q4_1 GGUF) as the app's chat demo on the CPU in Chromium, from a `build-web`
site that bundles it from ember's cache: the page shows the chat UI for it; a reply through
ember.chat.completions.create has the tokens native CPython gives for the same conversation and seed (the
prompt's ids too); the second turn prefills only its own tokens; streaming yields the same text; the chat UI
sends, streams and regenerates. Prints the page's decode tokens/s (one thread)."""
from __future__ import annotations

import json

import pytest
from web_app import App, Server

from expected_skips import missing

TURN1 = [{"role": "user", "content": "What is the capital of France?"}]
# the page's chat computes in deterministic mode by default, so its tokens are native deterministic mode's to the bit;
# every sampling setting is given (the page's defaults are not SamplingParams'), top_k on Gemma-style bounded heads
OPTS = {"max_tokens": 8, "temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 7}


@pytest.fixture(scope="module")
def chat_site(tmp_path_factory):
    from ember.wasm.serve import build_site
    from ember.wasm.tools.llama import cached_smollm2_demo
    demo = cached_smollm2_demo()
    if demo is None:
        missing("SmolLM2-135M-Instruct GGUF not fetched (ember.models.text.smollm2)")
    return build_site(tmp_path_factory.mktemp("chat-site"), models={"llama": [demo]}, quiet=True), demo


@pytest.fixture(scope="module")
def app(playwright_session, chat_site, tmp_path_factory):
    server = Server(chat_site[0], tmp_path_factory.mktemp("no-hub"))
    a = App(playwright_session, f"{server.url}?device=cpu")
    yield a
    a.close()
    server.close()


@pytest.fixture(scope="module")
def native(chat_site):
    from ember.models.common.chat import ChatEngine
    from ember.models.text import load_text_model
    model, tok = load_text_model(next(iter(chat_site[1]["files"].values())))
    return ChatEngine(model, tok)


def _native(engine, messages, opts):
    """The desktop's reply in deterministic mode: its float products in the page's C sources (BLAS sums in another
    order, and a sampled token can follow a last-bit difference)."""
    from ember.backends.cpu_matmul import set_deterministic
    from ember.models.common.generate import SamplingParams
    was = set_deterministic(True)
    try:
        reply = engine.reply(messages, opts["max_tokens"], SamplingParams(opts["temperature"], opts["top_k"],
                                                                         opts["top_p"], 1.0, opts["seed"]))
        return reply.text(), reply
    finally:
        set_deterministic(was)


def _page_chat(app, messages, opts, stream=False):
    return app.page.evaluate("""async ([messages, opts, stream]) => {
        if (!window.__chatEmber) {  // the public JS API in the page, beside the app's own instance
            const { createEmber } = await import("./ember.js");
            window.__chatEmber = await createEmber({ device: "cpu" });
            await window.__chatEmber.loadModel("llama", "demo:smollm2-135m-instruct");
        }
        const e = window.__chatEmber;
        if (!stream) return await e.chat.completions.create({ messages, ...opts });
        let text = "", last = null;
        for await (const c of await e.chat.completions.create({ messages, ...opts, stream: true })) {
            text += c.choices[0].delta.content || ""; last = c; }
        return { text, last };
    }""", [messages, opts, stream])


def test_chat_in_the_page_equals_native(app, native):
    assert app.page.is_visible("#chat") or (app.page.click("#tab-llama") or app.page.is_visible("#chat"))
    assert app.page.is_hidden("#completion")
    page1 = _page_chat(app, TURN1, OPTS)
    text1, ref1 = _native(native, TURN1, OPTS)
    e1 = page1["ember"]
    assert e1["prompt_tokens"] == ref1.prompt_ids and e1["tokens"] == ref1.result.tokens
    assert page1["choices"][0]["message"]["content"] == text1
    turn2 = TURN1 + [{"role": "assistant", "content": text1}, {"role": "user", "content": "And of Germany?"}]
    page2 = _page_chat(app, turn2, OPTS)
    text2, ref2 = _native(native, turn2, OPTS)  # native's engine holds turn 1 as the page's does
    e2 = page2["ember"]
    assert e2["tokens"] == ref2.result.tokens and e2["prefill_tokens"] == ref2.result.prefill_tokens
    assert e2["prefill_tokens"] < len(e2["prompt_tokens"]) - e1["prefill_tokens"] + 2  # only the new turn
    print(f"page chat: turn 1 prefilled {e1['prefill_tokens']} tokens (first token after {e1['ttft_ms']:.0f} ms), "
          f"turn 2 {e2['prefill_tokens']} of {len(e2['prompt_tokens'])} (first token after {e2['ttft_ms']:.0f} ms); "
          f"decode {e2['tokens_per_s']:.1f} tokens/s on one thread")
    streamed = _page_chat(app, turn2, OPTS, stream=True)
    again = _page_chat(app, turn2, OPTS)
    assert streamed["text"] == again["choices"][0]["message"]["content"]
    assert streamed["last"]["choices"][0]["finish_reason"] == again["choices"][0]["finish_reason"]


def test_chat_ui_sends_streams_and_regenerates(app):
    page = app.page
    page.click("#tab-llama")
    page.fill("#chat-input", "Name a fruit.")
    page.fill("#chat-max-tokens", "12")
    page.click("#chat-send")
    page.wait_for_function("document.querySelector('#chat').dataset.json !== undefined "
                           "|| !document.querySelector('#message').hidden", timeout=600_000)
    first = json.loads(page.eval_on_selector("#chat", "e => e.dataset.json"))
    assert page.locator(".chat-msg.user").count() == 1 and page.locator(".chat-msg.assistant").count() == 1
    assert page.inner_text(".chat-msg.assistant") == first["text"] and "tokens/s" in page.inner_text("#chat-stats")
    page.eval_on_selector("#chat", "e => { delete e.dataset.json; }")
    page.click("#chat-regenerate")
    page.wait_for_function("document.querySelector('#chat').dataset.json !== undefined", timeout=600_000)
    assert page.locator(".chat-msg.assistant").count() == 1
    page.click("#chat-clear")
    assert page.locator(".chat-msg").count() == 0
    assert not app.errors, app.errors
