"""Image in, detections out: load -> letterbox -> model -> NMS -> boxes in original-image pixels."""
from __future__ import annotations

import numpy as np

from .image import load_image, preprocess
from .nms import postprocess


def run_model(model, x: np.ndarray) -> np.ndarray:
    """(b, 3, H, W) float32 -> the raw head output (b, 4 + nc [+ nk], A) as numpy, on the model's device."""
    import ember
    dev = next(iter(model.parameters())).device
    with ember.no_grad():
        return model(ember.tensor(x, device=dev)).numpy()


def detect(model, image, conf: float = 0.25, iou: float = 0.45, max_det: int = 300) -> list[dict]:
    """image: path, encoded bytes or (H, W, 3) uint8 RGB array. Returns detections, highest score first:
    {"class", "label", "score", "box": [x1, y1, x2, y2]} (+ "keypoints": [[x, y(, visibility)], ...] for
    pose models), coordinates in original-image pixels."""
    cfg = model.cfg
    img = load_image(image)
    x, lb = preprocess(img, cfg.imgsz)                                          # (1, 3, S, S)
    rows = postprocess(run_model(model, x)[0], conf, iou, cfg.nc, max_det=max_det)  # (n, 6 + nk)
    boxes = lb.to_original(rows[:, :4])
    out = []
    for r, box in zip(rows, boxes):
        d = {"class": int(r[5]), "label": cfg.label(r[5]), "score": float(r[4]), "box": [float(v) for v in box]}
        if cfg.kpt_shape:
            k = r[6:].reshape(cfg.kpt_shape).astype(np.float64)                 # (K, 2|3)
            k[:, 0] = ((k[:, 0] - lb.left) / lb.ratio).clip(0, lb.orig_shape[1])
            k[:, 1] = ((k[:, 1] - lb.top) / lb.ratio).clip(0, lb.orig_shape[0])
            d["keypoints"] = k.tolist()
        out.append(d)
    return out
