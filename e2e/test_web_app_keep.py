"""The app as a person who keeps it uses it, on the CPU in Chromium (a fake camera and microphone), one page for
the module, tests in file order. What a walk through every tool found, each fixed and checked here:

 1. the device choice: Auto / WebGPU / CPU, why Auto chose, and a note when a remembered choice is slower
 2. every download and load cancellable within a second, nothing of it kept, the tool usable after
 3. the tabs follow the WAI-ARIA pattern (all of them), and axe-core finds nothing serious or critical
 4. one guard for every tool's jobs, naming the one running
 5. #search opens the search tool and stays #search
 6. Whisper: cancel within a second at any point, a clock that keeps ticking
 7. training: a digit drawn while it trains is predicted at Pause; Stop ends a paused run
 8. detection: the slider applies to the image shown, labels never cover one another, the webcam turns off,
    "No detections" spans the table, no empty canvas after a bad image
 9. messages name the user's file and the model by its name
10. copy / download of generated text and detections, a recording meter and clock, the book, an empty-text hint
11. layout: the Device box and footer while booting, the training legend, search.html, phone widths
Screenshots of each tool at desktop and phone widths go to e2e/artifacts/."""
from __future__ import annotations

import json
import re
import shutil

import pytest
from page_status import WAIT, heading, wait_message, wait_progress
from web_app import (FAKE_MEDIA, App, assert_same_detections, assert_same_segments, axe_violations, Server,
                     whisper_reference, yolo_reference)

TABS = ("whisper", "llama", "yolo", "search", "train", "onnx", "segment")
SLOW_BPS = 8e6  # the slow hub's download speed: Whisper tiny.en's 75 MB take ~9 s


@pytest.fixture(scope="module")
def keep_server(site, tmp_path_factory):
    """The e2e site, with a hub whose slow/ folder trickles: a copy of the Whisper demo as slow/whisper."""
    hub = tmp_path_factory.mktemp("keep-hub")
    main = hub / "slow" / "whisper" / "resolve" / "main"
    main.mkdir(parents=True)
    for f in next((site / "models").glob("whisper-*")).iterdir():
        shutil.copy(f, main / f.name)
    s = Server(site, hub, slow_bps=SLOW_BPS)
    yield s
    s.close()


@pytest.fixture(scope="module")
def app(playwright_session, keep_server):
    a = App(playwright_session, f"{keep_server.url}?device=cpu&hub={keep_server.url}hub#search", args=FAKE_MEDIA)
    a.ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=keep_server.url.rstrip("/"))
    yield a
    a.close()


def click_and_time(app, button: str, done_js: str) -> float:
    """ms from clicking `button` (in the page) until `done_js` holds, polled every 10 ms."""
    return app.page.evaluate(f"""async () => {{
        const t0 = performance.now();
        document.querySelector({json.dumps(button)}).click();
        while (!({done_js})) {{
            if (performance.now() - t0 > 30000) return -1;
            await new Promise((r) => setTimeout(r, 10));
        }}
        return performance.now() - t0;
    }}""")


def cached_urls(app) -> list[str]:
    return app.page.evaluate("""async () => {
        const c = await caches.open('ember-models-v2');
        return (await c.keys()).map((r) => r.url); }""")


# ---------------------------------------------------------------------------- 5, 3: tabs and address

def test_a_hash_opens_its_tool_and_every_tab_answers_the_keyboard(app):
    page = app.page
    assert page.get_attribute("#tab-search", "aria-selected") == "true" and page.is_visible("#panel-search")
    assert page.evaluate("location.hash") == "#search" and page.is_hidden("#panel-whisper")

    def selected():
        tabs = page.eval_on_selector_all('[role="tab"]', "ts => ts.map((t) => [t.id, t.getAttribute('aria-selected'), t.tabIndex])")
        on = [t for t in tabs if t[1] == "true"]
        assert len(on) == 1 and [t[2] for t in tabs].count(0) == 1 and on[0][2] == 0, tabs
        focused = page.evaluate("document.activeElement.id")
        assert focused == on[0][0], (focused, on)
        return on[0][0].removeprefix("tab-")

    page.focus("#tab-search")
    steps = [("ArrowRight", "train"), ("ArrowRight", "onnx"), ("ArrowRight", "segment"), ("ArrowRight", "whisper"),
             ("End", "segment"), ("Home", "whisper"), ("ArrowLeft", "segment"), ("ArrowLeft", "onnx"),
             ("ArrowLeft", "train"), ("ArrowLeft", "search")]
    for key, want in steps:
        page.keyboard.press(key)
        assert selected() == want, key
        assert page.is_visible(f"#panel-{want}") and page.evaluate("location.hash") == f"#{want}"
    page.keyboard.press("Tab")  # out of the tab list, into the open panel
    assert page.evaluate("document.activeElement.getAttribute('role')") != "tab"
    assert page.evaluate("document.activeElement.closest('#panel-search') !== null")


