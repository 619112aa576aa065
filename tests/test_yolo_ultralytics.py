"""YOLOv8 against Ultralytics itself (8.4.190), run in a separate venv because ultralytics needs a
torchvision that does not load beside this environment's torch 2.13:

    python -m venv --system-site-packages ~/.cache/ember/venv-ultra    # ember.hub.cache_dir("venv-ultra")
    ~/.cache/ember/venv-ultra/bin/pip install ultralytics==8.4.190   # pulls torch/torchvision/opencv into the venv

One module fixture runs tests/yolo_reference.py there once (arrays in and out via .npz): its
LetterBox and cv2.resize, random seeded yolov8n and yolov8n-pose models (BatchNorm statistics
randomized) and yolo11n and yolo11n-pose models (BatchNorm statistics from bus.jpg, so their
detections depend on the image), saved as .pt checkpoints that ember converts, its
non_max_suppression, random calibrated yolov8n-seg and yolo11n-seg models (boxes and masks), and YOLO(...).predict
on the test images with predict's own defaults (rect
letterbox, conf 0.25, iou 0.7) and with rect=False (ember's --square).
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ember.hub import cache_dir
from ember.models.yolo.fetch import ensure_file
from ember.models.yolo.image import letterbox, load_image, preprocess, resize_linear
from ember.models.yolo.load import load_model
from ember.models.yolo.nms import postprocess
from ember.models.yolo.predict import CONF, IOU, detect, run_model

VENV_PY = cache_dir("venv-ultra", "bin", "python")
IMAGES = ("bus", "zidane")
RESIZES = [((1080, 810), (640, 480)), ((720, 1280), (360, 640)), ((37, 53), (64, 91)),
           ((500, 333), (640, 426)), ((101, 203), (40, 81)), ((5, 640), (3, 320)), ((2, 3), (7, 5))]
X_SHAPE = (2, 3, 64, 96)
POSE_CONF = 0.01  # the random pose model scores at most ~0.013 on bus.jpg; this keeps a handful

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    if not VENV_PY.is_file():
        pytest.skip(f"no ultralytics venv at {VENV_PY} (see this file's docstring)")
    ort = pytest.importorskip("onnxruntime")
    work = tmp_path_factory.mktemp("ultra")
    rng = np.random.default_rng(0)
    inp = {"images": ",".join(IMAGES), "fall_pt": str(ensure_file("best.pt")), "n_resize": len(RESIZES),
           "pose_conf": POSE_CONF,
           "x": rng.random(X_SHAPE, dtype=np.float32)}
    for name in IMAGES:
        inp[f"img_{name}"] = load_image(ensure_file(f"{name}.jpg"))
    for i, (src, dst) in enumerate(RESIZES):
        inp[f"resize_src{i}"] = rng.integers(0, 256, src + (3,), dtype=np.uint8)
        inp[f"resize_to{i}"] = np.array(dst)
    sess = ort.InferenceSession(str(ensure_file("best_fp16.onnx")), providers=["CPUExecutionProvider"])
    inp["onnx_out"] = sess.run(None, {"images": preprocess(inp["img_bus"], square=True)[0]})[0]
    np.savez(work / "in.npz", **inp)
    env = dict(os.environ, YOLO_OFFLINE="1", YOLO_VERBOSE="False")
    r = subprocess.run([str(VENV_PY), str(Path(__file__).with_name("yolo_reference.py")), str(work / "in.npz"),
                        str(work / "out.npz"), str(work)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return dict(inp=inp, out=dict(np.load(work / "out.npz")), work=work)


@pytest.mark.parametrize("i", range(len(RESIZES)))
def test_resize_is_cv2_inter_linear(ref, i):
    src, dst = ref["inp"][f"resize_src{i}"], RESIZES[i][1]
    np.testing.assert_array_equal(resize_linear(src, *dst), ref["out"][f"resize_{i}"])


@pytest.mark.parametrize("square", [False, True], ids=["rect", "square"])
@pytest.mark.parametrize("name", IMAGES)
def test_letterbox_matches_ultralytics(ref, name, square):
    got, _ = letterbox(ref["inp"][f"img_{name}"], 640, square=square)
    want = ref["out"][f"letterbox_{'square_' if square else ''}{name}"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


RANDOM_MODELS = {"yolov8n": (8, 80, None), "yolov8n_pose": (8, 1, (17, 3)),   # (version, nc, kpt_shape)
                 "yolo11n": (11, 80, None), "yolo11n_pose": (11, 80, (17, 3))}  # yolo11-pose.yaml says nc: 80


def _assert_raw_outputs(ref, key, device, x):
    model = load_model(ref["work"] / f"{key}.pt", device=device)
    assert (model.cfg.version, model.cfg.nc, model.cfg.kpt_shape) == RANDOM_MODELS[key]
    want = ref["out"][f"raw_{key}"]                                    # (b, 4 + nc [+ 51], anchors)
    got = run_model(model, x)
    assert got.shape == want.shape
    # boxes/keypoints in input pixels, class scores as probabilities; BN folded in float64 here, float32 there, and
    # the 3x3 convs of 32+ channels Winograd's here (a keypoint of the random yolo11n-pose 2.9e-3 px off torch's)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-3)
    assert np.abs(want[:, :4]).max() > 10 and want[:, 4:84].std() > 0  # non-trivial outputs


@pytest.mark.parametrize("key", ["yolov8n", "yolov8n_pose"])
def test_random_model_raw_outputs(ref, key, device):
    _assert_raw_outputs(ref, key, device, ref["inp"]["x"])


@pytest.mark.parametrize("key", ["yolo11n", "yolo11n_pose"])
def test_yolo11_raw_outputs(ref, key):
    """On the letterboxed bus.jpg the models were calibrated on (yolo_reference.calibrate); cpu only, as
    640x480 is minutes on a software WebGPU adapter (the ops are the YOLOv8 ones plus attention)."""
    x = ref["out"][f"letterbox_{IMAGES[0]}"].transpose(2, 0, 1)[None].astype(np.float32) / 255
    _assert_raw_outputs(ref, key, "cpu", x)


SEG = ["yolov8n_seg", "yolo11n_seg"]


def _mask_iou(a, b):
    return np.logical_and(a, b).sum() / max(np.logical_or(a, b).sum(), 1)


@pytest.mark.parametrize("key", SEG)
def test_segmentation_raw_outputs_and_prototypes(ref, key):
    """On the letterboxed bus.jpg the models were calibrated on: head output with mask coefficients, and the
    prototypes, as ultralytics' forward gives them."""
    model = load_model(ref["work"] / f"{key}.pt")
    assert model.cfg.task == "segment" and (model.cfg.nm, model.cfg.npr) == (32, 64)
    x = ref["out"][f"letterbox_{IMAGES[0]}"].transpose(2, 0, 1)[None].astype(np.float32) / 255
    raw, proto = run_model(model, x)
    for got, want in ((raw, ref["out"][f"raw_{key}"]), (proto, ref["out"][f"proto_{key}"])):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("key", SEG)
