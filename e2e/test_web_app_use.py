"""The app as a person uses it, on the CPU in Chromium: every tool shows a progress bar that
reaches 100 %, has a Cancel that stops a run midway and leaves the worker usable; long audio (100 s
transcribed in full, 1 hour started and cancelled) works in wasm32's memory; error messages carry a heading
that names the problem, and a failed run leaves no stale result; numeric fields are checked in the page; a
long prompt is echoed truncated and the status line says why a generation stopped; the YOLO tab says what
the demo detects and loads an Ultralytics checkpoint from a file or a hub id; JPEGs decoded by the browser
score as on the CLI; each tool shows which device runs it and why. Screenshots go to e2e/artifacts/.
One page for the module; tests run in file order."""
from __future__ import annotations

import re
import shutil

import pytest
from page_status import WAIT, heading, wait_message, wait_progress
from web_app import (CACHE, RUN_S, App, assert_same_detections, assert_same_segments, tiled_wav,
                     whisper_reference, yolo_reference)


@pytest.fixture(scope="module")
def app(playwright_session, server):
    a = App(playwright_session, f"{server.url}?device=cpu&hub={server.url}hub")
    yield a
    a.close()


def whisper_clean(app) -> bool:
    """Nothing of an earlier run is left: no segments, no result, the buttons off, no player."""
    p = app.page
    return (p.locator("#transcript li").count() == 0 and p.eval_on_selector("#transcript", "e => e.dataset.json") is None
            and all(p.is_disabled(b) for b in ("#copy-text", "#download-txt", "#download-srt"))
            and p.is_hidden("#audio-player") and p.get_attribute("#audio-player", "src") is None)


# ---------------------------------------------------------------------------- the page at rest

def test_each_tool_shows_its_device_and_why(app):
    for tool in ("whisper", "llama", "yolo"):
        app.page.click(f"#tab-{tool}")
        line = app.page.inner_text(f"#picker-{tool} .device-line")
        assert line.startswith("Runs on the CPU: numpy in WebAssembly (matmul: ") and "chosen in Device" in line, line


def test_yolo_tab_says_what_the_demo_detects(app):
    app.page.click("#tab-yolo")
    about = app.page.inner_text("#yolo-about")
    assert "two classes only" in about and "Normal" in about and "Fall" in about and "does not detect buses" in about
    assert all(w in about for w in (".pt", ".onnx", ".safetensors", "URL", "Hugging Face id", "owner/name/file.pt"))
    assert "2 classes, Normal and Fall" in app.page.inner_text("#picker-yolo .demo")


# ---------------------------------------------------------------------------- Whisper

def test_bad_audio_headings_and_a_clean_state(app, tmp_path, clip_wav):
    app.page.click("#tab-whisper")
    app.page.set_input_files("#audio-file", str(clip_wav))
    assert app.wait_result("#transcript")["segments"]
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    assert app.page.is_enabled("#copy-text") and app.page.is_visible("#audio-player")

    text = tmp_path / "notes.wav"
    text.write_text("this is not audio")
    app.page.set_input_files("#audio-file", str(text))  # refused in the page: neither RIFF nor browser audio
    wait_message(app)
    assert heading(app) == "Not a WAV file" and "notes.wav" in app.message() and "Something went wrong" not in app.message()
    assert app.message().startswith("Speech to text (Whisper tiny.en): ")
    assert whisper_clean(app)
    app.screenshot("whisper-not-a-wav.png")

    riff = tmp_path / "broken.wav"
    riff.write_bytes(b"RIFF\x24\x00\x00\x00WAVEjunk" + bytes(40))  # refused by ember's WAV reader in the worker
    app.page.set_input_files("#audio-file", str(riff))
    wait_message(app)
    assert heading(app) == "Not a WAV file" and "no fmt chunk" in app.message()
    assert whisper_clean(app)


def test_long_audio_transcribed_as_natively(app, tmp_path, long_clip, native_whisper):
    # 100 s: four 30 s windows, each seeking from where the last segment ended (the hour below checks the memory)
    clip = tiled_wav(CACHE / "harvard-100s.wav", long_clip, 100)
    app.page.set_input_files("#audio-file", str(clip))
    wait_progress(app, r"Transcribing: \d+ / 100 s of audio \(\d+ %\) · [\d.]+ s elapsed · about .* left")
    got = app.wait_result("#transcript", timeout_s=3 * RUN_S)
    assert got is not None, app.message()
    ref = whisper_reference(native_whisper, clip)
    assert got["text"] == ref["text"]
    assert_same_segments(got["segments"], ref["segments"])
    assert got["segments"][-1]["end"] > 80 and "smooth planks" in got["text"].lower()
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    print(f"100 s WAV in the page: {got['ms'] / 1000:.1f} s, wasm heap {got['wasm_memory_bytes'] / 2**20:.0f} MiB")
    app.screenshot("whisper-100s.png")


