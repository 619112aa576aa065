"""Segment Anything against transformers on random-weight SamConfigs built here (tests/sam_reference.py; no SAM
weights are reachable): SamModel's iou_scores and pred_masks within 1e-4 relative for point, multi-point, box,
box + point, padded-point, several-prompt and mask-input prompts, with and without multimask output, on every
device, for a small and a pruned SlimSAM-like config; SamProcessor's pixel values and post_process_masks
(>= 99.9% of pixels); the automatic generator against transformers' mask-generation pipeline; `ember segment`;
the embedding cache; hostile input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sam_reference import CONFIGS, build, mask_generation_pipeline, processor, scene, write_config

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")

from ember.errors import EmberError, FormatError, LimitError  # noqa: E402
from ember.models.sam.config import SamConfig, SamConfigError  # noqa: E402
from ember.models.sam.model import load_model  # noqa: E402
from ember.models.sam.predict import PromptError, load_segmenter  # noqa: E402

PROMPTS = {  # model-frame prompts as transformers' SamModel takes them
    "point": dict(input_points=[[[[30.0, 40.0]]]], input_labels=[[[1]]]),
    "points": dict(input_points=[[[[30.0, 40.0], [70.5, 81.0], [5.0, 90.0]]]], input_labels=[[[1, 0, 1]]]),
    "box": dict(input_boxes=[[[10.0, 20.0, 80.0, 90.0]]]),
    "box_point": dict(input_points=[[[[30.0, 40.0]]]], input_labels=[[[0]]], input_boxes=[[[10.0, 20.0, 80.0, 90.0]]]),
    "padded": dict(input_points=[[[[30.0, 40.0], [-10.0, -10.0]]]], input_labels=[[[1, -10]]]),
    "two_prompts": dict(input_points=[[[[30.0, 40.0]], [[60.0, 61.0]]]], input_labels=[[[1], [0]]]),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for name in CONFIGS:
        folder = tmp_path_factory.mktemp(f"sam_{name}")
        out[name] = (build(name, folder), folder)
    return out


def _close(got, want, rtol=1e-4):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


@pytest.mark.parametrize("name", ["small", "slim"])
def test_model_matches_transformers(models, name, device):
    ref, folder = models[name]
    size = CONFIGS[name][0]["image_size"]
    model = load_model(folder, device=device)
    x = np.random.default_rng(0).normal(size=(1, 3, size, size)).astype(np.float32)
    with torch.no_grad():
        emb_ref = ref.get_image_embeddings(torch.tensor(x))
    emb = model.get_image_embeddings(x)
    _close(emb.numpy(), emb_ref.numpy())
    for kind, kw in PROMPTS.items():
        for multimask in (True, False):
            with torch.no_grad():
                want = ref(image_embeddings=emb_ref, multimask_output=multimask,
                           **{k: torch.tensor(np.array(v)) for k, v in kw.items()})
            got = model(image_embeddings=emb, multimask_output=multimask, **{k: np.array(v) for k, v in kw.items()})
            assert tuple(got.pred_masks.shape) == tuple(want.pred_masks.shape), kind
            _close(got.pred_masks.numpy(), want.pred_masks.numpy())
            _close(got.iou_scores.numpy(), want.iou_scores.numpy())
    side = 4 * (size // 8)
    logits = np.random.default_rng(1).normal(size=(1, 1, side, side)).astype(np.float32)
    with torch.no_grad():  # SAM's refinement input: an earlier low-resolution mask, plus the whole forward at once
        want = ref(pixel_values=torch.tensor(x), input_points=torch.tensor([[[[30.0, 40.0]]]]),
                   input_masks=torch.tensor(logits))
    got = model(pixel_values=x, input_points=np.array([[[[30.0, 40.0]]]]), input_masks=logits)
    _close(got.pred_masks.numpy(), want.pred_masks.numpy())
    _close(got.iou_scores.numpy(), want.iou_scores.numpy())


def test_config_parameter_count_is_transformers(models):
    for ref, folder in models.values():
        cfg = SamConfig.from_dict(json.loads((folder / "config.json").read_text()))
        assert cfg.n_parameters() == sum(p.numel() for p in ref.parameters())


def test_tied_positional_matrix_in_older_checkpoints_loads(models, tmp_path):
    """Older conversions also store prompt_encoder.shared_embedding.positional_embedding (tied to the shared one)."""
    import shutil

    import ember
    ref, folder = models["small"]
    sd = ember.load(folder / "model.safetensors")
    sd["prompt_encoder.shared_embedding.positional_embedding"] = sd["shared_image_embedding.positional_embedding"]
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    ember.save(sd, tmp_path / "model.safetensors")
    np.testing.assert_array_equal(load_model(tmp_path).shared_image_embedding.positional_embedding.numpy(),
                                  ref.shared_image_embedding.positional_embedding.detach().numpy())


# ---------------------------------------------------------------------------- the processor, in original pixels

USER_PROMPTS = [dict(points=[(400, 650)], labels=[1]), dict(boxes=[(50, 200, 700, 900)]),
                dict(points=[(400, 650), (100, 100)], labels=[1, 0], boxes=[(50, 200, 700, 900)])]


@pytest.fixture(scope="module")
def bus():
    from ember.models.yolo.fetch import ensure_file
    return np.asarray(PIL.open(ensure_file("bus.jpg")).convert("RGB"))


@pytest.mark.parametrize("k", range(len(USER_PROMPTS)), ids=["point", "box", "points_box"])
def test_processor_and_post_processing_match_samprocessor(models, bus, k):
    """pixel_values equal SamProcessor's; the masks in original pixels equal post_process_masks on >= 99.9% of
    pixels, and so do our post-processed masks of the reference's own logits (the processor alone)."""
    ref, folder = models["proc"]
    prompt = USER_PROMPTS[k]
    kw = {}
    if "points" in prompt:
        kw.update(input_points=[[list(map(list, prompt["points"]))]], input_labels=[[prompt["labels"]]])
    if "boxes" in prompt:
        kw["input_boxes"] = [list(map(list, prompt["boxes"]))]
    proc = processor()
    inp = proc(images=PIL.fromarray(bus), return_tensors="pt", **kw)
    seg = load_segmenter(folder)
    seg.set_image(bus)
    pixels, original, resized = seg.pre.preprocess(bus)
    np.testing.assert_array_equal(pixels, inp["pixel_values"].numpy())
    assert original == tuple(inp["original_sizes"][0].tolist())
    assert resized == tuple(inp["reshaped_input_sizes"][0].tolist())
    with torch.no_grad():
        out = ref(**{k: v for k, v in inp.items() if k not in ("original_sizes", "reshaped_input_sizes")})
    want = proc.post_process_masks(out.pred_masks, inp["original_sizes"], inp["reshaped_input_sizes"])[0].numpy()
    got = seg.predict(**prompt)
    _close(got["scores"], out.iou_scores.numpy()[0])
    assert got["masks"].shape == want.shape == (1, 3) + bus.shape[:2]
    assert 0.05 < want.mean() < 0.95  # masks with both values
    assert (got["masks"] == want).mean() >= 0.999
    own = seg.pre.post_process_masks(out.pred_masks.numpy()[0], original, resized)
    assert (own == want).mean() >= 0.999