def test_segmentation_predict_matches_ultralytics(ref, key):
    """`YOLO(yolov8n-seg.pt).predict(bus.jpg)` at its defaults: the same boxes, classes and scores, each mask at
    the input size (predict's masks.data) and scaled to the image (scale_masks) with IoU >= 0.99."""
    from ember.models.yolo.image import preprocess
    from ember.models.yolo.masks import process_mask
    model = load_model(ref["work"] / f"{key}.pt")
    img = ref["inp"][f"img_{IMAGES[0]}"]
    dets = detect(model, img)
    want = ref["out"][f"predict_{key}"]
    assert len(want) >= 5
    _assert_same_detections(dets, want)
    x, lb = preprocess(img)
    raw, proto = run_model(model, x)
    rows = postprocess(raw[0], CONF, IOU, model.cfg.nc)
    masks = process_mask(proto[0], rows[:, 6:], rows[:, :4], x.shape[2:])
    masks = masks[masks.any((1, 2))]
    want_in, want0 = ref["out"][f"masks_{key}"].astype(bool), ref["out"][f"masks0_{key}"]
    assert masks.shape == want_in.shape and len(dets) == len(want0)
    assert all(_mask_iou(a, b) >= 0.99 for a, b in zip(masks, want_in))
    assert all(_mask_iou(d["mask"], b) >= 0.99 for d, b in zip(dets, want0))
    assert all(want_in.any((1, 2))) and 0.001 < np.mean([m.mean() for m in want0]) < 0.5  # masks, not full frames


def test_segmentation_json_and_safetensors_round_trip(ref, tmp_path, capsys):
    """`ember convert yolo` of a seg checkpoint keeps nm/npr; `ember yolo --json` prints each mask as an RLE, and
    the page's tool gives the same detections and masks."""
    import argparse
    import json

    from ember.models.common.rle import rle_to_mask
    from ember.models.yolo import cli
    from ember.models.yolo.convert import convert
    out = convert(ref["work"] / "yolov8n_seg.pt", tmp_path / "seg.safetensors")
    a = load_model(out)
    assert a.cfg == load_model(ref["work"] / "yolov8n_seg.pt").cfg and a.cfg.task == "segment"
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    assert cli.main(p.parse_args(["yolo", str(ensure_file(f"{IMAGES[0]}.jpg")), "--model", str(out), "--json"])) == 0
    dets = json.loads(capsys.readouterr().out)
    want0 = ref["out"]["masks0_yolov8n_seg"]
    assert len(dets) == len(want0)
    assert all(_mask_iou(rle_to_mask(d["mask"]), b) >= 0.99 for d, b in zip(dets, want0))
    # the page's tool (wasm/tools/yolo.py, as the worker runs it) on the same file prints what the CLI prints
    import asyncio

    from ember.wasm.tools import yolo as yolo_tool
    (tmp_path / "page").mkdir()
    (tmp_path / "page" / "model.safetensors").symlink_to(out)
    assert yolo_tool.load(str(tmp_path / "page"), "cpu")["task"] == "segment"
    page = asyncio.run(yolo_tool.run(ensure_file(f"{IMAGES[0]}.jpg").read_bytes(), {}))
    assert json.loads(json.dumps(page["detections"])) == dets