def test_an_hour_of_audio_starts_in_bounded_memory_then_cancel_and_rerun(app, long_clip, clip_wav, native_whisper):
    hour = tiled_wav(CACHE / "harvard-1h.wav", long_clip, 3600)  # 115 MB of WAV, 230 MB of samples
    app.page.set_input_files("#audio-file", str(hour))
    app.page.wait_for_selector("#transcript li", timeout=WAIT)  # the first window decoded: features fit
    assert app.page.is_enabled("#whisper-cancel")
    assert "/ 3600 s of audio" in app.page.inner_text("#progress-text")
    # asked to stop at its next step, so the worker's own answer (with its heap) comes back; the Cancel button's
    # one-second bound is e2e/test_web_app_keep.py's
    app.page.evaluate("emberApp.ember().cancel({hard: false})")
    got = app.wait_result("#transcript")
    assert got["stopped"] == "cancelled" and got["duration"] == 3600
    assert 0 < len(got["segments"]) and got["segments"][-1]["end"] < 600
    assert "birch canoe" in got["segments"][0]["text"].lower() or "smooth planks" in got["text"].lower()
    assert app.page.inner_text("#whisper-stats").startswith("Cancelled after")
    assert app.page.is_disabled("#whisper-cancel")
    heap = got["wasm_memory_bytes"]
    print(f"1 h WAV in the page: wasm heap {heap / 2**20:.0f} MiB after features and {len(got['segments'])} segments")
    assert heap < 2 * 2**30  # the whole-file spectrogram alone would need 1.2 GB more, and overflowed
    app.screenshot("whisper-1h-cancelled.png")

    app.page.set_input_files("#audio-file", str(clip_wav))  # the worker is still usable
    again = app.wait_result("#transcript")
    assert again["stopped"] == "done"
    assert_same_segments(again["segments"], whisper_reference(native_whisper, clip_wav)["segments"])


# ---------------------------------------------------------------------------- Llama

def test_number_fields_are_checked_in_the_page(app):
    app.page.click("#tab-llama")
    for value, shown in (("0", '"0"'), ("4097", '"4097"'), ("2.5", '"2.5"'), ("", "nothing")):
        app.page.fill("#max-tokens", value)
        app.page.click("#generate")
        wait_message(app)
        assert heading(app) == "Invalid setting"
        assert "Max tokens must be a whole number from 1 to 4,096" in app.message() and shown in app.message()
        assert app.page.get_attribute("#max-tokens", "aria-invalid") == "true"
        app.page.click("#message .close")
    app.page.fill("#max-tokens", "8")
    app.page.fill("#seed", "-1")
    app.page.click("#generate")
    wait_message(app)
    assert heading(app) == "Invalid setting" and "Seed must be a whole number from 0" in app.message()
    app.page.fill("#seed", "0")
    app.generate("The for statement", 8)
    assert app.wait_result("#llama-output")["tokens"]
    assert app.page.get_attribute("#max-tokens", "aria-invalid") is None
    assert "reached Max tokens (8)" in app.page.inner_text("#llama-stats") or "the model ended" in app.page.inner_text("#llama-stats")


def test_long_prompt_truncated_echo_and_context_stop_reason(app):
    prompt = "the " * 150  # 600 characters, about 150 tokens of the demo's 256-token context
    app.generate(prompt, 4096)
    got = app.wait_result("#llama-output")
    assert got is not None, app.message()
    assert got["stopped"] == "context"
    assert 0 <= len(got["prompt_tokens"]) + len(got["tokens"]) - got["context"] <= 1  # the last token is never fed
    stats = app.page.inner_text("#llama-stats")
    assert f"stopped at the context length ({got['context']} tokens" in stats, stats
    echo = app.page.inner_text("#llama-output .prompt-echo")
    assert "characters of the prompt not shown" in echo and len(echo) < 500
    assert app.page.inner_text("#llama-output .gen") == got["text"]
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    app.screenshot("llama-context-stop.png")


