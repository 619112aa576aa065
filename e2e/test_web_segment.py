"""The segmentation tool in Chromium on the CPU: a random-weight SamModel (tests/sam_reference.py; no SAM weights
are reachable) served from a local hub folder, loaded by its hub id; clicks, a background shift-click and a
dragged box on the canvas (the tab, model picker and job guard are the app's shared ones) give the masks native
ember gives for the same prompts (the page reports the image pixels it sent), the second click does not run the
image encoder again (the worker's counters), the mask and cut-out PNG exports hold the shown mask, and "segment
everything" (the button at SAM's filters, the API with looser ones) finds the native generator's masks."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from web_app import RUN_S, App

pytest.importorskip("transformers")
from sam_reference import build, scene  # noqa: E402  (tests/ is on sys.path: e2e/conftest.py)

HUB_ID = "ember-test/sam"


@pytest.fixture(scope="module")
def sam_folder(hub_dir):
    folder = hub_dir / "ember-test" / "sam" / "resolve" / "main"
    folder.mkdir(parents=True, exist_ok=True)
    build("proc", folder)
    return folder


@pytest.fixture(scope="module")
def scene_png(tmp_path_factory):
    from PIL import Image
    path = tmp_path_factory.mktemp("seg") / "scene.png"
    Image.fromarray(scene()).save(path)
    return path


@pytest.fixture(scope="module")
def app(playwright_session, server, sam_folder):
    a = App(playwright_session, f"{server.url}?device=cpu&hub={server.url}hub#segment")
    yield a
    a.close()


def _result(app, decoder_runs: int) -> dict:
    """The page's result once the worker has run the decoder `decoder_runs` times (or a message shows)."""
    app.page.wait_for_function(
        f"(() => {{ const j = document.querySelector('#seg-canvas').dataset.json; "
        f"return (j && JSON.parse(j).decoder_runs >= {decoder_runs}) "
        f"|| !document.querySelector('#message').hidden; }})()",
        timeout=RUN_S * 1000)
    raw = app.page.eval_on_selector("#seg-canvas", "e => e.dataset.json")
    assert raw is not None, app.message()
    return json.loads(raw)


def _click(app, fx, fy, shift=False):
    """A click at a fraction of the canvas (scrolled into view), with Shift held for a background point."""
    canvas = app.page.locator("#seg-canvas")
    box = canvas.bounding_box()
    canvas.click(position={"x": fx * box["width"], "y": fy * box["height"]}, modifiers=["Shift"] if shift else [])


def _same_mask(got_rle, want):
    from ember.models.common.rle import rle_to_mask
    got = rle_to_mask(got_rle)
    assert got.shape == want.shape
    assert (got == want).mean() >= 0.999