def test_axe_finds_nothing_serious_or_critical(app):
    found = {}
    for tab in TABS:
        app.page.click(f"#tab-{tab}")
        found[tab] = axe_violations(app.page)
    app.page.click("#models-open")
    app.page.wait_for_selector("#models-dialog[open]")
    found["models dialog"] = axe_violations(app.page, "document.querySelector('#models-dialog')")
    app.page.click("#models-close")
    assert all(v == [] for v in found.values()), json.dumps(found, indent=1)


# ---------------------------------------------------------------------------- 11: first paint, search.html

def test_booting_shows_the_choice_and_no_orphan_separator_and_search_html(app, keep_server):
    page = app.ctx.new_page()
    try:
        page.goto(f"{keep_server.url}?hub={keep_server.url}hub")  # no ?device: the remembered choice, Auto
        assert page.inner_text("#status") == "Starting runtime…"
        assert page.input_value("#device") == "auto" and page.is_disabled("#device")
        foot = page.inner_text("footer").strip()
        assert not foot.startswith("·") and "· ·" not in foot, foot
    finally:
        page.close()
    page = app.ctx.new_page()
    try:
        page.goto(f"{keep_server.url}search.html?device=cpu")
        page.wait_for_selector("#search .search-query", timeout=WAIT)
        assert page.get_attribute("link[rel=icon]", "href") == "favicon.svg"
        assert page.request.get(f"{keep_server.url}favicon.svg").ok
        box, panel = (page.eval_on_selector(s, "e => e.getBoundingClientRect().width") for s in (".search-query", "#search"))
        assert box > 0.85 * panel, (box, panel)
        assert axe_violations(page) == []
    finally:
        page.close()


# ---------------------------------------------------------------------------- 4, 6: the guard, Whisper's clock and cancel

def test_whisper_clock_ticks_other_tools_wait_named_and_cancel_lands_within_a_second(app, long_clip, clip_wav,
                                                                                   native_whisper):
    from web_app import CACHE, tiled_wav
    page = app.page
    clip = tiled_wav(CACHE / "harvard-3min.wav", long_clip, 185)
    page.click("#tab-whisper")
    page.set_input_files("#audio-file", str(clip))
    wait_progress(app, r"Transcribing: \d+ / 185 s of audio")
    clock = lambda: float(re.search(r"([\d.]+) s elapsed", page.inner_text("#progress-text")).group(1))  # noqa: E731
    t1 = clock()
    page.wait_for_timeout(1200)
    assert clock() >= t1 + 0.8  # ticking between Whisper's windows, which report nothing for seconds

    page.click("#tab-search")  # another tool while Whisper runs: refused at once, the running one named
    page.fill("#panel-search .search-doc", "Cats purr.\n\nDogs bark.")
    page.click("#panel-search .search-index")
    wait_message(app)
    assert heading(app) == "Another tool is running"
    assert "Speech to text (Whisper tiny.en) is still running" in app.message(), app.message()
    assert page.evaluate("emberApp.busy().tool") == "whisper"
    page.click("#message .close")

    page.click("#tab-whisper")
    ms = click_and_time(app, "#whisper-cancel", "document.querySelector('#transcript').dataset.json")
    got = json.loads(page.eval_on_selector("#transcript", "e => e.dataset.json"))
    print(f"Whisper cancel: {ms:.0f} ms, {len(got['segments'])} segments kept")
    assert 0 <= ms < 1000 and got["stopped"] == "cancelled"
    assert page.inner_text("#whisper-stats").startswith("Cancelled after")
    assert page.evaluate("emberApp.busy()") is None and page.is_disabled("#whisper-cancel")

    page.set_input_files("#audio-file", str(clip_wav))  # still usable (after a restart: the model loads again)
    again = app.wait_result("#transcript")
    assert again is not None and again["stopped"] == "done", app.message()
    assert_same_segments(again["segments"], whisper_reference(native_whisper, clip_wav)["segments"])


# ---------------------------------------------------------------------------- 2: a download cancelled at 20 %

