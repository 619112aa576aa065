"""The app after its first visit, in Chromium on the CPU, served cross-origin isolated (COOP/COEP, as a host
that wants SharedArrayBuffer sends them): the service worker keeps the build (sw.js) and worker.js the models
(model-cache.js), so with the server gone and the browser offline the page opens again, still isolated, and
transcribes with the model fetched before; a new build replaces the old shell whole (a new versioned cache, the
old one deleted, never a mix); under isolation a cancel interrupts Python mid-step instead of restarting the
runtime; the model manager lists the kept model with its size and the storage used, and deletes it.
One page for the module, on its own copy of the site (the update test edits it); tests run in file order."""
from __future__ import annotations

import json
import shutil

import pytest
from web_app import ISOLATED, RUN_S, App, Server, assert_same_segments, whisper_reference

WAIT = RUN_S * 1000


@pytest.fixture(scope="module")
def own_site(site, tmp_path_factory):
    """A copy of the e2e site (hard links: the update test replaces files, never writes into them)."""
    dest = tmp_path_factory.mktemp("offline") / "site"
    shutil.copytree(site, dest, copy_function=lambda s, d: __import__("os").link(s, d))
    return dest


@pytest.fixture(scope="module")
def iso_server(own_site, tmp_path_factory):
    s = Server(own_site, tmp_path_factory.mktemp("offline-hub"), headers=ISOLATED)
    yield s
    s.close()


@pytest.fixture(scope="module")
def app(playwright_session, iso_server):
    a = App(playwright_session, f"{iso_server.url}?device=cpu")
    yield a
    a.close()


def app_caches(app) -> dict:
    """{cache name: [paths]} of the service worker's ember-app-* caches."""
    return app.page.evaluate("""async () => { const out = {};
        for (const name of await caches.keys()) if (name.startsWith('ember-app-'))
            out[name] = (await (await caches.open(name)).keys()).map((r) => new URL(r.url).pathname.slice(1));
        return out; }""")


def wait_kept(app):
    """Until the service worker controls the page and holds its build whole."""
    app.page.wait_for_function("""async () => { const r = await navigator.serviceWorker.ready;
        return !!navigator.serviceWorker.controller && r.active && r.active.state === 'activated'; }""", timeout=WAIT)


def test_first_visit_is_isolated_and_keeps_the_build_and_the_model(app, own_site, clip_wav, native_whisper):
    page = app.page
    assert page.evaluate("crossOriginIsolated") is True
    assert page.evaluate("emberApp.ember()._interrupt !== null")  # SharedArrayBuffer: Python can be interrupted
    page.set_input_files("#audio-file", str(clip_wav))
    got = app.wait_result("#transcript")
    assert_same_segments(got["segments"], whisper_reference(native_whisper, clip_wav)["segments"])
    wait_kept(app)
    build = json.loads((own_site / "sw.js").read_text().split("= ", 1)[1].split(";\n", 1)[0])
    kept = app_caches(app)
    assert list(kept) == [f"ember-app-{build['version']}"], kept
    assert set(build["files"]) <= set(kept[f"ember-app-{build['version']}"]), set(build["files"]) - set(kept.popitem()[1])
    assert {"index.html", "worker.js", "config.json", "models/manifest.json", "pyodide/pyodide.asm.wasm"} <= set(build["files"])


def test_a_cancel_under_isolation_interrupts_without_restarting(app, long_clip):
    from web_app import CACHE, tiled_wav
    page = app.page
    clip = tiled_wav(CACHE / "harvard-3min.wav", long_clip, 185)
    page.set_input_files("#audio-file", str(clip))
    page.wait_for_selector("#transcript li", timeout=WAIT)  # in the first window's decoding, mid-step
    page.evaluate("window.__restarts = 0; emberApp.onRestart(() => window.__restarts++)")
    ms = page.evaluate("""async () => { const t0 = performance.now();
        document.querySelector('#whisper-cancel').click();
        while (!document.querySelector('#transcript').dataset.json) await new Promise((r) => setTimeout(r, 10));
        return performance.now() - t0; }""")
    print(f"Whisper cancel under isolation: {ms:.0f} ms")
    assert ms < 1000 and json.loads(page.eval_on_selector("#transcript", "e => e.dataset.json"))["stopped"] == "cancelled"
    assert page.evaluate("window.__restarts") == 0
    assert page.inner_text("#picker-whisper .model-status").startswith("Loaded Whisper tiny.en")