def test_prompt_too_long_has_its_heading_and_clears_the_output(app):
    app.generate("the statement " * 9000, 16)  # ~18,000 tokens
    wait_message(app)
    assert heading(app) == "Prompt too long", app.message()
    assert re.search(r"the prompt is [\d,]+ tokens and this model's context length is 256 tokens", app.message())
    assert app.page.eval_on_selector("#llama-output", "e => e.dataset.json") is None
    assert app.page.locator("#llama-output .prompt-echo").count() == 0
    app.screenshot("llama-prompt-too-long.png")


# ---------------------------------------------------------------------------- YOLO

def test_jpeg_decoded_by_the_browser_scores_as_the_cli(app, native_yolo):
    from ember.models.yolo.fetch import ensure_file
    bus = ensure_file("bus.jpg")
    app.page.click("#tab-yolo")
    app.page.set_input_files("#image-file", str(bus))
    got = app.wait_result("#detections")
    assert got is not None, app.message()
    ref = yolo_reference(native_yolo, bus)  # native Pillow 13's decode
    assert_same_detections(got, ref)
    assert max(abs(g["score"] - r["score"]) for g, r in zip(got, ref)) < 1e-3
    assert app.page.get_attribute("#progress", "aria-valuenow") == "100"
    assert "input 480×640" in app.page.inner_text("#yolo-stats")  # width x height: the rect letterbox, not 640x640
    app.screenshot("yolo-bus-jpeg.png")


def test_yolo_cancel_mid_run_then_rerun(app, bus_png, native_yolo):
    app.page.click("#tab-yolo")
    app.page.set_input_files("#image-file", str(bus_png))
    wait_progress(app, "Detecting: model")
    app.page.click("#yolo-cancel")
    app.page.wait_for_function("document.querySelector('#detections').dataset.json !== undefined", timeout=WAIT)
    assert app.page.eval_on_selector("#detections", "e => e.dataset.stopped") == "cancelled"
    assert app.page.inner_text("#yolo-stats") == "Cancelled." and app.page.locator("#detections tbody tr").count() == 0
    assert app.page.is_disabled("#yolo-cancel")
    app.page.set_input_files("#image-file", str(bus_png))
    got = app.wait_result("#detections")
    assert_same_detections(got, yolo_reference(native_yolo, bus_png))
    assert app.page.eval_on_selector("#detections", "e => e.dataset.stopped") == "done"


def test_not_an_image_heading_and_a_clean_state(app, tmp_path):
    bad = tmp_path / "photo.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"broken" * 10)
    app.page.set_input_files("#image-file", str(bad))
    wait_message(app)
    assert heading(app) == "Not an image" and app.message().startswith("Object detection (")
    assert app.page.locator("#detections tbody tr").count() == 0 and app.page.inner_text("#yolo-stats") == ""
    assert app.page.eval_on_selector("#detections", "e => e.dataset.json") is None


def test_an_ultralytics_checkpoint_from_a_file_and_a_hub_id(app, server, hub_dir, bus_png):
    from ember.models.yolo.fetch import ensure_file
    from ember.models.yolo.load import load_model
    pt = ensure_file("best.pt")  # the Ultralytics checkpoint the demo was converted from
    ref = yolo_reference(load_model(pt), bus_png)
    picker = "#picker-yolo"
    app.page.select_option(f"{picker} .kind", "file")
    app.page.set_input_files(f"{picker} .files", str(pt))
    app.page.set_input_files("#image-file", str(bus_png))
    got = app.wait_result("#detections")
    assert got is not None, app.message()
    assert "Loaded best.pt: " in app.page.inner_text(f"{picker} .model-status")
    assert "Detects 2 classes: Normal, Fall." in app.page.inner_text(f"{picker} .model-status")
    assert_same_detections(got, ref)

    main = hub_dir / "ember-test" / "yolo" / "resolve" / "main"
    main.mkdir(parents=True, exist_ok=True)
    shutil.copy(pt, main / "best.pt")
    app.load_hub("yolo", "ember-test/yolo/best.pt")
    assert app.message() == "", app.message()
    assert "/hub/ember-test/yolo/resolve/main/best.pt" in server.requests
    app.page.set_input_files("#image-file", str(bus_png))
    assert_same_detections(app.wait_result("#detections"), ref)
    app.page.select_option(f"{picker} .kind", "demo")


def test_no_console_errors(app):
    assert app.errors == []