def test_a_download_cancelled_at_20_percent_keeps_nothing_and_the_tool_works(app, keep_server, clip_wav):
    page = app.page
    picker = "#picker-whisper"
    page.select_option(f"{picker} .kind", "hub")
    page.fill(f"{picker} .hub", "slow/whisper")
    page.click(f"{picker} .load")
    wait_progress(app, r"Downloading slow/whisper \(model\.safetensors\): .* \(([2-9]\d) %\)")
    assert page.is_visible(f"{picker} .cancel-load")
    ms = click_and_time(app, f"{picker} .cancel-load", f"/cancelled/.test(document.querySelector('{picker} .model-status').textContent)")
    print(f"download cancelled at {page.inner_text('#progress-text')!r} in {ms:.0f} ms")
    assert 0 <= ms < 1000
    assert "nothing of it was kept" in page.inner_text(f"{picker} .model-status")
    assert app.message() == "" and page.evaluate("emberApp.busy()") is None
    assert not [u for u in cached_urls(app) if "/slow/" in u], cached_urls(app)
    assert any("/hub/slow/whisper/resolve/main/model.safetensors" in p for p in keep_server.requests)

    page.select_option(f"{picker} .kind", "demo")  # the tool still works
    page.set_input_files("#audio-file", str(clip_wav))
    assert app.wait_result("#transcript")["stopped"] == "done"
    assert not [u for u in cached_urls(app) if "/slow/" in u]


# ---------------------------------------------------------------------------- 7: training

def test_a_digit_drawn_while_training_is_predicted_at_pause_and_stop_ends_the_paused_run(app):
    page = app.page
    page.click("#tab-train")
    app.train_until_step({"epochs": 1, "batch_size": 8, "lr": 0.01, "seed": 0}, 2)
    page.locator("#train-draw").scroll_into_view_if_needed()
    box = page.eval_on_selector("#train-draw", "e => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width]; }")
    x, y, w = box
    page.mouse.move(x + 0.5 * w, y + 0.2 * w)  # a "1": one stroke down the middle
    page.mouse.down()
    page.mouse.move(x + 0.5 * w, y + 0.8 * w, steps=8)
    page.mouse.up()
    assert "Predicts when the run pauses or ends" in page.inner_text("#train-probs")
    assert page.eval_on_selector("#train-probs li", "e => e.getBoundingClientRect().height") < 48  # not a word per line
    page.click("#train-pause")
    page.wait_for_function("document.querySelector('#train-probs').dataset.json !== undefined", timeout=WAIT)
    probs = json.loads(page.eval_on_selector("#train-probs", "e => e.dataset.json"))["probs"]
    assert len(probs) == 10 and abs(sum(probs) - 1) < 1e-4
    assert page.inner_text("#train-stats").startswith("Paused after")
    page.click("#train-stop")  # nothing runs: the paused run ends here
    assert page.inner_text("#train-stats").startswith("Stopped after"), page.inner_text("#train-stats")
    assert page.is_disabled("#train-stop") and page.inner_text("#train-pause") == "❚❚ Pause"
    legend_bottom = 12 + 4  # the legend's first row (train.js), above the plot area
    assert float(page.get_attribute("#train-plot", "data-plot-top")) > legend_bottom


# ---------------------------------------------------------------------------- 8, 10: detection