def test_a_new_build_replaces_the_shell_whole(app, own_site):
    from ember.wasm.offline import write_service_worker
    from ember.wasm.serve import WEB
    page = app.page
    old = next(iter(app_caches(app)))
    css = own_site / "style.css"
    text = css.read_text() + "\n/* build 2 */\n"
    css.unlink()  # a new file, not one written through the hard link into web/
    css.write_text(text)
    build = json.loads((own_site / "sw.js").read_text().split("= ", 1)[1].split(";\n", 1)[0])
    new = "ember-app-" + write_service_worker(own_site, WEB / "sw.js", list(build["files"]))
    assert new != old
    app.open()  # the old build still serves this page; the browser finds the new sw.js and installs it beside
    assert "build 2" not in page.evaluate("fetch('style.css').then((r) => r.text())")
    page.wait_for_selector("#offline-note:not([hidden])", timeout=WAIT)
    with page.expect_navigation(timeout=WAIT):
        page.click("#offline-note .reload")
    page.wait_for_selector("body[data-ready=true]", timeout=WAIT)
    assert "build 2" in page.evaluate("fetch('style.css').then((r) => r.text())")
    page.wait_for_function(f"caches.keys().then((k) => k.filter((n) => n.startsWith('ember-app-')).join() === {json.dumps(new)})",
                           timeout=WAIT)
    assert page.is_hidden("#offline-note")


def test_offline_the_page_opens_isolated_and_transcribes_with_the_kept_model(app, iso_server, clip_wav, native_whisper):
    page = app.page
    iso_server.close()  # no server at all, and the browser offline
    app.ctx.set_offline(True)
    app.open()
    assert page.evaluate("navigator.onLine") is False and page.is_visible("#offline-pill")
    assert page.evaluate("crossOriginIsolated") is True
    page.set_input_files("#audio-file", str(clip_wav))
    got = app.wait_result("#transcript")
    assert got is not None, app.message()
    assert_same_segments(got["segments"], whisper_reference(native_whisper, clip_wav)["segments"])
    app.screenshot("offline-transcript.png")


def test_the_model_manager_lists_and_deletes_a_model(app, own_site):
    page = app.page
    manifest = json.loads((own_site / "models" / "manifest.json").read_text())["whisper"][0]
    page.click("#models-open")
    page.wait_for_function("document.querySelector('#models-dialog').dataset.json !== undefined")
    state = json.loads(page.get_attribute("#models-dialog", "data-json"))
    (m,) = [m for m in state["models"] if m["model"] == "demo-whisper-tiny.en"]
    assert m["bytes"] == manifest["bytes"] and m["tool"] == "whisper" and m["label"] == manifest["label"]
    assert state["storage"]["usage"] >= m["bytes"] and state["storage"]["quota"] > state["storage"]["usage"]
    assert state["app"] > 10e6  # the offline copy of Pyodide, ember and the shell
    used = page.inner_text("#storage-used")
    assert used.startswith("This site uses ") and "the browser allows it" in used
    row = page.locator('#models-list tr[data-model="demo-whisper-tiny.en"]')
    assert "Whisper tiny.en" in row.inner_text() and "MiB" in row.inner_text()
    app.screenshot("models-dialog.png")
    row.get_by_role("button", name="Delete Whisper tiny.en").click()
    page.wait_for_function("document.querySelector('#models-note').textContent.startsWith('Deleted')")
    assert page.locator('#models-list tr[data-model="demo-whisper-tiny.en"]').count() == 0
    left = page.evaluate("""async () => (await (await caches.open('ember-models-v2')).keys())
        .filter((r) => r.url.includes('whisper-tiny.en')).length""")
    assert left == 0
    page.click("#models-close")


def test_no_console_errors(app):
    assert [e for e in app.errors if "net::ERR_INTERNET_DISCONNECTED" not in e] == []
