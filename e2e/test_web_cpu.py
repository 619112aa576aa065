"""The app on the CPU (numpy in wasm) in Chromium, from a `build-web` site on a plain static server: each
tool's output equals the native Python API's on the same model and input; errors are shown and the app
stays usable; a reload reads the weights from the Cache API; cancel stops a generation. One browser and
one page for the whole module (tests run in file order and build on each other's loaded models)."""
from __future__ import annotations

import pytest
from web_app import (RUN_S, App, assert_same_detections, assert_same_segments, llama_reference, whisper_reference,
                      yolo_reference)

PROMPT = "The for statement"


@pytest.fixture(scope="module")
def app(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=cpu&hub={server.url}hub")
    yield a
    a.close()


def test_ready_on_cpu_with_progress_at_100(app):
    assert app.page.inner_text("#status") == "Ready · CPU"
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    assert app.page.input_value("#device") == "cpu"


def test_bad_audio_file_shows_message_then_good_file_matches_native(app, tmp_path, clip_wav, native_whisper):
    bad = tmp_path / "notes.wav"
    bad.write_text("this is not audio")
    app.page.set_input_files("#audio-file", str(bad))
    app.page.wait_for_selector("#message:not([hidden])", timeout=RUN_S * 1000)
    assert "can't be used" in app.message() and "notes.wav" in app.message()

    app.page.set_input_files("#audio-file", str(clip_wav))
    got = app.wait_result("#transcript")
    assert got is not None, app.message()
    assert app.message() == ""
    ref = whisper_reference(native_whisper, clip_wav)
    assert got["text"] == ref["text"]
    assert_same_segments(got["segments"], ref["segments"])
    assert "fox" in got["text"].lower()  # and it is the real speech, not just equal garbage
    shown = app.page.inner_text("#transcript")
    assert all(s["text"].strip() in shown for s in ref["segments"])
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    # the words as spans (captions.js); the one under the player's position is highlighted
    words = [w for s in ref["segments"] for w in s["words"]]
    assert app.page.locator("#transcript .word").count() == len(words)
    w = words[len(words) // 2]
    app.page.wait_for_function("document.querySelector('#audio-player').readyState >= 1", timeout=RUN_S * 1000)
    app.page.evaluate("t => { document.querySelector('#audio-player').currentTime = t; }", (w["start"] + w["end"]) / 2)
    app.page.wait_for_function("w => document.querySelector('#transcript .word.current')?.textContent === w",
                               arg=w["word"], timeout=10_000)
    app.screenshot("whisper-cpu.png")


def test_quantized_whisper_from_the_hub_matches_native(app, server, hub_dir, clip_wav):
    # a folder with model.gguf instead of model.safetensors: the page asks for the safetensors (404,
    # optional), then the GGUF, and transcribes as the Python API does on the same folder
    from ember.models.whisper.load import load_whisper
    picker = "#picker-whisper"
    app.load_hub("whisper", "ember-test/whisper-q8")
    assert app.message() == ""
    assert "/hub/ember-test/whisper-q8/resolve/main/model.gguf" in server.requests
    app.page.set_input_files("#audio-file", str(clip_wav))
    got = app.wait_result("#transcript")
    assert got is not None, app.message()
    model, _, tok = load_whisper(hub_dir / "ember-test" / "whisper-q8" / "resolve" / "main")
    ref = whisper_reference((model, tok), clip_wav)
    assert got["text"] == ref["text"]
    assert_same_segments(got["segments"], ref["segments"])
    assert "fox" in got["text"].lower()
    app.page.select_option(f"{picker} .kind", "demo")
    app.page.click(f"{picker} .load")  # back to the demo for the tests after this one
    app.page.wait_for_function(f"(t => /Loaded/.test(t) && !/whisper-q8/.test(t))(document.querySelector("
                               f"'{picker} .model-status').textContent)", timeout=RUN_S * 1000)


def test_llama_greedy_matches_native_and_streams(app, native_llama):
    app.generate(PROMPT, 24)
    got = app.wait_result("#llama-output")
    assert got is not None, app.message()
    ref = llama_reference(native_llama, PROMPT, 24)
    assert got["prompt_tokens"] == ref["prompt_tokens"]
    assert got["tokens"] == ref["tokens"]
    assert got["text"] == ref["text"]
    assert "tokens/s" in app.page.inner_text("#llama-stats")
    assert app.page.inner_text("#llama-output .gen") == ref["text"]
    app.screenshot("llama-cpu.png")


def test_cancel_stops_generation_midway(app):
    # Stop is clicked inside the page when the first token's stats appear, not after a Playwright poll and click:
    # the demo model writes its ~250 tokens (up to its context) in about a second, which a loaded machine can
    # spend on that round trip (the run then ends by itself and nothing is left to cancel).
    app.page.evaluate("""() => {
        const stats = document.querySelector('#llama-stats'), stop = document.querySelector('#stop');
        new MutationObserver((_, observer) => {
            if (/^[1-9]\\d* tokens/.test(stats.textContent)) {
                observer.disconnect();
                if (!stop.disabled) stop.click();
            }
        }).observe(stats, { childList: true, characterData: true, subtree: true });
    }""")
    app.generate(PROMPT, 400, temperature=0.8)
    got = app.wait_result("#llama-output")
    assert got["stopped"] == "cancelled"
    assert 0 < len(got["tokens"]) < 400
    assert "stopped" in app.page.inner_text("#llama-stats")
    assert app.page.is_enabled("#generate")


def test_hub_id_resolves_to_resolve_main_urls(app, server, native_llama):
    app.load_hub("llama", "ember-test/llama")
    assert app.message() == ""
    assert "/hub/ember-test/llama/resolve/main/model.safetensors" in server.requests
    app.generate(PROMPT, 8)
    got = app.wait_result("#llama-output")
    assert got["tokens"] == llama_reference(native_llama, PROMPT, 8)["tokens"]


def test_missing_hub_model_shows_download_message(app):
    picker = "#picker-llama"
    app.page.fill(f"{picker} .hub", "ember-test/no-such-model")
    app.page.click(f"{picker} .load")
    app.page.wait_for_selector("#message:not([hidden])", timeout=RUN_S * 1000)
    assert "Couldn't download the model" in app.message() and "404" in app.message()
    app.page.select_option(f"{picker} .kind", "demo")  # usable again with the demo
    app.generate(PROMPT, 4)
    assert app.wait_result("#llama-output")["tokens"]


def test_local_files_load_and_match_native(app, site, native_llama):
    picker = "#picker-llama"
    files = sorted(str(f) for f in next((site / "models").glob("llama-*")).iterdir())
    app.page.click("#tab-llama")
    app.page.select_option(f"{picker} .kind", "file")
    app.page.set_input_files(f"{picker} .files", files)
    app.generate(PROMPT, 8)
    got = app.wait_result("#llama-output")
    assert got is not None, app.message()
    status = app.page.inner_text(f"{picker} .model-status")
    assert status.startswith("Loaded ") and "model.safetensors" in status.split(":")[0], status
    assert got["tokens"] == llama_reference(native_llama, PROMPT, 8)["tokens"]
    app.page.select_option(f"{picker} .kind", "demo")


def test_too_large_model_is_refused_before_download(app, server):
    picker = "#picker-yolo"
    app.page.click("#tab-yolo")
    app.page.select_option(f"{picker} .kind", "url")
    app.page.fill(f"{picker} .url", f"{server.url}hub/huge.safetensors")
    app.page.click(f"{picker} .load")
    app.page.wait_for_selector("#message:not([hidden])", timeout=RUN_S * 1000)
    assert "too large for the browser's memory" in app.message() and "2.00 GiB" in app.message()
    app.page.select_option(f"{picker} .kind", "demo")


def test_yolo_bad_image_then_bus_matches_native(app, tmp_path, bus_png, native_yolo):
    app.page.click("#tab-yolo")
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"broken" * 10)
    app.page.set_input_files("#image-file", str(bad))
    app.page.wait_for_selector("#message:not([hidden])", timeout=RUN_S * 1000)
    assert "can't be used" in app.message()

    app.page.set_input_files("#image-file", str(bus_png))
    got = app.wait_result("#detections")
    assert got is not None, app.message()
    assert_same_detections(got, yolo_reference(native_yolo, bus_png))
    rows = app.page.locator("#detections tbody tr").count()
    assert rows == len(got) > 0
    assert "ms per image" in app.page.inner_text("#yolo-stats")
    app.screenshot("yolo-cpu.png")


def test_reload_reads_weights_from_cache(app, server):
    before = len(server.requests)
    app.open()  # reload: the runtime restarts; the Cache API keeps the weights
    for tool in ("whisper", "llama", "yolo"):  # one after the other: a load is a job, and jobs take turns (guard.js)
        app.page.click(f"#tab-{tool}")
        app.page.click(f"#picker-{tool} .load")
        app.page.wait_for_function(f"/^Loaded/.test(document.querySelector('#picker-{tool} .model-status').textContent)",
                                   timeout=RUN_S * 1000)
    weights = [p for p in server.requests[before:] if p.startswith("/models/") and not p.endswith("manifest.json")]
    assert weights == [], f"weights downloaded again after a reload: {weights}"
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"


def test_no_console_errors(app):
    # the one expected entry: Chromium logs the deliberate 404 of test_missing_hub_model_shows_download_message
    unexpected = [e for e in app.errors if not ("404" in e and "Failed to load resource" in e)]
    assert unexpected == []