@pytest.mark.parametrize("conf,iou", [(0.25, 0.45), (0.05, 0.7)])
def test_nms_matches_ultralytics(ref, conf, iou):
    got = postprocess(ref["inp"]["onnx_out"][0], conf, iou)
    want = ref["out"][f"nms_{conf}_{iou}"]                            # (n, 6) xyxy, score, class
    assert got.shape == want.shape and len(want) > 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-4)


def _assert_same_detections(dets, want, box_atol=1.0):
    """ember's detections vs ultralytics' (n, 6) [x1, y1, x2, y2, score, class] rows, both best first."""
    assert len(dets) == len(want) > 0
    np.testing.assert_array_equal([d["class"] for d in dets], want[:, 5])
    np.testing.assert_allclose([d["score"] for d in dets], want[:, 4], atol=1e-3)
    np.testing.assert_allclose([d["box"] for d in dets], want[:, :4], atol=box_atol)


@pytest.mark.parametrize("square", [False, True], ids=["predict_defaults", "rect_false"])
@pytest.mark.parametrize("name", IMAGES)
def test_end_to_end_matches_ultralytics_predict(ref, name, square):
    """`YOLO(best.pt).predict(img)` with its defaults equals ember's defaults; rect=False equals square."""
    model = load_model(ensure_file("best.pt"))
    dets = detect(model, ref["inp"][f"img_{name}"], square=square)
    _assert_same_detections(dets, ref["out"][f"pred_{'square_' if square else ''}{name}"])


def test_rect_input_is_smaller_than_square(ref):
    from ember.models.yolo.image import input_shape
    assert input_shape(*ref["inp"]["img_bus"].shape[:2]) == (640, 480)      # 1080x810 portrait
    assert input_shape(*ref["inp"]["img_zidane"].shape[:2]) == (384, 640)   # 720x1280 landscape
    assert input_shape(1080, 810, square=True) == (640, 640)


def test_pose_predict_matches_ultralytics(ref):
    """Boxes and keypoints of the random pose model, mapped back from the rect input. Its untrained
    head scores many degenerate boxes alike (to 1e-6) from the 7th on, where NMS order is a coin toss:
    compare the best five, and the count."""
    model = load_model(ref["work"] / "yolov8n_pose.pt")
    dets = detect(model, ref["inp"][f"img_{IMAGES[0]}"], conf=POSE_CONF)
    want, kpts = ref["out"]["predict_yolov8n_pose"], ref["out"]["kpts_yolov8n_pose"]  # (n, 6), (n, 17, 3)
    assert abs(len(dets) - len(want)) <= 0.2 * len(want)
    _assert_same_detections(dets[:5], want[:5])
    np.testing.assert_allclose([d["keypoints"] for d in dets[:5]], kpts[:5], atol=1.0)


@pytest.mark.parametrize("key", ["yolo11n", "yolo11n_pose"])
def test_yolo11_cli_matches_ultralytics_predict(ref, key, capsys):
    """`ember yolo bus.jpg --model yolo11n.pt` equals `YOLO(yolo11n.pt).predict(bus.jpg)`, both with their
    defaults: every detection's class, score and box (and keypoints for pose)."""
    import argparse
    import json

    from ember.models.yolo import cli
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    args = p.parse_args(["yolo", str(ensure_file(f"{IMAGES[0]}.jpg")), "--model", str(ref["work"] / f"{key}.pt"),
                         "--json"])
    assert cli.main(args) == 0
    dets = json.loads(capsys.readouterr().out)
    want = ref["out"][f"predict_{key}"]
    assert len(want) >= 10 and len(np.unique(want[:, 5])) > 3  # many boxes of several classes
    _assert_same_detections(dets, want)
    if key.endswith("pose"):
        np.testing.assert_allclose([d["keypoints"] for d in dets], ref["out"][f"kpts_{key}"], atol=1.0)


def test_yolo11_converted_safetensors_round_trip(ref, tmp_path):
    """`ember convert yolo` of a YOLO11 checkpoint: the file names its arch and loads to the same model."""
    import ember
    from ember.models.yolo.convert import convert
    out = convert(ref["work"] / "yolo11n_pose.pt", tmp_path / "y11.safetensors")
    assert ember.io.metadata(out)["ember.arch"] == "yolo11"
    a, b = load_model(out), load_model(ref["work"] / "yolo11n_pose.pt")
    assert type(a).__name__ == "YOLO11" and a.cfg == b.cfg
    # ONNX exports carry no yaml: the same config follows from the weight names and shapes alone
    from ember.models.yolo.config import YoloConfig
    shapes = {k: tuple(v.shape) for k, v in ember.load(out).items()}
    assert YoloConfig.infer(shapes, names=a.cfg.names) == a.cfg
    np.testing.assert_array_equal(run_model(a, ref["inp"]["x"]), run_model(b, ref["inp"]["x"]))