def test_detection_slider_labels_exports_empty_table_and_webcam(app, bus_png, native_yolo, tmp_path):
    page = app.page
    page.click("#tab-yolo")
    assert page.is_hidden("#yolo-canvas")  # no empty canvas before an image
    page.set_input_files("#image-file", str(bus_png))
    got = app.wait_result("#detections")
    assert got is not None, app.message()
    assert_same_detections(got, yolo_reference(native_yolo, bus_png))

    app.set_range("#conf", 0.6)  # the slider applies to the image shown
    page.eval_on_selector("#conf", "e => e.dispatchEvent(new Event('change'))")
    higher = json.loads(page.eval_on_selector("#detections", "e => e.dataset.json"))
    assert_same_detections(higher, yolo_reference(native_yolo, bus_png, conf=0.6))
    assert 0 < len(higher) < len(got) and "at confidence 0.6" in page.inner_text("#yolo-stats")
    app.set_range("#conf", 0.25)
    page.eval_on_selector("#conf", "e => e.dispatchEvent(new Event('change'))")  # lower: the model runs again
    page.wait_for_function("JSON.parse(document.querySelector('#detections').dataset.json || '[]').length > 0"
                           " && /at confidence 0.25/.test(document.querySelector('#yolo-stats').textContent)", timeout=WAIT)
    assert_same_detections(json.loads(page.eval_on_selector("#detections", "e => e.dataset.json")), got)

    labels = json.loads(page.get_attribute("#yolo-canvas", "data-labels"))
    assert len(labels) == len(got)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            assert not (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]), (a, b)

    with page.expect_download() as dl:
        page.click("#yolo-json")
    assert json.loads(open(dl.value.path()).read()) == got
    with page.expect_download() as dl:
        page.click("#yolo-csv")
    rows = open(dl.value.path()).read().splitlines()
    assert rows[0] == "index,class,label,score,x1,y1,x2,y2" and len(rows) == len(got) + 1
    assert rows[1].split(",")[2] == json.dumps(got[0]["label"])
    app.screenshot("yolo-labels.png")

    app.set_range("#conf", 0.95)
    page.eval_on_selector("#conf", "e => e.dispatchEvent(new Event('change'))")
    cells = page.eval_on_selector_all("#detections tbody td", "tds => tds.map((td) => [td.colSpan, td.textContent])")
    assert cells == [[4, "No detections above the confidence threshold."]], cells
    app.set_range("#conf", 0.25)

    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    page.set_input_files("#image-file", str(empty))
    wait_message(app)
    assert heading(app) == "Empty file" and "empty.png is empty (0 bytes)" in app.message()
    assert page.is_hidden("#yolo-canvas")
    page.click("#message .close")

    page.click("#webcam")  # the fake camera: on, then off
    page.wait_for_selector("#video:not([hidden])")
    page.wait_for_selector("#webcam-off", state="visible")  # shown once the video plays, after the video itself
    assert page.is_visible("#webcam-off") and page.inner_text("#webcam") == "Capture frame"
    page.click("#webcam-off")
    assert page.is_hidden("#video") and page.evaluate("document.querySelector('#video').srcObject") is None
    assert page.inner_text("#webcam") == "Webcam" and page.is_hidden("#webcam-off")


# ---------------------------------------------------------------------------- 9: messages

def test_messages_name_the_file_and_the_model(app, tmp_path):
    page = app.page
    page.click("#tab-whisper")
    for name, data, want in (("empty.wav", b"", "empty.wav is empty (0 bytes)"),
                             ("broken.wav", b"RIFF\x24\x00\x00\x00WAVEjunk" + bytes(40), "broken.wav: no fmt chunk"),
                             ("movie.wav", b"RIFF\x10\x00\x00\x00AVI junkjunkjunk", 'movie.wav: not a RIFF/WAVE file (starts with "RIFF····AVI ")')):
        (tmp_path / name).write_bytes(data)
        page.set_input_files("#audio-file", str(tmp_path / name))
        wait_message(app)
        text = app.message()
        assert text.startswith("Speech to text (Whisper tiny.en): ") and want in text, text
        assert "<wav bytes>" not in text and "b'" not in text
        page.click("#message .close")

    page.click("#tab-yolo")
    bad = tmp_path / "weights.pt"
    bad.write_bytes(b"PK\x03\x04 not really a checkpoint" * 4)
    picker = "#picker-yolo"
    page.select_option(f"{picker} .kind", "file")
    page.set_input_files(f"{picker} .files", str(bad))
    page.click(f"{picker} .load")
    wait_message(app)
    text = app.message()
    assert text.startswith("Object detection (weights.pt): ") and "weights.pt" in text.split(": ", 1)[1], text
    assert "/models/" not in text and "local-" not in text, text
    page.click("#message .close")
    page.select_option(f"{picker} .kind", "demo")

    page.click("#tab-llama")  # the load's progress and any message name the model, never "llama"
    page.fill("#max-tokens", "0")
    page.click("#generate")
    wait_message(app)
    assert app.message().startswith("Text generation (Llama demo): "), app.message()
    page.click("#message .close")
    page.evaluate("""() => { window.__progressTexts = [];
        new MutationObserver(() => window.__progressTexts.push(document.querySelector('#progress-text').textContent))
          .observe(document.querySelector('#progress-text'), {childList: true, characterData: true, subtree: true}); }""")
    app.generate("The for statement", 8)
    got = app.wait_result("#llama-output")
    assert got is not None, app.message()
    texts = page.evaluate("window.__progressTexts")
    assert any(t.startswith("Loading Llama demo") for t in texts), texts
    assert not any(re.search(r"Loading (llama|embed|whisper|yolo)\b", t) for t in texts), texts


# ---------------------------------------------------------------------------- 10: copy, download, record, book, hints