def test_second_click_does_not_rerun_the_encoder(models):
    _, folder = models["proc"]
    seg = load_segmenter(folder)
    img = scene()
    assert seg.set_image(img) and seg.encoder_runs == 1
    a = seg.predict(points=[(100, 100)])
    assert not seg.set_image(img.copy()) and seg.encoder_runs == 1  # same pixels, same embedding
    b = seg.predict(points=[(100, 100), (450, 120)], labels=[1, 0])
    assert seg.encoder_runs == 1 and a["masks"].shape == b["masks"].shape
    assert seg.set_image(img[::-1].copy()) and seg.encoder_runs == 2


# ---------------------------------------------------------------------------- automatic mask generation

GEN = dict(points_per_crop=6, points_per_batch=16, pred_iou_thresh=0.0, stability_score_thresh=0.5,
           stability_score_offset=0.02, mask_threshold=0.8, crops_nms_thresh=0.7)


def test_generator_matches_the_mask_generation_pipeline(models):
    """A 6 x 6 grid on the flat-coloured scene: thresholds for the random model (its logits are not SAM's) keep
    several masks that NMS then thins out; the masks, scores and boxes equal the pipeline's, in order."""
    from ember.models.sam.generate import generate
    ref, folder = models["proc"]
    img = scene()
    want = mask_generation_pipeline(ref)(PIL.fromarray(img), output_bboxes_mask=True, **GEN)
    got = generate(load_model(folder), img, **GEN)
    assert len(want["masks"]) >= 3 and len(got["masks"]) == len(want["masks"])
    _close(got["scores"], want["scores"].numpy())
    np.testing.assert_array_equal(got["boxes"], want["bounding_boxes"].numpy())
    for a, b in zip(got["masks"], want["masks"]):
        assert (a == b).mean() >= 0.999


def test_generator_reuses_the_segmenters_embedding(models):
    from ember.models.sam.generate import generate
    _, folder = models["proc"]
    seg = load_segmenter(folder)
    img = scene()
    seg.set_image(img)
    first = generate(seg.model, img, seg, **GEN)
    assert seg.encoder_runs == 1
    again = generate(seg.model, img, **GEN)  # a fresh segmenter: embeds the image itself
    assert [m.sum() for m in first["masks"]] == [m.sum() for m in again["masks"]]