def test_clicks_match_native_and_reuse_the_embedding(app, server, sam_folder, scene_png):
    from ember.models.sam.generate import generate
    from ember.models.sam.predict import load_segmenter
    page = app.page
    page.wait_for_selector("#panel-segment", state="visible", timeout=60_000)  # opened by the #segment link
    assert "No SAM weights are bundled" in page.inner_text("#panel-segment")
    assert "~38 MB" in page.inner_text("#panel-segment") and "~375 MB" in page.inner_text("#panel-segment")
    app.load_hub("segment", HUB_ID)                                    # the shared model picker
    assert "Loaded" in page.inner_text("#picker-segment .model-status"), app.message()
    assert f"/hub/{HUB_ID}/resolve/main/model.safetensors" in server.requests
    page.set_input_files("#seg-image-file", str(scene_png))
    page.wait_for_function("document.querySelector('#seg-canvas').width === 640")

    seg = load_segmenter(sam_folder)
    seg.set_image(scene())

    _click(app, 100 / 640, 100 / 480)
    r1 = _result(app, 1)
    assert r1["encoder_runs"] == 1 and r1["encode_ms"] > 0 and r1["count"] == 3
    pts = r1["prompt"]["points"]
    want = seg.predict(points=[p[:2] for p in pts], labels=[p[2] for p in pts])
    assert r1["best"] == int(np.argmax(want["scores"][0]))
    np.testing.assert_allclose(r1["scores"], want["scores"][0], atol=1e-4)
    _same_mask(r1["mask"], want["masks"][0, r1["pick"]])

    _click(app, 450 / 640, 120 / 480, shift=True)                      # background point: decoder only
    r2 = _result(app, 2)
    assert r2["encoder_runs"] == 1 and r2["encode_ms"] == 0, r2
    pts = r2["prompt"]["points"]
    assert [p[2] for p in pts] == [1, 0]
    want = seg.predict(points=[p[:2] for p in pts], labels=[p[2] for p in pts])
    _same_mask(r2["mask"], want["masks"][0, r2["pick"]])

    page.click("#seg-clear")
    page.locator("#seg-canvas").scroll_into_view_if_needed()
    box = page.locator("#seg-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.9, steps=5)
    page.mouse.up()
    r3 = _result(app, 3)
    assert r3["encoder_runs"] == 1 and r3["prompt"]["box"] and not r3["prompt"]["points"]
    want = seg.predict(boxes=[r3["prompt"]["box"]])
    _same_mask(r3["mask"], want["masks"][0, r3["pick"]])
    assert "per click" in page.inner_text("#seg-stats") and "encoder runs 1" in page.inner_text("#seg-stats")
    from PIL import Image

    from ember.models.common.rle import rle_to_mask
    shown = rle_to_mask(r3["mask"])
    with page.expect_download() as dl:
        page.click("#seg-export-mask")
    written = np.asarray(Image.open(dl.value.path()).convert("L"))
    np.testing.assert_array_equal(written > 127, shown)
    with page.expect_download() as dl:
        page.click("#seg-export-cutout")
    cut = np.asarray(Image.open(dl.value.path()))                       # RGBA: the image where the mask is
    assert cut.shape == (480, 640, 4)
    np.testing.assert_array_equal(cut[..., 3] > 127, shown)
    np.testing.assert_array_equal(cut[..., :3][shown], scene()[shown])

    page.click("#seg-everything")
    page.wait_for_function("JSON.parse(document.querySelector('#seg-canvas').dataset.json).everything === true "
                           "|| !document.querySelector('#message').hidden", timeout=RUN_S * 1000)
    r4 = json.loads(page.eval_on_selector("#seg-canvas", "e => e.dataset.json"))
    ref = generate(seg.model, scene(), seg, points_per_crop=16)
    assert r4["encoder_runs"] == 1 and r4["count"] == len(ref["masks"])
    np.testing.assert_allclose(r4["scores"], ref["scores"], atol=1e-4)

    # SAM's default filters keep none of the random model's masks: the API with the pipeline's filters loosened
    # (as tests/test_sam.py's generator test) must give the native generator's label map, masks and all
    filters = dict(pred_iou_thresh=0.0, stability_score_thresh=0.5, stability_score_offset=0.02, mask_threshold=0.8)
    got = page.evaluate("""async ([png, filters]) => {
      const bytes = Uint8Array.from(atob(png), (c) => c.charCodeAt(0));
      const r = await window.emberApp.ember().segment(new Blob([bytes], { type: "image/png" }), {},
        { everything: true, points_per_side: 16, ...filters });
      const b = new Uint8Array(r.labels.buffer, r.labels.byteOffset, r.labels.byteLength);
      let s = "";
      for (let i = 0; i < b.length; i += 32768) s += String.fromCharCode.apply(null, b.subarray(i, i + 32768));
      return { count: r.count, scores: r.scores, labels: btoa(s) };
    }""", [base64.b64encode(scene_png.read_bytes()).decode(), filters])
    ref = generate(seg.model, scene(), seg, points_per_crop=16, **filters)
    assert got["count"] == len(ref["masks"]) >= 3
    np.testing.assert_allclose(got["scores"], ref["scores"], atol=1e-4)
    labels = np.frombuffer(base64.b64decode(got["labels"]), "<u2").reshape(480, 640)
    want = np.zeros((480, 640), "<u2")
    for k in range(len(ref["masks"]) - 1, -1, -1):                    # the best mask on top
        want[ref["masks"][k]] = k + 1
    assert (labels == want).mean() >= 0.999
    assert not app.errors, app.errors