def test_generated_text_copies_and_downloads(app):
    page = app.page
    page.click("#tab-llama")
    got = json.loads(page.eval_on_selector("#llama-output", "e => e.dataset.json"))
    with page.expect_download() as dl:
        page.click("#llama-txt")
    assert open(dl.value.path()).read() == got["text"] + "\n"
    with page.expect_download() as dl:
        page.click("#llama-json")
    assert json.loads(open(dl.value.path()).read()) == got
    page.click("#llama-copy")
    assert page.evaluate("navigator.clipboard.readText()") == got["text"]


def test_recording_shows_a_level_meter_and_a_clock(app):
    page = app.page
    page.click("#tab-whisper")
    page.click("#record")  # the fake microphone: a tone
    page.wait_for_selector("#record-meter:not([hidden])")
    page.wait_for_function("document.querySelector('#record-time').textContent === '0:01'", timeout=10_000)
    page.wait_for_function("Number(document.querySelector('#record-level').dataset.peak) > 10", timeout=10_000)  # its tone
    page.click("#record")
    assert page.is_hidden("#record-meter")
    page.wait_for_function("document.querySelector('#transcript').dataset.json !== undefined || !document.querySelector('#message').hidden",
                           timeout=WAIT)
    app.wait_idle()


def test_the_book_is_linked_and_an_empty_text_gets_a_hint(app, keep_server):
    import importlib.util
    page = app.page
    if importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"):
        href = page.get_attribute("footer .book-link", "href")
        assert page.is_visible("footer .book-link") and href == "docs/"
        assert page.request.get(keep_server.url + "docs/index.html").ok
    page.click("#tab-search")
    page.fill("#panel-search .search-doc", "   \n\n  ")
    page.click("#panel-search .search-index")
    assert "nothing to index" in page.inner_text("#panel-search .search-count")
    assert page.evaluate("document.activeElement.classList.contains('search-doc')")
    assert app.message() == ""


# ---------------------------------------------------------------------------- screenshots, then 1: the device choice

def test_screenshots_of_each_tool_at_desktop_and_phone_widths(app):
    page = app.page
    for width, height, name in ((1200, 900, "desktop"), (390, 844, "phone")):
        page.set_viewport_size({"width": width, "height": height})
        for tab in TABS:
            page.click(f"#tab-{tab}")
            page.wait_for_timeout(150)
            assert page.evaluate("document.documentElement.scrollWidth") <= width, (tab, name)
            app.screenshot(f"tool-{tab}-{name}.png")
        page.click("#models-open")
        page.wait_for_selector("#models-dialog[open]")
        page.wait_for_function("document.querySelector('#models-dialog').dataset.json !== undefined")
        page.screenshot(path=str(app_artifact(f"models-{name}.png")))
        page.click("#models-close")
    page.set_viewport_size({"width": 1200, "height": 900})


def app_artifact(name):
    from web_app import ARTIFACTS
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def test_a_remembered_webgpu_choice_is_noted_when_auto_would_be_faster(app, keep_server):
    page = app.page
    page.select_option("#device", "webgpu")  # remembered; SwiftShader is the only adapter here
    page.wait_for_function("/^Ready/.test(document.querySelector('#status').textContent)", timeout=WAIT)
    assert page.evaluate("localStorage.getItem('ember-device')") == "webgpu"
    app.url = f"{keep_server.url}?hub={keep_server.url}hub"  # a later visit: no ?device
    app.open()
    assert page.input_value("#device") == "webgpu"
    if page.inner_text("#status") == "Ready · WebGPU" and page.evaluate("emberApp.ember().deviceAuto.device") == "webgpu":
        assert page.is_hidden("#device-note")  # a hardware adapter: Auto would choose it too, nothing to note
        return
    note = page.inner_text("#device-note .text")
    assert "as you chose on an earlier visit" in note and "Auto would run on the CPU here, faster" in note, note
    assert "software renderer" in note and page.is_visible("#device-note .use-auto")
    assert "warn" in page.get_attribute("#device-note", "class")
    app.screenshot("device-note-remembered-webgpu.png")
    page.click("#device-note .use-auto")
    page.wait_for_function("document.querySelector('#status').textContent === 'Ready · CPU'", timeout=WAIT)
    assert page.input_value("#device") == "auto" and page.evaluate("localStorage.getItem('ember-device')") == "auto"
    note = page.inner_text("#device-note .text")
    assert note.startswith("Auto chose the CPU: ") and "software renderer" in note, note
    assert page.is_hidden("#device-note .use-auto")


def test_no_console_errors(app):
    assert app.errors == []