# ---------------------------------------------------------------------------- ember segment

def test_cli_segment(models, tmp_path, capsys):
    import argparse

    from ember.models.common.rle import mask_box
    from ember.models.sam import cli
    ref, folder = models["proc"]
    img = scene()
    PIL.fromarray(img).save(tmp_path / "scene.png")
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    args = p.parse_args(["segment", str(tmp_path / "scene.png"), "--model", str(folder), "--point", "100,100",
                         "--point", "450,120,0", "--json", "--out", str(tmp_path / "m.png"),
                         "--cutout", str(tmp_path / "c.png")])
    assert cli.main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    proc = processor()
    inp = proc(images=PIL.fromarray(img), input_points=[[[[100, 100], [450, 120]]]], input_labels=[[[1, 0]]],
               return_tensors="pt")
    with torch.no_grad():
        out = ref(**{k: v for k, v in inp.items() if k not in ("original_sizes", "reshaped_input_sizes")})
    masks = proc.post_process_masks(out.pred_masks, inp["original_sizes"], inp["reshaped_input_sizes"])[0][0].numpy()
    scores = out.iou_scores.numpy()[0, 0]
    assert [r["mask"] for r in rows] == [0, 1, 2]
    _close(np.array([r["score"] for r in rows]), scores, rtol=1e-3)
    for r, m in zip(rows, masks):
        assert abs(r["area"] - m.sum()) <= 1e-3 * m.size and r["box"] == mask_box(m)
    written = np.asarray(PIL.open(tmp_path / "m.png"))
    best = masks[int(np.argmax(scores))]
    assert written.shape == best.shape and ((written > 0) == best).mean() >= 0.999
    rgba = np.asarray(PIL.open(tmp_path / "c.png"))
    assert rgba.shape == img.shape[:2] + (4,) and (rgba[..., 3] == written).all()
    assert (rgba[..., :3][written > 0] == img[written > 0]).all()
    args = p.parse_args(["segment", str(tmp_path / "scene.png"), "--model", str(folder), "--box", "40,40,260,200",
                         "--box", "380,250,560,420", "--single", "--json"])
    assert cli.main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["prompt"], r["mask"]) for r in rows] == [(0, 0), (1, 0)]


# ---------------------------------------------------------------------------- hostile input

def test_hostile_prompts(models):
    _, folder = models["proc"]
    seg = load_segmenter(folder)
    seg.set_image(scene())
    cases = [(dict(points=[(700, 10)]), "outside the 640x480 image"),
             (dict(points=[(-1, 10)]), "outside"),
             (dict(boxes=[(0, 0, 10, 500)]), "outside"),
             (dict(points=[(float("nan"), 3)]), "finite"),
             (dict(points=[(1, float("inf"))]), "finite"),
             (dict(points=np.full((10_000, 2), 5.0)), "10000 points, over the limit of 64"),
             (dict(points=[(5, 5)], labels=[2]), "labels must be one 0"),
             (dict(points=[(5, 5)], labels=[1, 1]), "labels must be one 0"),
             (dict(boxes=[(50, 50, 10, 10)]), "x0 <= x1"),
             (dict(points=[(1, 2, 3)]), "each point is 2 numbers"),
             (dict(points=[(5, 5)], boxes=[(0, 0, 9, 9), (1, 1, 9, 9)]), "at most one box"),
             (dict(), "at least one point or one box"),
             (dict(points=[("a", 1)]), "must be numbers")]
    for kw, msg in cases:
        with pytest.raises(PromptError, match=msg):
            seg.predict(**kw)


def test_hostile_images(models):
    from ember.models.common.image import ImageError
    _, folder = models["proc"]
    seg = load_segmenter(folder)
    with pytest.raises(ImageError, match="50000x2 image resizes to 1024x0"):  # 100k pixels, inside the budget
        seg.set_image(np.zeros((2, 50_000, 3), np.uint8))
    wide = np.zeros((30, 50_000, 3), np.uint8)  # 50,000 pixels wide and usable: 30 rows resize to 1
    wide[:, 20_000:30_000] = 200
    seg.set_image(wide)
    out = seg.predict(points=[(25_000, 10)])
    assert out["masks"].shape == (1, 3, 30, 50_000) and out["masks"].dtype == bool
    with pytest.raises(LimitError, match="max_pixels"):
        import io
        buf = io.BytesIO()
        PIL.new("L", (50_000, 1_100)).save(buf, format="PNG")  # 55 MP in the header, refused before decoding
        seg.set_image(buf.getvalue())


