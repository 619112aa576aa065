"""Image in, detections out: load -> letterbox -> model -> NMS -> boxes (and masks) in original-image pixels.
The defaults are Ultralytics `predict`'s: a rectangular letterbox (long side imgsz, short side padded
to the next multiple of the stride), conf 0.25, iou 0.7, max_det 300, class-aware NMS."""
from __future__ import annotations

import numpy as np

from ..common.rle import mask_to_rle
from .image import load_image, preprocess
from .masks import process_mask, to_original
from .nms import postprocess

CONF, IOU, MAX_DET = 0.25, 0.7, 300
STAGES = ("preprocess", "model", "nms")  # the stages detect_steps goes through, in order


def run_model(model, x: np.ndarray):
    """(b, 3, H, W) float32 -> the raw head output (b, 4 + nc [+ nk | nm], A) as numpy, on the model's device;
    segmentation models: (that, prototypes (b, nm, H/4, W/4))."""
    import ember
    dev = next(iter(model.parameters())).device
    with ember.no_grad():
        out = model(ember.tensor(x, device=dev))
    return (out[0].numpy(), out[1].numpy()) if isinstance(out, tuple) else out.numpy()


def detect(model, image, conf: float = CONF, iou: float = IOU, max_det: int = MAX_DET, square: bool = False,
           agnostic: bool = False) -> list[dict]:
    """image: path, encoded bytes or (H, W, 3) uint8 RGB array. Returns detections, highest score first:
    {"class", "label", "score", "box": [x1, y1, x2, y2]} (+ "keypoints": [[x, y(, visibility)], ...] for
    pose models, + "mask": (H, W) bool for segmentation models), coordinates in original-image pixels. square: pad to (imgsz, imgsz) as a fixed-size
    ONNX export needs (Ultralytics rect=False)."""
    steps = detect_steps(model, image, conf, iou, max_det, square, agnostic)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def detect_steps(model, image, conf: float = CONF, iou: float = IOU, max_det: int = MAX_DET,
                 square: bool = False, agnostic: bool = False):
    """detect() as a generator: yields (stage, fraction of it done) with stage "preprocess", "model" or
    "nms": (stage, 0.0) before each stage, and ("model", k / n) after each of the model's n layer groups;
    returns the detections. A caller can report progress and stop between them (the page's worker awaits
    at each; closing the generator cancels the rest)."""
    import ember
    cfg = model.cfg
    yield "preprocess", 0.0
    img = load_image(image)
    x, lb = preprocess(img, cfg.imgsz, square=square, stride=max(cfg.strides))   # (1, 3, H', W')
    yield "model", 0.0
    with ember.no_grad():
        layers = model.forward_steps(ember.tensor(x, device=next(iter(model.parameters())).device))
        while True:
            try:
                k = next(layers)
            except StopIteration as done:
                out = done.value
                protos = out[1].numpy()[0] if isinstance(out, tuple) else None    # (nm, H/4, W/4)
                raw = (out[0] if isinstance(out, tuple) else out).numpy()[0]       # (4 + nc [+ nk | nm], A)
                break
            if k < model.FORWARD_STEPS:
                yield "model", k / model.FORWARD_STEPS
    yield "nms", 0.0
    rows = postprocess(raw, conf, iou, cfg.nc, agnostic=agnostic, max_det=max_det)  # (n, 6 + nk | nm)
    masks = None
    if protos is not None:  # predict drops the detections whose cropped mask came out empty
        masks = process_mask(protos, rows[:, 6:], rows[:, :4], x.shape[2:])      # (n, H', W') bool
        keep = masks.any((1, 2))
        rows, masks = rows[keep], masks[keep]
    boxes = lb.to_original(rows[:, :4])
    out = []
    for i, (r, box) in enumerate(zip(rows, boxes)):
        d = {"class": int(r[5]), "label": cfg.label(r[5]), "score": float(r[4]), "box": [float(v) for v in box]}
        if cfg.kpt_shape:
            k = r[6:].reshape(cfg.kpt_shape).astype(np.float64)                 # (K, 2|3)
            k[:, :2] = lb.to_original(k[:, :2])
            d["keypoints"] = k.tolist()
        if masks is not None:
            d["mask"] = to_original(masks[i], lb)
        out.append(d)
    return out


def rounded(d: dict) -> dict:
    """A detection as `ember yolo --json` and the page print it: score to 5 places, box and keypoints to 2, a
    mask as COCO's uncompressed run-length encoding ({"size": [H, W], "counts": [...]}, column-major)."""
    out = dict(d, score=round(d["score"], 5), box=[round(v, 2) for v in d["box"]])
    if "keypoints" in d:
        out["keypoints"] = [[round(v, 2) for v in k] for k in d["keypoints"]]
    if "mask" in d:
        out["mask"] = mask_to_rle(d["mask"])
    return out