@pytest.mark.parametrize("change,msg", [
    ({"vision_config.hidden_size": 1 << 30}, "vision_config.hidden_size is 1073741824, over the limit"),
    ({"vision_config.num_hidden_layers": 100_000}, "num_hidden_layers is 100000, over the limit"),
    ({"vision_config.image_size": 1001}, "image_size must be a multiple of patch_size"),
    ({"vision_config.num_attention_heads": 7}, "multiple of num_attention_heads"),
    ({"vision_config.global_attn_indexes": [99]}, "global_attn_indexes"),
    ({"vision_config.mlp_dim": "big"}, "is not an integer"),
    ({"vision_config.layer_norm_eps": float("nan")}, "finite"),
    ({"vision_config.layer_norm_eps": "nan"}, "must be a number, got 'nan'"),
    ({"mask_decoder_config.hidden_size": 64}, "must be equal"),
    ({"vision_config.mlp_dim": 41}, "describes a SamModel of .* parameters but the weights hold"),
    ({"vision_config": [1, 2]}, "vision_config must be an object"),
])
def test_hostile_configs(models, tmp_path, change, msg):
    import shutil
    _, folder = models["small"]
    for f in ("config.json", "model.safetensors"):
        shutil.copy(folder / f, tmp_path / f)
    write_config(tmp_path, **change)
    with pytest.raises(FormatError, match=msg):
        load_model(tmp_path)


def test_config_errors_are_ember_errors():
    assert issubclass(SamConfigError, EmberError) and issubclass(PromptError, EmberError)
    with pytest.raises(SamConfigError, match="must be a JSON object, got list"):
        SamConfig.from_dict([])


# ---------------------------------------------------------------------------- the page's tool, in CPython

def test_page_tool_caches_the_embedding_and_gives_the_segmenters_masks(models):
    """wasm/tools/segment.py through worker_api.handle: the image once with its id, then clicks by id alone; the
    masks are the Segmenter's, the encoder runs once, an unknown id asks for the image, "everything" (with the
    pipeline's filters passed through) gives the label map of the generator's masks."""
    import asyncio

    from ember.models.sam.generate import generate
    from ember.wasm import worker_api
    from ember.wasm.tools import segment as segment_tool
    _, folder = models["proc"]
    img = scene()
    h, w = img.shape[:2]
    rgba = {"rgba": np.concatenate([img, np.full((h, w, 1), 255, np.uint8)], 2).tobytes(), "width": w, "height": h}

    def call(op, **args):
        r = asyncio.run(worker_api.handle(op, args))
        assert "ok" in r, r
        return r["ok"]
    info = call("load", tool="segment", folder=str(folder), device="cpu")
    assert info["image_size"] == 1024 and info["encoder_runs"] == 0
    seg = load_segmenter(folder)
    seg.set_image(img)
    first = call("run", tool="segment", input=rgba, opts={"image_id": "a", "points": [[100, 100, 1]]})
    assert first["encoder_runs"] == 1 and first["encode_ms"] > 0 and first["count"] == 3
    want = seg.predict(points=[(100, 100)], labels=[1])
    got = np.frombuffer(first["masks"], np.uint8).reshape(3, h, w).astype(bool)
    np.testing.assert_array_equal(got, want["masks"][0])
    second = call("run", tool="segment", input=None, opts={"image_id": "a", "points": [[100, 100, 1], [450, 120, 0]],
                                                          "box": [40, 40, 260, 200], "multimask": False})
    assert second["encoder_runs"] == 1 and second["encode_ms"] == 0 and second["decoder_runs"] == 2
    want = seg.predict(points=[(100, 100), (450, 120)], labels=[1, 0], boxes=[(40, 40, 260, 200)],
                       multimask_output=False)
    np.testing.assert_array_equal(np.frombuffer(second["masks"], np.uint8).reshape(1, h, w).astype(bool),
                                  want["masks"][0])
    unknown = call("run", tool="segment", input=None, opts={"image_id": "b", "points": [[1, 1, 1]]})
    assert unknown == {"need_image": True}
    bad = asyncio.run(worker_api.handle("run", {"tool": "segment", "input": None,
                                                "opts": {"image_id": "a", "points": [[9999, 1, 1]]}}))
    assert bad["error"] == "bad_request" and "outside the 640x480 image" in bad["message"]
    filters = {k: v for k, v in GEN.items() if k in segment_tool.FILTERS}  # thresholds the random model passes
    every = call("run", tool="segment", input=None, opts={"image_id": "a", "everything": True, "points_per_side": 6,
                                                         **filters})
    assert every["encoder_runs"] == 1
    ref = generate(seg.model, img, seg, points_per_crop=6, **filters)
    labels = np.frombuffer(every["labels"], "<u2").reshape(h, w)
    assert every["count"] == len(ref["masks"]) >= 3
    assert every["scores"] == [round(float(s), 5) for s in ref["scores"]]
    want = np.zeros((h, w), "<u2")
    for k in range(len(ref["masks"]) - 1, -1, -1):  # the best mask on top
        want[ref["masks"][k]] = k + 1
    np.testing.assert_array_equal(labels, want)
